package client

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/portmux"
)

// errStall makes a scriptNode's handler wait for the caller's deadline,
// as a node that proposed a request and never answered it: the attempt
// times out, so for a write it may have applied.
var errStall = errors.New("stall")

// scriptNode is a fake node (the only one, leading the only shard) whose
// Put, Delete, CompareAndSwap, Get, Scan and Batch answers are given by script, per request received
// (n counts them from 0). It serves the calls unary and on KV.Stream, and
// records each request's header.
type scriptNode struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedClusterServer
	rt     *concordpb.RoutingTableResponse
	script func(n int, h *concordpb.RequestHeader) error
	framed atomic.Int64 // framed connections served

	mu      sync.Mutex
	headers []*concordpb.RequestHeader // guarded by mu
}

func (f *scriptNode) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	return f.rt, nil
}

// handle records h and answers as the script says.
func (f *scriptNode) handle(ctx context.Context, h *concordpb.RequestHeader) error {
	f.mu.Lock()
	n := len(f.headers)
	f.headers = append(f.headers, proto.CloneOf(h))
	f.mu.Unlock()
	err := f.script(n, h)
	if err == errStall {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

func (f *scriptNode) received() []*concordpb.RequestHeader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*concordpb.RequestHeader(nil), f.headers...)
}

func (f *scriptNode) Put(ctx context.Context, req *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	if err := f.handle(ctx, req.GetHeader()); err != nil {
		return nil, err
	}
	return &concordpb.PutResponse{Header: &concordpb.ResponseHeader{ShardId: 1}}, nil
}

func (f *scriptNode) Delete(ctx context.Context, req *concordpb.DeleteRequest) (*concordpb.DeleteResponse, error) {
	if err := f.handle(ctx, req.GetHeader()); err != nil {
		return nil, err
	}
	return &concordpb.DeleteResponse{Header: &concordpb.ResponseHeader{ShardId: 1}}, nil
}

func (f *scriptNode) CompareAndSwap(ctx context.Context, req *concordpb.CompareAndSwapRequest) (*concordpb.CompareAndSwapResponse, error) {
	if err := f.handle(ctx, req.GetHeader()); err != nil {
		return nil, err
	}
	return &concordpb.CompareAndSwapResponse{Header: &concordpb.ResponseHeader{ShardId: 1}, Succeeded: true}, nil
}

func (f *scriptNode) Get(ctx context.Context, req *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	if err := f.handle(ctx, req.GetHeader()); err != nil {
		return nil, err
	}
	return &concordpb.GetResponse{Header: &concordpb.ResponseHeader{ShardId: 1}}, nil
}

func (f *scriptNode) Batch(ctx context.Context, req *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	if err := f.handle(ctx, req.GetHeader()); err != nil {
		return nil, err
	}
	return &concordpb.BatchResponse{Header: &concordpb.ResponseHeader{ShardId: 1}, Results: make([]*concordpb.OpResult, len(req.GetOps()))}, nil
}

func (f *scriptNode) Scan(ctx context.Context, req *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	if err := f.handle(ctx, req.GetHeader()); err != nil {
		return nil, err
	}
	return &concordpb.ScanResponse{}, nil
}

