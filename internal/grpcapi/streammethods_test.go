package grpcapi

import (
	"context"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestStreamCallsRunEveryMethodThroughInterceptors protects the handlers
// serveCall builds once per method: every kind of call reaches its own
// unary method, through every call interceptor, the first outermost, under
// that method's full name, and gets a reply of its kind; a put's own
// request reaches Put (a key over the limit is refused). It fails if a method is wired to another's handler or name, an
// interceptor is skipped or runs in the wrong order, or the reply's
// response (a put's comes with its reply in one allocation) is wrong.
func TestStreamCallsRunEveryMethodThroughInterceptors(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	fillShards(f, 4)
	f.echo = true
	var mu sync.Mutex
	var trace []string
	ic := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			mu.Lock()
			trace = append(trace, name+" "+info.FullMethod)
			mu.Unlock()
			return h(ctx, req)
		}
	}
	kv := NewKV(f, testLimits).WithCallInterceptors(ic("outer"), ic("inner"))
	plain := NewKV(f, testLimits)
	for _, c := range []struct {
		method string
		call   *concordpb.StreamCall
		ok     func(*concordpb.StreamReply) bool
	}{
		{"Get", &concordpb.StreamCall{Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{
			Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Key: []byte("k00")}}},
			func(r *concordpb.StreamReply) bool { return r.GetGet().GetFound() }},
		{"Put", &concordpb.StreamCall{Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Key: []byte("p"), Value: []byte("v")}}},
			func(r *concordpb.StreamReply) bool { return r.GetPut() != nil }},
		{"Delete", &concordpb.StreamCall{Request: &concordpb.StreamCall_Delete{Delete: &concordpb.DeleteRequest{Key: []byte("d")}}},
			func(r *concordpb.StreamReply) bool { return r.GetDelete() != nil }},
		{"CompareAndSwap", &concordpb.StreamCall{Request: &concordpb.StreamCall_CompareAndSwap{CompareAndSwap: &concordpb.CompareAndSwapRequest{
			Key: []byte("c"), Value: []byte("v")}}},
			func(r *concordpb.StreamReply) bool { return r.GetCompareAndSwap() != nil }},
		{"Scan", &concordpb.StreamCall{Request: &concordpb.StreamCall_Scan{Scan: &concordpb.ScanRequest{}}},
			func(r *concordpb.StreamReply) bool { return len(r.GetScan().GetKvs()) == 4 }},
		{"Batch", &concordpb.StreamCall{Request: &concordpb.StreamCall_Batch{Batch: &concordpb.BatchRequest{
			Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("b"), Value: []byte("v")}}}}},
			func(r *concordpb.StreamReply) bool { return r.GetBatch() != nil }},
	} {
		c.call.Id = 42
		for _, s := range []*KV{kv, plain} {
			trace = nil
			r := s.serveCall(context.Background(), c.call)
			if r.GetId() != 42 || r.GetCode() != 0 || !c.ok(r) {
				t.Fatalf("%s: reply %v", c.method, r)
			}
			want := []string{"outer /concord.v1.KV/" + c.method, "inner /concord.v1.KV/" + c.method}
			if s == plain {
				want = nil
			}
			if !slices.Equal(trace, want) {
				t.Fatalf("%s: interceptors saw %q, want %q", c.method, trace, want)
			}
		}
	}
	r := kv.serveCall(context.Background(), &concordpb.StreamCall{Id: 7, Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Key: []byte("toolong")}}})
	if r.GetId() != 7 || codes.Code(r.GetCode()) != codes.InvalidArgument || r.GetPut() != nil {
		t.Fatalf("a put of a too long key answered %v, want InvalidArgument", r)
	}
}

// BenchmarkServeCallPut is one put call of a stream, as a call worker runs
// it (KV.serveCall: timeout, two call interceptors, the Put method, the
// reply) against the fake node, whose proposal answers at once.
func BenchmarkServeCallPut(b *testing.B) {
	f := newFakeNode(b, 1, 4, 1)
	f.echo = true
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	kv := NewKV(f, testLimits).WithCallInterceptors(pass, pass)
	call := &concordpb.StreamCall{Id: 1, Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")}}}
	ctx := context.Background()
	b.ReportAllocs()
	for range b.N {
		if r := kv.serveCall(ctx, call); r.GetCode() != 0 {
			b.Fatal(r)
		}
		f.mu.Lock()
		f.proposals = f.proposals[:0]
		f.mu.Unlock()
	}
}
