package grpcapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/portmux"
	"github.com/concord-kv/concord/internal/replica"
)

// clientPeerKV is the PeerDialer a node gets from the CLI.
func clientPeerKV(conn grpc.ClientConnInterface, addr string, w PeerWire) PeerKV {
	return client.NewPeerKV(conn, addr, client.PeerWire{TLS: w.TLS, Token: w.Token, FromNode: w.FromNode, Cluster: w.Cluster, Sent: w.Sent})
}

// serveWire starts f's services on 127.0.0.1 as a node's port serves
// them: gRPC, and the framed wire unless grpcOnly (a node that does not
// speak it). f forwards over the framed wire (WithPeerWire, stamped with
// its id and, unless f.unstamped, its cluster id). The address goes into f's and peers' address books; it returns
// f's KV service, its framed wire server (nil with grpcOnly) and a unary
// gRPC client of f.
func serveWire(t *testing.T, f *fakeNode, grpcOnly bool, peers ...*fakeNode) (*KV, *ConnServer, concordpb.KVClient) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := PeerWire{FromNode: func() uint64 { return uint64(f.id) }}
	if !f.unstamped {
		w.Cluster = f.ClusterID
	}
	kv := NewKV(f, testLimits).WithPeerWire(clientPeerKV, w)
	t.Cleanup(kv.ClosePeers)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(MarkAnswered(), DropPartitioned(f.Blocked)))
	concordpb.RegisterKVServer(srv, kv)
	var cs *ConnServer
	if grpcOnly {
		go func() { _ = srv.Serve(lis) }()
	} else {
		mux := portmux.New(lis, 10*time.Second)
		wire := mux.Match(StreamMagic) // before Serve
		cs = kv.NewConnServer(nil, 1<<20, nil)
		go func() { _ = cs.Serve(wire) }()
		go func() { _ = srv.Serve(mux.GRPC()) }()
		go func() { _ = mux.Serve() }()
		t.Cleanup(func() { mux.Close(); cs.Close() })
	}
	t.Cleanup(srv.Stop)
	return kv, cs, concordpb.NewKVClient(announce(t, f, lis.Addr().String(), peers))
}

// forwardEach sends c (node 1, which leads nothing) a write with a
// session, a write without one (merged with others for the leader,
// writemerge.go) and a linearizable read, each of which node 1 forwards to
// node 2, and checks that node 2 served them.
func forwardEach(t *testing.T, c concordpb.KVClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i, h := range []*concordpb.RequestHeader{{SessionId: 5, Seq: 1}, nil} {
		resp, err := c.Put(ctx, &concordpb.PutRequest{Header: h, Key: []byte("k"), Value: []byte("v")})
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if got := resp.GetHeader().GetServedByNodeId(); got != 2 {
			t.Fatalf("put %d served by node %d, want 2", i, got)
		}
	}
	if _, err := c.Get(ctx, &concordpb.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("get: %v", err)
	}
}

// TestForwardOverTheFramedWire protects that a node sends its forwards to
// the leader over the framed wire (one connection), with the caller's
// deadline carried, and that the leader serves them.
func TestForwardOverTheFramedWire(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	_, cs2, _ := serveWire(t, f2, false, f1)
	kv1, _, c1 := serveWire(t, f1, false, f2)
	forwardEach(t, c1)
	if framed, grpc := kv1.ForwardedCalls(); framed != 3 || grpc != 0 {
		t.Fatalf("forwarded %d calls over the framed wire and %d over gRPC; want 3 and 0", framed, grpc)
	}
	if n := cs2.Open(); n != 1 {
		t.Fatalf("the leader serves %d framed connections, want 1 (the forwarding node's)", n)
	}
	if f1.proposalCount() != 0 || f2.proposalCount() != 2 || len(f2.readIndex) != 1 {
		t.Fatalf("proposals: %d on the follower, %d on the leader, %d barriers; want 0, 2, 1", f1.proposalCount(), f2.proposalCount(), len(f2.readIndex))
	}
	// The session's write was the first: sent with the caller's 2 s (3/4
	// of it, forward's own deadline), not the leader's default of 30 s.
	f2.mu.Lock()
	first := f2.proposals[0].GetKv()
	f2.mu.Unlock()
	if first.GetSessionId() != 5 {
		t.Fatalf("the leader's first proposal is %v, want session 5's", first)
	}
	c := &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 2}, Key: []byte("k")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c1.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	f2.mu.Lock()
	left := f2.proposeLeft
	f2.mu.Unlock()
	if left <= 0 || left > 1500*time.Millisecond {
		t.Fatalf("the leader's proposal had %v left, want the forward's deadline (at most 1.5 s)", left)
	}
}

// TestForwardFallsBackToGRPC protects forwarding to a node that does not
// speak the framed wire: the calls go over gRPC's stream instead.
func TestForwardFallsBackToGRPC(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	serveWire(t, f2, true, f1)
	kv1, _, c1 := serveWire(t, f1, false, f2)
	forwardEach(t, c1)
	if framed, grpc := kv1.ForwardedCalls(); framed != 0 || grpc != 3 {
		t.Fatalf("forwarded %d calls over the framed wire and %d over gRPC; want 0 and 3", framed, grpc)
	}
	if f2.proposalCount() != 2 {
		t.Fatalf("the leader proposed %d commands, want 2", f2.proposalCount())
	}
}