// Stream serves the same calls on a KV.Stream, each in its own goroutine
// (a stalled one holds no other), bounded by the call's timeout.
func (f *scriptNode) Stream(s concordpb.KV_StreamServer) error {
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		for _, c := range req.GetCalls() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(s.Context(), time.Duration(c.GetTimeoutMs())*time.Millisecond)
				defer cancel()
				r := &concordpb.StreamReply{Id: c.GetId()}
				var err error
				switch q := c.GetRequest().(type) {
				case *concordpb.StreamCall_Ping: // the framed wire's keepalive and hello
					r.Response = &concordpb.StreamReply_Pong{Pong: &concordpb.KeepalivePing{}}
				case *concordpb.StreamCall_Put:
					var resp *concordpb.PutResponse
					if resp, err = f.Put(ctx, q.Put); err == nil {
						r.Response = &concordpb.StreamReply_Put{Put: resp}
					}
				case *concordpb.StreamCall_Delete:
					var resp *concordpb.DeleteResponse
					if resp, err = f.Delete(ctx, q.Delete); err == nil {
						r.Response = &concordpb.StreamReply_Delete{Delete: resp}
					}
				case *concordpb.StreamCall_CompareAndSwap:
					var resp *concordpb.CompareAndSwapResponse
					if resp, err = f.CompareAndSwap(ctx, q.CompareAndSwap); err == nil {
						r.Response = &concordpb.StreamReply_CompareAndSwap{CompareAndSwap: resp}
					}
				case *concordpb.StreamCall_Get:
					var resp *concordpb.GetResponse
					if resp, err = f.Get(ctx, q.Get); err == nil {
						r.Response = &concordpb.StreamReply_Get{Get: resp}
					}
				case *concordpb.StreamCall_Scan:
					var resp *concordpb.ScanResponse
					if resp, err = f.Scan(ctx, q.Scan); err == nil {
						r.Response = &concordpb.StreamReply_Scan{Scan: resp}
					}
				case *concordpb.StreamCall_Batch:
					var resp *concordpb.BatchResponse
					if resp, err = f.Batch(ctx, q.Batch); err == nil {
						r.Response = &concordpb.StreamReply_Batch{Batch: resp}
					}
				default:
					err = status.Error(codes.Unimplemented, "not in the script")
				}
				if err != nil {
					st := status.Convert(err)
					r.Code, r.Message = uint32(st.Code()), st.Message()
				}
				sendMu.Lock()
				defer sendMu.Unlock()
				_ = s.Send(&concordpb.StreamResponse{Replies: []*concordpb.StreamReply{r}})
			}()
		}
	}
}

// paths are the client's three ways of sending a call to a node.
var paths = []struct {
	name string
	opts Options
}{
	{"unary", Options{Unary: true}},
	{"stream", Options{Wire: WireGRPC}},
	{"tcp", Options{Wire: WireTCP}},
}

// framedConn is a framed connection as a KV_StreamServer, for
// scriptNode.Stream.
type framedConn struct {
	grpc.ServerStream // nil: only Context, Recv and Send are used
	ctx               context.Context
	c                 net.Conn
	fr                *frame.Reader
}

func (s *framedConn) Context() context.Context { return s.ctx }

func (s *framedConn) Recv() (*concordpb.StreamRequest, error) {
	req := &concordpb.StreamRequest{}
	return req, s.fr.Next(req)
}

func (s *framedConn) Send(r *concordpb.StreamResponse) error {
	b, err := frame.Append(nil, r)
	if err == nil {
		_, err = s.c.Write(b)
	}
	return err
}

