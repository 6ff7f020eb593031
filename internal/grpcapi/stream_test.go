package grpcapi

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// serveKV serves kv on 127.0.0.1 and returns a client connection to it.
func serveKV(t *testing.T, kv *KV) *grpc.ClientConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	concordpb.RegisterKVServer(srv, kv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestStreamAnswersEveryCallAsUnary protects KV.Stream's contract: every
// call of a message is answered once, by id, with what its unary method
// returns (values and error codes alike), and each call passes the call
// interceptors under its unary method's name (so metrics and request
// tracking count it as they count a unary call).
func TestStreamAnswersEveryCallAsUnary(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	fillShards(f, 30)
	var mu sync.Mutex
	methods := map[string]int{}
	kv := NewKV(f, testLimits).WithCallInterceptors(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		methods[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	})
	conn := serveKV(t, kv)
	stream, err := concordpb.NewKVClient(conn).Stream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var calls []*concordpb.StreamCall
	for i := range 30 {
		key := fmt.Sprintf("k%02d", i)
		calls = append(calls, &concordpb.StreamCall{Id: uint64(100 + i), Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{
			Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Key: []byte(key)}}})
	}
	calls = append(calls,
		&concordpb.StreamCall{Id: 1, Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{}}}, // empty key
		&concordpb.StreamCall{Id: 2}, // no request at all
		&concordpb.StreamCall{Id: 3, Request: &concordpb.StreamCall_Scan{Scan: &concordpb.ScanRequest{}}}, // every key
	)
	if err := stream.Send(&concordpb.StreamRequest{Calls: calls}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*concordpb.StreamReply{}
	for {
		resp, err := stream.Recv()
		if err != nil {
			break // io.EOF once every call is answered
		}
		for _, r := range resp.GetReplies() {
			if got[r.GetId()] != nil {
				t.Fatalf("call %d answered twice", r.GetId())
			}
			got[r.GetId()] = r
		}
	}
	if len(got) != len(calls) {
		t.Fatalf("%d replies for %d calls", len(got), len(calls))
	}
	for i := range 30 {
		r := got[uint64(100+i)]
		if r.GetCode() != 0 || !r.GetGet().GetFound() || string(r.GetGet().GetValue()) != "v" {
			t.Fatalf("get k%02d: %v", i, r)
		}
	}
	if c := codes.Code(got[1].GetCode()); c != codes.InvalidArgument || got[1].GetMessage() == "" {
		t.Fatalf("empty key answered %v %q, want InvalidArgument as unary", c, got[1].GetMessage())
	}
	if c := codes.Code(got[2].GetCode()); c != codes.InvalidArgument {
		t.Fatalf("empty call answered %v, want InvalidArgument", c)
	}
	if n := len(got[3].GetScan().GetKvs()); n != 30 {
		t.Fatalf("scan in a stream returned %d keys, want 30", n)
	}
	if methods["/concord.v1.KV/Get"] != 31 || methods["/concord.v1.KV/Scan"] != 1 {
		t.Fatalf("interceptor saw %v, want 31 Gets and 1 Scan", methods)
	}
}

// TestStreamCallWorkersAreReused protects the stream's worker reuse: calls
// that follow one another run on the worker that served the first (which
// keeps its grown stack), and calls in flight together each get a worker,
// every call answered once.
func TestStreamCallWorkersAreReused(t *testing.T) {
	replies := make(chan *concordpb.StreamReply, 64)
	var calls sync.WaitGroup
	w := &callWorkers{s: &KV{}, ctx: context.Background(), slots: make(chan struct{}, maxStreamInFlight),
		calls: &calls, replies: replies, work: make(chan streamWork)}
	for i := uint64(1); i <= 50; i++ {
		w.slots <- struct{}{}
		w.start(&concordpb.StreamCall{Id: i}, 0) // no request: answered at once with InvalidArgument
		if r := <-replies; r.GetId() != i || codes.Code(r.GetCode()) != codes.InvalidArgument {
			t.Fatalf("call %d: reply %v", i, r)
		}
		// The worker releases the slot after replying; wait for it, so the
		// next call finds the worker idle (or about to be).
		for len(w.slots) != 0 {
			runtime.Gosched()
		}
	}
	// Mostly 1; a call that arrives while the worker is between releasing
	// its slot and waiting for work starts another. A goroutine per call
	// would be 50.
	if w.n > 25 {
		t.Fatalf("50 calls one after another started %d workers, want them reused", w.n)
	}
	w.deadlines.close()
	close(w.work)
	calls.Wait() // every worker ends once work is closed
}

// TestStreamCallsEndAtTheirTimeout protects a stream call's deadline: a
// call that waits for its context ends with DeadlineExceeded at its
// timeout_ms, at most the sharing grain sooner, and calls of one message
// share contexts without changing that. It fails if calls ran without a
// deadline, or if sharing cut one short by more than the grain.
func TestStreamCallsEndAtTheirTimeout(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	var mu sync.Mutex
	deadlines := map[uint64]time.Time{}
	kv := NewKV(f, testLimits).WithCallInterceptors(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.Internal, "the call has no deadline")
		}
		mu.Lock()
		deadlines[uint64(len(deadlines))] = dl
		mu.Unlock()
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	conn := serveKV(t, kv)
	stream, err := concordpb.NewKVClient(conn).Stream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var calls []*concordpb.StreamCall
	for i := range 20 {
		calls = append(calls, &concordpb.StreamCall{Id: uint64(i + 1), TimeoutMs: uint32(30 + 20*(i%2)),
			Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Key: []byte("k")}}})
	}
	sent := time.Now()
	if err := stream.Send(&concordpb.StreamRequest{Calls: calls}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		for _, r := range resp.GetReplies() {
			n++
			want := time.Duration(30+20*((r.GetId()-1)%2)) * time.Millisecond
			if c := codes.Code(r.GetCode()); c != codes.DeadlineExceeded {
				t.Fatalf("call %d answered %v, want DeadlineExceeded", r.GetId(), c)
			}
			if took := time.Since(sent); took < want-deadlineGrain(want) {
				t.Fatalf("call %d of timeout %v answered after %v", r.GetId(), want, took)
			}
		}
	}
	if n != len(calls) {
		t.Fatalf("%d replies for %d calls", n, len(calls))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, dl := range deadlines {
		if dl.Before(sent.Add(30*time.Millisecond - deadlineGrain(30*time.Millisecond))) {
			t.Fatalf("a call's deadline %v is before its timeout (sent %v)", dl, sent)
		}
	}
}
