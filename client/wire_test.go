package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/portmux"
)

// framedServerStream is a framed connection as the fake's KV_StreamServer
// (the fake calls only Recv and Send): the fake node's Stream logic serves
// the framed wire as it serves gRPC.
// A request for the key "stall" while stall is set (it is cleared) makes
// the connection stop reading and answering until the test ends: a node
// that is paused, or whose packets are dropped.
type framedServerStream struct {
	grpc.ServerStream
	c     net.Conn
	fr    *frame.Reader
	stall *atomic.Bool
	stop  <-chan struct{}
}

func (s *framedServerStream) Recv() (*concordpb.StreamRequest, error) {
	req := &concordpb.StreamRequest{}
	if err := s.fr.Next(req); err != nil {
		return nil, err
	}
	for _, c := range req.GetCalls() {
		key := string(c.GetGet().GetKey()) + string(c.GetPut().GetKey())
		if key == "stall" && s.stall.CompareAndSwap(true, false) {
			<-s.stop
			return nil, io.EOF
		}
	}
	return req, nil
}

func (s *framedServerStream) Send(r *concordpb.StreamResponse) error {
	b, err := frame.Append(nil, r)
	if err == nil {
		_, err = s.c.Write(b)
	}
	return err
}

// oneWireNode is oneStreamNode on one port split as a node's is: gRPC for
// the routing table, and the framed wire, whose hello is refused with
// refuse when it is set. The counter counts the framed connections served.
func oneWireNode(t *testing.T, opts Options, refuse error) (*streamNode, *Client, *atomic.Int64) {
	f, c, served, _ := stallableWireNode(t, opts, refuse)
	return f, c, served
}