// scriptedNode starts a scriptNode on 127.0.0.1 and a client of it.
func scriptedNode(t *testing.T, opts Options, script func(n int, h *concordpb.RequestHeader) error) (*scriptNode, *Client) {
	t.Helper()
	l := listen(t)
	f := &scriptNode{script: script, rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	// gRPC and the framed wire on one port, as a node serves them.
	mux := portmux.New(l, 5*time.Second)
	framed := mux.Match(frame.KVMagic)
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(mux.GRPC())
	go mux.Serve()
	t.Cleanup(func() { mux.Close() })
	sctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() {
		for {
			conn, err := framed.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				context.AfterFunc(sctx, func() { conn.Close() })
				fr := frame.NewReader(conn, 1<<20)
				if _, err := frame.ReadHello(fr, frame.KVMagic); err == nil {
					f.framed.Add(1)
					_ = f.Stream(&framedConn{ctx: sctx, c: conn, fr: fr})
				}
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts.Endpoints = []string{l.Addr().String()}
	c, err := NewWithOptions(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c
}

// windowFullErr is a shard's refusal of a windowed session's command whose
// window is at its bound (internal/kv/window.go): nothing applied.
func windowFullErr(h *concordpb.RequestHeader) error {
	return status.Errorf(codes.ResourceExhausted, "session %x: 1024 results (5120 bytes) above the floor %d: the window is full",
		h.GetSessionId(), h.GetSessionFloor())
}

// TestWindowFullRetryCarriesTheCurrentFloor protects the retry of a
// blind write that a shard refused because its session's window is full
// (ResourceExhausted: room comes only from a higher floor). The retry must
// carry the session's floor as it is now, not as it was when the call
// began: calls below it ended since, and that higher floor is what frees
// the room. With the stale floor every retry was refused alike until the
// deadline, and the call then reported ErrAmbiguous though nothing applied.
func TestWindowFullRetryCarriesTheCurrentFloor(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			// The node refuses a request whose floor is below its seq:
			// room only once every call before it is done.
			f, c := scriptedNode(t, p.opts, func(_ int, h *concordpb.RequestHeader) error {
				if h.GetSessionFloor() < h.GetSeq() {
					return windowFullErr(h)
				}
				return nil
			})
			w, first, _ := c.takeWindowed() // a call in flight below the Put's seq
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
				done <- err
			}()
			for len(f.received()) == 0 { // the first attempt was refused...
				select {
				case err := <-done:
					t.Fatalf("Put ended before the node refused it: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			c.doneWindowed(w, first) // ...then the call below it ends
			if err := <-done; err != nil {
				t.Fatalf("Put after its floor freed room: %v (headers %v)", err, f.received())
			}
			if (p.opts.Wire == WireTCP) != (f.framed.Load() > 0) {
				t.Fatalf("%d framed connections on the %s path", f.framed.Load(), p.name)
			}
			hs := f.received()
			last := hs[len(hs)-1]
			if hs[0].GetSessionFloor() != first || last.GetSessionFloor() != last.GetSeq() {
				t.Fatalf("floors sent: first %d, last %d (seq %d); want %d, then the seq", hs[0].GetSessionFloor(), last.GetSessionFloor(), last.GetSeq(), first)
			}
			for _, h := range hs {
				if h.GetSessionId() != hs[0].GetSessionId() || h.GetSeq() != hs[0].GetSeq() {
					t.Fatalf("a retry changed session or seq: %v", hs)
				}
			}
		})
	}
}

// TestWindowFullIsNotAmbiguous protects what a write refused because its
// window is full reports: the shard applied nothing (it refuses before
// applying any op), so when every attempt was refused that way the error is a
// plain one, not ErrAmbiguous. Any other ResourceExhausted (gRPC's own,
// for a reply too large to take: the write applied) still counts as
// possibly applied.
func TestWindowFullIsNotAmbiguous(t *testing.T) {
	put := func(c *Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
		return err
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 2 * time.Second // a refusal is never a timeout, even on a loaded machine
			f, c := scriptedNode(t, opts, func(_ int, h *concordpb.RequestHeader) error { return windowFullErr(h) })
			err := put(c)
			if err == nil || errors.Is(err, ErrAmbiguous) || len(f.received()) == 0 {
				t.Fatalf("every attempt refused, window full: %v after %d attempts; want a plain error", err, len(f.received()))
			}
			f, c = scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error {
				return status.Error(codes.ResourceExhausted, "grpc: received message larger than max (70000000 vs. 67108864)")
			})
			if err := put(c); !errors.Is(err, ErrAmbiguous) || len(f.received()) == 0 {
				t.Fatalf("a reply too large to take: %v; want ErrAmbiguous", err)
			}
		})
	}
}