// TestBrokenForwardIsAmbiguous protects the outcome of a forwarded write
// whose connection breaks after it was sent: the leader may apply it, so
// the answer must not read as a refusal or as never sent (a client would
// then retry it as certainly not applied).
func TestBrokenForwardIsAmbiguous(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	f2.proposeGate = make(chan struct{})
	_, cs2, _ := serveWire(t, f2, false, f1)
	_, _, c1 := serveWire(t, f1, false, f2)
	t.Cleanup(func() { close(f2.proposeGate) }) // first: the leader's handlers return
	errs := make(chan error, 2)
	for _, h := range []*concordpb.RequestHeader{{SessionId: 5, Seq: 1}, nil} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c1.Put(ctx, &concordpb.PutRequest{Header: h, Key: []byte("k"), Value: []byte("v")})
			errs <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for f2.proposing.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 writes reached the leader", f2.proposing.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	go cs2.Close() // the connection breaks at once; Close then waits for the gated handlers
	for range 2 {
		st := status.Convert(<-errs)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "after the request was sent") ||
			strings.Contains(st.Message(), "not sent") || strings.Contains(st.Message(), "Error while dialing") {
			t.Fatalf("got %v %q; want Unavailable saying the request was sent (outcome unknown)", st.Code(), st.Message())
		}
	}
}

// TestForwardRefusedAcrossAPartition protects fault injection over the
// framed wire: a node cut off from the forwarding node refuses its calls,
// as DropPartitioned refuses its unary ones, and runs none of them.
func TestForwardRefusedAcrossAPartition(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	f2.blocked[1] = true // one way: node 1 still reaches node 2
	serveWire(t, f2, false, f1)
	kv1, _, c1 := serveWire(t, f1, false, f2)
	_, err := c1.Put(context.Background(), &concordpb.PutRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable, "partitioned from node 1 (fault injection)")
	if framed, _ := kv1.ForwardedCalls(); framed != 1 || f2.proposing.Load() != 0 {
		t.Fatalf("%d calls forwarded over the framed wire, %d proposed; want 1 and 0", framed, f2.proposing.Load())
	}
}

// TestForwardRefusedByAnotherCluster protects the cluster check of the
// forwarded calls: node 1 of cluster 77 believes node 2 leads its shards,
// but the node at node 2's address is of cluster 78 (a wiped node that
// bootstrapped a cluster of its own there). Forwarded over the framed wire
// or, to a node without it, over gRPC's stream, its write and its read are
// refused as the unary calls are (FailedPrecondition), and the other
// cluster runs neither: no proposal, no read barrier.
func TestForwardRefusedByAnotherCluster(t *testing.T) {
	for _, grpcOnly := range []bool{false, true} {
		f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
		f2.cluster = 78
		serveWire(t, f2, grpcOnly, f1)
		kv1, _, c1 := serveWire(t, f1, false, f2)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c1.Put(ctx, &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 1}, Key: []byte("k"), Value: []byte("v")})
		wantStatus(t, err, codes.FailedPrecondition, "a node of cluster 4d forwarded calls to a node of cluster 4e: the forwarder's address book is stale; nothing was run")
		_, err = c1.Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("grpcOnly %v: forwarded get: %v, want FailedPrecondition", grpcOnly, err)
		}
		framed, grpc := kv1.ForwardedCalls()
		if sent := map[bool]uint64{false: framed, true: grpc}[grpcOnly]; sent != 2 {
			t.Fatalf("grpcOnly %v: forwarded %d framed, %d over gRPC; want 2 on the wire tested", grpcOnly, framed, grpc)
		}
		f2.mu.Lock()
		barriers := len(f2.readIndex)
		f2.mu.Unlock()
		if f2.proposing.Load() != 0 || barriers != 0 {
			t.Fatalf("grpcOnly %v: the other cluster's node proposed %d commands and ran %d read barriers; want none",
				grpcOnly, f2.proposing.Load(), barriers)
		}
	}
}

// TestForwardWithoutClusterIDAccepted protects a rolling upgrade: a node of
// a binary older than the cluster id on forwards stamps none, and its
// forwards are served, as a client's calls are.
func TestForwardWithoutClusterIDAccepted(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	f1.unstamped = true
	serveWire(t, f2, false, f1)
	kv1, _, c1 := serveWire(t, f1, false, f2)
	forwardEach(t, c1)
	if framed, _ := kv1.ForwardedCalls(); framed != 3 {
		t.Fatalf("forwarded %d calls over the framed wire, want 3", framed)
	}
}

// TestTimedOutReadIsNotAmbiguous protects a read whose barrier times out on
// the leader (replica.ErrReadTimeout): asked of the leader, or of a node
// that forwards it over the framed wire, the read fails Unavailable (safe
// to retry), with nothing in its message saying "ambiguous" or "outcome
// unknown", which to a client (and to Redis' error mapping) means a write
// that may have applied.
func TestTimedOutReadIsNotAmbiguous(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	f2.readIndexErr = replica.ErrReadTimeout
	_, _, c2 := serveWire(t, f2, false, f1)
	_, _, c1 := serveWire(t, f1, false, f2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, c := range map[string]concordpb.KVClient{"leader": c2, "forwarded": c1} {
		_, err := c.Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "read not confirmed in time") ||
			strings.Contains(st.Message(), "ambiguous") || strings.Contains(st.Message(), "outcome unknown") {
			t.Fatalf("%s: timed-out read answered %v %q; want Unavailable, not ambiguous", name, st.Code(), st.Message())
		}
	}
}