// stallableWireNode is oneWireNode whose next request for "stall" stalls
// its connection once the flag it returns is set.
func stallableWireNode(t *testing.T, opts Options, refuse error) (*streamNode, *Client, *atomic.Int64, *atomic.Bool) {
	t.Helper()
	stall := new(atomic.Bool)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	l := listen(t)
	mux := portmux.New(l, 5*time.Second)
	framed := mux.Match(frame.KVMagic)
	f := &streamNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(mux.GRPC())
	go mux.Serve()
	t.Cleanup(func() { mux.Close() })
	served := new(atomic.Int64)
	go func() {
		for {
			c, err := framed.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() {
				defer c.Close()
				fr := frame.NewReader(c, 1<<20)
				if _, err := frame.ReadHello(fr, frame.KVMagic); err != nil {
					return
				}
				if refuse != nil {
					st := status.Convert(refuse)
					b, _ := frame.Append(nil, &concordpb.StreamResponse{Replies: []*concordpb.StreamReply{{Code: uint32(st.Code()), Message: st.Message()}}})
					_, _ = c.Write(b)
					return
				}
				_ = f.Stream(&framedServerStream{c: c, fr: fr, stall: stall, stop: stop})
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts.Endpoints = []string{l.Addr().String()}
	opts.Wire = WireTCP
	c, err := NewWithOptions(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c, served, stall
}

// TestWireTCPBatchesAndMatchesReplies: over the framed wire concurrent
// calls share messages and each caller gets its own answer by id, as over
// gRPC; no gRPC stream is opened.
func TestWireTCPBatchesAndMatchesReplies(t *testing.T) {
	f, c, framed := oneWireNode(t, Options{}, nil)
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%d", i)
			v, found, err := c.Get(context.Background(), []byte(key))
			if err == nil && (!found || string(v) != key) {
				err = fmt.Errorf("get %s answered %q", key, v)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if f.calls.Load() != n || f.messages.Load() >= n {
		t.Fatalf("%d calls in %d messages, want %d calls in fewer messages", f.calls.Load(), f.messages.Load(), n)
	}
	if framed.Load() != 1 {
		t.Fatalf("%d framed connections, want the one all calls share", framed.Load())
	}
}

// TestWireTCPBreakIsAmbiguousForMutations: a put sent on a framed
// connection that then broke may have applied: the call ends ambiguous;
// the next call opens a new connection.
func TestWireTCPBreakIsAmbiguousForMutations(t *testing.T) {
	f, c, _ := oneWireNode(t, Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, _, err := c.Put(ctx, []byte("k"), []byte("break")); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("put on a broken connection: %v, want ErrAmbiguous", err)
	}
	if f.puts.Load() < 1 {
		t.Fatal("the put never reached the node")
	}
	if v, _, err := c.Get(context.Background(), []byte("after")); err != nil || string(v) != "after" {
		t.Fatalf("get after the break: %q, %v", v, err)
	}
}

// TestWireTCPRefusedHello: a node that refuses the hello (a wrong token)
// fails the calls with its code at once, not as a broken connection to
// retry until the deadline, and no call was served.
func TestWireTCPRefusedHello(t *testing.T) {
	f, c, _ := oneWireNode(t, Options{}, status.Error(codes.Unauthenticated, "auth token missing or rejected"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
	if status.Code(errors.Unwrap(err)) != codes.Unauthenticated && status.Code(err) != codes.Unauthenticated {
		t.Fatalf("put through a refused hello: %v, want Unauthenticated", err)
	}
	if errors.Is(err, ErrAmbiguous) || ctx.Err() != nil {
		t.Fatalf("a refusal was retried to the deadline: %v", err)
	}
	if f.calls.Load() != 0 {
		t.Fatalf("%d calls served", f.calls.Load())
	}
}

// TestWireOption: the framed wire is the default (not with Unary, which
// has no stream); an unknown wire, or the framed wire named with Unary, is
// refused at New.
func TestWireOption(t *testing.T) {
	for _, o := range []Options{{Wire: "udp"}, {Wire: WireTCP, Unary: true}} {
		o.Endpoints = []string{"127.0.0.1:1"}
		if _, err := NewWithOptions(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, c := range []struct {
		o    Options
		wire bool
	}{{Options{}, true}, {Options{Wire: WireTCP}, true}, {Options{Wire: WireGRPC}, false}, {Options{Unary: true}, false}} {
		d, err := newWireDialer(c.o)
		if err != nil || (d != nil) != c.wire {
			t.Errorf("%+v: framed wire %v (%v), want %v", c.o, d != nil, err, c.wire)
		}
	}
}

// wireMux returns the stream mux of c's only endpoint.
func wireMux(t *testing.T, c *Client) streamKV {
	t.Helper()
	addr := c.endpoints[0]
	conn, err := c.conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c.kv(addr, conn).(streamKV)
}

// TestWireKeepaliveEndsAStalledConnection: a connection whose node stops
// reading and answering is closed by the keepalive, not left to the call's
// deadline: the put sent on it fails as a broken stream's (Unavailable,
// neither refused nor unsent, so the retry loop counts it as possibly
// applied), and the next call redials and is served.
func TestWireKeepaliveEndsAStalledConnection(t *testing.T) {
	f, c, framed, stall := stallableWireNode(t, Options{AttemptTimeout: -1}, nil)
	c.wire.keepTime, c.wire.keepTimeout = 100*time.Millisecond, 200*time.Millisecond
	kv := wireMux(t, c)
	if _, err := kv.Get(context.Background(), &concordpb.GetRequest{Key: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	stall.Store(true)
	// Far past the keepalive: only it can end the call before this.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("stall"), Value: []byte("v")})
	if ctx.Err() != nil || status.Code(err) != codes.Unavailable {
		t.Fatalf("put on a stalled connection: %v (ctx %v), want Unavailable from the keepalive", err, ctx.Err())
	}
	if notSent(err) || isRefusal(err) {
		t.Fatalf("put on a stalled connection: %v counts as never applied; its outcome is unknown", err)
	}
	if v, _, err := c.Get(context.Background(), []byte("after")); err != nil || string(v) != "after" {
		t.Fatalf("get after the stall: %q, %v", v, err)
	}
	if n := framed.Load(); n != 2 {
		t.Fatalf("%d framed connections, want 2 (the stalled one, then a new one)", n)
	}
	if f.pings.Load() < 2 {
		t.Fatalf("%d pings answered, want the two hellos'", f.pings.Load())
	}
}

// TestWireKeepaliveKeepsAnIdleConnection: a connection with nothing to
// carry is pinged, its node answers, and it stays open and serves the
// next call.
func TestWireKeepaliveKeepsAnIdleConnection(t *testing.T) {
	f, c, framed, _ := stallableWireNode(t, Options{}, nil)
	c.wire.keepTime, c.wire.keepTimeout = 20*time.Millisecond, time.Second
	if _, _, err := c.Get(context.Background(), []byte("a")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.pings.Load() < 6 { // the hello's, then idle pings
		if time.Now().After(deadline) {
			t.Fatalf("%d pings in 10 s of idle", f.pings.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v, _, err := c.Get(context.Background(), []byte("b")); err != nil || string(v) != "b" {
		t.Fatalf("get after idle: %q, %v", v, err)
	}
	if n := framed.Load(); n != 1 {
		t.Fatalf("%d framed connections, want the one kept alive", n)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// breakAndGet makes c's stream to its node break (a put the fake answers by
// ending the stream) and then be reopened by a get, rounds times: each
// reopening would probe the framed wire again if the client forgot.
func breakAndGet(t *testing.T, c *Client, rounds int) {
	t.Helper()
	for i := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, _, _ = c.Put(ctx, []byte("k"), []byte("break"))
		cancel()
		key := fmt.Sprintf("g%d", i)
		if v, _, err := c.Get(context.Background(), []byte(key)); err != nil || string(v) != key {
			t.Fatalf("get %s: %q, %v", key, v, err)
		}
	}
}

// TestWireFallsBackToGRPCServer: a node that serves only gRPC on its port
// (a build before the framed wire, without a port mux) closes the hello;
// the client serves its calls over the gRPC stream and does not probe the
// wire again when that stream is reopened.
func TestWireFallsBackToGRPCServer(t *testing.T) {
	l := &countingListener{Listener: listen(t)}
	f := &streamNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewWithOptions(ctx, Options{Endpoints: []string{l.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	breakAndGet(t, c, 5)
	if f.calls.Load() < 10 {
		t.Fatalf("%d calls reached the gRPC stream, want the 10 made", f.calls.Load())
	}
	// One gRPC connection and one probe of the framed wire.
	if n := l.n.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want 2 (gRPC, one probe)", n)
	}
}

// TestWireFallsBackPastAnOldPortMux: a node whose port mux does not know
// the wire hands the hello to its Redis protocol, which answers an error
// and reads on; the client falls back to gRPC, and not one byte of a call
// reached the Redis side.
func TestWireFallsBackPastAnOldPortMux(t *testing.T) {
	l := listen(t)
	mux := portmux.New(l, 5*time.Second)
	f := &streamNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(mux.GRPC())
	go mux.Serve()
	t.Cleanup(func() { mux.Close() })
	var mu sync.Mutex
	var redisGot []byte
	redisConns := new(atomic.Int64)
	go func() {
		for {
			c, err := mux.Other().Accept()
			if err != nil {
				return
			}
			redisConns.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					mu.Lock()
					redisGot = append(redisGot, buf[:n]...)
					mu.Unlock()
					if err != nil {
						return
					}
					if _, err := c.Write([]byte("-ERR unknown command\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewWithOptions(ctx, Options{Endpoints: []string{l.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	breakAndGet(t, c, 3)
	if n := redisConns.Load(); n != 1 {
		t.Fatalf("%d connections reached the Redis side, want the one probe", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if bytes.Contains(redisGot, []byte("g0")) || bytes.Contains(redisGot, []byte("break")) {
		t.Fatalf("a call's bytes reached the Redis side: %q", redisGot)
	}
}

// TestWireFallsBackOnUnimplementedHello: a node that refuses the hello as
// Unimplemented does not serve the wire: the calls go over gRPC, and the
// wire is not probed again when the stream is reopened.
func TestWireFallsBackOnUnimplementedHello(t *testing.T) {
	f, c, framed := oneWireNode(t, Options{}, status.Error(codes.Unimplemented, "unknown wire"))
	breakAndGet(t, c, 3)
	if f.calls.Load() < 6 {
		t.Fatalf("%d calls served over gRPC, want the 6 made", f.calls.Load())
	}
	if n := framed.Load(); n != 1 {
		t.Fatalf("%d framed connections, want the one refused probe", n)
	}
}