// TestDefiniteErrorAfterAnUncertainAttemptIsAmbiguous protects a write
// whose first attempt may have applied (it timed out at the node) and
// whose retry then gets an error that is not retried: that error speaks
// for the retry alone, so the call must report ErrAmbiguous (keeping the
// error's code), not a plain failure the caller would take for "nothing
// applied". A write whose only attempt got such an error reports it plain.
func TestDefiniteErrorAfterAnUncertainAttemptIsAmbiguous(t *testing.T) {
	refusal := status.Error(codes.FailedPrecondition, "refused")
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 300 * time.Millisecond
			put := func(c *Client) error {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
				return err
			}
			f, c := scriptedNode(t, opts, func(n int, _ *concordpb.RequestHeader) error {
				if n == 0 {
					return errStall
				}
				return refusal
			})
			if err := put(c); !errors.Is(err, ErrAmbiguous) || status.Code(err) != codes.FailedPrecondition || len(f.received()) != 2 {
				t.Fatalf("timed out, then refused: %v (code %v) after %d attempts; want ErrAmbiguous wrapping FailedPrecondition after 2",
					err, status.Code(err), len(f.received()))
			}
			opts.AttemptTimeout = 2 * time.Second // a refusal is never a timeout, even on a loaded machine
			_, c = scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return refusal })
			if err := put(c); errors.Is(err, ErrAmbiguous) || status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("refused at once: %v; want a plain FailedPrecondition", err)
			}
		})
	}
}

// TestInternalErrorOfAWriteIsAmbiguous protects what an Internal error
// means for a write: the node's (an apply whose result did not fit the
// request: kvservice's "expected one result") or gRPC's own (a reply the
// client could not decode) come after the write may have applied, so the
// call reports ErrAmbiguous, keeping the code. A read that gets one is
// never ambiguous.
func TestInternalErrorOfAWriteIsAmbiguous(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 2 * time.Second
			_, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error {
				return status.Error(codes.Internal, "expected one result, got 2")
			})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if _, err := c.CompareAndSwap(ctx, []byte("k"), CAS{ExpectAbsent: true, Value: []byte("v")}); !errors.Is(err, ErrAmbiguous) || status.Code(err) != codes.Internal {
				t.Fatalf("CompareAndSwap answered Internal: %v; want ErrAmbiguous wrapping Internal", err)
			}
			if _, _, err := c.Put(ctx, []byte("k"), []byte("v")); !errors.Is(err, ErrAmbiguous) || status.Code(err) != codes.Internal {
				t.Fatalf("Put answered Internal: %v; want ErrAmbiguous wrapping Internal", err)
			}
			if _, _, err := c.Get(ctx, []byte("k")); errors.Is(err, ErrAmbiguous) || status.Code(err) != codes.Internal {
				t.Fatalf("Get answered Internal: %v; want a plain Internal", err)
			}
		})
	}
}

// TestReadOnlyBatchIsNeverAmbiguous protects a Batch of GETs alone: it is
// a read, sent without a session (a node serves it as a read: ReadIndex,
// one view), and like every read it never reports ErrAmbiguous, even when
// its attempts time out. A Batch that writes still does, with a session.
func TestReadOnlyBatchIsNeverAmbiguous(t *testing.T) {
	gets := []*concordpb.Op{{Type: concordpb.OpType_OP_GET, Key: []byte("a")}, {Type: concordpb.OpType_OP_GET, Key: []byte("b")}}
	incr := []*concordpb.Op{{Type: concordpb.OpType_OP_INCR, Key: []byte("a"), IntDelta: 1}}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 200 * time.Millisecond
			f, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return errStall })
			batch := func(ops []*concordpb.Op) error {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				_, err := c.Batch(ctx, ops)
				return err
			}
			if err := batch(gets); err == nil || errors.Is(err, ErrAmbiguous) {
				t.Fatalf("batch of GETs timing out: %v; want a plain error", err)
			}
			for _, h := range f.received() {
				if h.GetSessionId() != 0 {
					t.Fatalf("a batch of GETs was sent with session %x; want none", h.GetSessionId())
				}
			}
			n := len(f.received())
			if err := batch(incr); !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("batch of an INCR timing out: %v; want ErrAmbiguous", err)
			}
			if hs := f.received(); len(hs) == n || hs[n].GetSessionId() == 0 {
				t.Fatalf("a batch of an INCR was sent without a session: %v", hs[n:])
			}
		})
	}
}

// TestCloseEndsCallsInFlight: a call still running when its client is
// closed ends with ErrClosed (wrapped in ErrAmbiguous, since its first
// attempt may have applied) instead of dialling the node again and
// retrying until its deadline on a connection nobody will close.
func TestCloseEndsCallsInFlight(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 20 * time.Second // the first attempt ends with Close, not its timeout
			f, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return errStall })
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
				done <- err
			}()
			for len(f.received()) == 0 {
				select {
				case err := <-done:
					t.Fatalf("the put ended before the node saw it: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			c.Close()
			err := <-done
			if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("a put in flight at Close: %v; want ErrClosed wrapped in ErrAmbiguous", err)
			}
			if n := len(f.received()); n != 1 {
				t.Fatalf("the node saw %d attempts; want 1 (none after Close)", n)
			}
			if _, _, err := c.Put(context.Background(), []byte("k"), []byte("v")); !errors.Is(err, ErrClosed) || errors.Is(err, ErrAmbiguous) {
				t.Fatalf("a put after Close: %v; want a plain ErrClosed", err)
			}
		})
	}
}

// TestForwardedWriteSentWithoutAnswerIsAmbiguous protects what a node's
// answer for a write it forwarded and got no answer for means to the
// client (grpcapi/forward.go: the leader stalled past the forward's
// deadline, or the connection to it broke after the request was sent): the
// write may have applied, so the client retries it with the same session
// and sequence number, and when it gives up reports ErrAmbiguous, not the
// Unavailable. A forward that could not connect to the leader sent
// nothing: a plain error.
func TestForwardedWriteSentWithoutAnswerIsAmbiguous(t *testing.T) {
	sent := []error{
		status.Error(codes.Unavailable, "the connection to the node broke after the request was sent, before its answer (it may have received the request): error reading from server: EOF"),
		status.Error(codes.Unavailable, "forwarded to node 2, which did not answer within 750ms (it may have received the request)"),
		status.Error(codes.Unavailable, "concord: the request stream to the node broke (Unavailable) after the request was sent"),
	}
	unsent := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9: connect: connection refused"`)
	put := func(c *Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
		return err
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			for _, answer := range sent {
				f, c := scriptedNode(t, p.opts, func(int, *concordpb.RequestHeader) error { return answer })
				err := put(c)
				hs := f.received()
				if !errors.Is(err, ErrAmbiguous) || len(hs) < 2 {
					t.Fatalf("answered %q: %v after %d attempts; want ErrAmbiguous after retries", status.Convert(answer).Message(), err, len(hs))
				}
				for _, h := range hs[1:] {
					if h.GetSessionId() == 0 || h.GetSessionId() != hs[0].GetSessionId() || h.GetSeq() != hs[0].GetSeq() {
						t.Fatalf("a retry carried session %x seq %d, the first attempt %x seq %d", h.GetSessionId(), h.GetSeq(), hs[0].GetSessionId(), hs[0].GetSeq())
					}
				}
			}
			_, c := scriptedNode(t, p.opts, func(int, *concordpb.RequestHeader) error { return unsent })
			if err := put(c); err == nil || errors.Is(err, ErrAmbiguous) {
				t.Fatalf("a forward that never connected: %v; want a plain error", err)
			}
		})
	}
}

// TestClosedBeforePrefaceIsNotSent: a connection a node closed at accept
// (past its --grpc-max-conns) fails gRPC's calls with "error reading server
// preface"; gRPC sends no call before the preface, so the request was not
// sent: not ambiguous, and another node may be asked.
func TestClosedBeforePrefaceIsNotSent(t *testing.T) {
	for _, msg := range []string{
		`connection error: desc = "error reading server preface: EOF"`,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`,
	} {
		err := status.Error(codes.Unavailable, msg)
		if !notSent(err) || sentUnanswered(err, nil) {
			t.Errorf("%q: notSent %v, sentUnanswered %v; want a request not sent", msg, notSent(err), sentUnanswered(err, nil))
		}
	}
}
