package client

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// behaviour is how a fake node answers KV and Status calls.
type behaviour int

const (
	answer behaviour = iota // succeed
	stall                   // never answer, as a SIGSTOPped process
	refuse                  // Unavailable "not the leader": refused before proposing
)

// stallNode is a fake node whose KV handlers answer, stall or refuse, and
// which records the request headers of the mutations it received.
type stallNode struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedClusterServer
	name    string
	rt      *concordpb.RoutingTableResponse
	kv      behaviour
	status  behaviour
	release chan struct{} // closed when the test ends: stalled handlers return

	mu      sync.Mutex
	headers []*concordpb.RequestHeader // guarded by mu
	stale   []bool                     // guarded by mu: each Status request's Stale
}

func (f *stallNode) behave(b behaviour) error {
	switch b {
	case stall:
		<-f.release // ignores the caller's deadline, as a stopped process does
		return status.Error(codes.Unavailable, "released")
	case refuse:
		return status.Error(codes.Unavailable, "shard 1: not the leader here, and the request was already forwarded 2 times")
	}
	return nil
}

func (f *stallNode) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	return f.rt, nil
}

func (f *stallNode) Status(_ context.Context, req *concordpb.StatusRequest) (*concordpb.StatusResponse, error) {
	f.mu.Lock()
	f.stale = append(f.stale, req.GetStale())
	f.mu.Unlock()
	if err := f.behave(f.status); err != nil {
		return nil, err
	}
	return &concordpb.StatusResponse{AnsweredByNodeId: 1}, nil
}

func (f *stallNode) Put(_ context.Context, req *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	f.mu.Lock()
	f.headers = append(f.headers, req.GetHeader())
	f.mu.Unlock()
	if err := f.behave(f.kv); err != nil {
		return nil, err
	}
	return &concordpb.PutResponse{Header: &concordpb.ResponseHeader{ShardId: 1}}, nil
}

func (f *stallNode) Get(context.Context, *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	if err := f.behave(f.kv); err != nil {
		return nil, err
	}
	return &concordpb.GetResponse{Found: true, Value: []byte(f.name)}, nil
}

func (f *stallNode) received() []*concordpb.RequestHeader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*concordpb.RequestHeader(nil), f.headers...)
}

// twoNodes starts a stalled or refusing leader (node 2) and a follower
// (node 1) that behaves as given, both on 127.0.0.1, and returns them with a
// client that knows node 2 leads the only shard. The client is given only
// the follower's address, so that it can learn the routing table.
func twoNodes(t *testing.T, leader, follower behaviour, opts Options) (*stallNode, *stallNode, *Client) {
	t.Helper()
	lf, ll := listen(t), listen(t)
	rt := &concordpb.RoutingTableResponse{
		Nodes: []*concordpb.NodeDescriptor{{NodeId: 1, Address: lf.Addr().String()}, {NodeId: 2, Address: ll.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{
			Shard:        &concordpb.ShardDescriptor{ShardId: 1, StartHash: 0, EndHash: math.MaxUint64},
			LeaderNodeId: 2,
		}},
	}
	release := make(chan struct{})
	fol := &stallNode{name: "follower", rt: rt, kv: follower, release: release}
	lead := &stallNode{name: "leader", rt: rt, kv: leader, release: release}
	serveStall(t, lf, fol)
	serveStall(t, ll, lead)
	t.Cleanup(func() { close(release) }) // runs before the servers stop
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts.Endpoints = []string{lf.Addr().String()}
	c, err := NewWithOptions(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return fol, lead, c
}

func serveStall(t *testing.T, l net.Listener, f *stallNode) {
	s := grpc.NewServer()
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
}

// TestWriteFailsOverFromAStalledLeader protects against a stalled leader
// (SIGSTOP, black hole) consuming a write's whole deadline: the attempt to
// it times out, the next attempt goes to another node within the same call
// and succeeds, and it carries the same session id and sequence number, so
// the write applies at most once even if the stalled leader wakes up.
func TestWriteFailsOverFromAStalledLeader(t *testing.T) {
	fol, lead, c := twoNodes(t, stall, answer, Options{}) // default attempt timeout: 1 s of a 3 s call
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if _, _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("Put with a stalled leader: %v (after %v)", err, time.Since(start))
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Put took %v; the attempt timeout is 1 s", took)
	}
	l, f := lead.received(), fol.received()
	if len(l) != 1 || len(f) != 1 {
		t.Fatalf("leader got %d attempts, follower %d; want 1 and 1", len(l), len(f))
	}
	if l[0].GetSessionId() == 0 || l[0].GetSessionId() != f[0].GetSessionId() || l[0].GetSeq() != f[0].GetSeq() {
		t.Fatalf("the retry changed session/seq: first %d/%d, retry %d/%d",
			l[0].GetSessionId(), l[0].GetSeq(), f[0].GetSessionId(), f[0].GetSeq())
	}
}

// TestReadFailsOverFromAStalledLeader: a read simply retries elsewhere.
func TestReadFailsOverFromAStalledLeader(t *testing.T) {
	_, _, c := twoNodes(t, stall, answer, Options{AttemptTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	v, _, err := c.Get(ctx, []byte("k"))
	if err != nil || string(v) != "follower" {
		t.Fatalf("Get = %q, %v after %v; want it served by the follower", v, err, time.Since(start))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Get took %v; the attempt timeout is 200 ms", took)
	}
}

// TestStatusSkipsAStalledNode protects RoutingTable and Status, which ask
// one node after another: a stalled first node costs one attempt.
func TestStatusSkipsAStalledNode(t *testing.T) {
	_, _, c := twoNodes(t, answer, answer, Options{AttemptTimeout: 200 * time.Millisecond})
	lst, lok := listen(t), listen(t)
	rt := &concordpb.RoutingTableResponse{}
	release := make(chan struct{})
	serveStall(t, lst, &stallNode{rt: rt, status: stall, release: release})
	serveStall(t, lok, &stallNode{rt: rt, status: answer, release: release})
	t.Cleanup(func() { close(release) })
	c.endpoints = []string{lst.Addr().String(), lok.Addr().String()} // the stalled one first
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("Status with a stalled first node: %v", err)
	}
}

// TestStatusAsksStaleOnlyWithStale: Status asks for a linearizable status
// (what `concord status` shows by default), StaleStatus for a stale one.
func TestStatusAsksStaleOnlyWithStale(t *testing.T) {
	_, _, c := twoNodes(t, answer, answer, Options{})
	l := listen(t)
	node := &stallNode{rt: &concordpb.RoutingTableResponse{}, status: answer, release: make(chan struct{})}
	serveStall(t, l, node)
	c.endpoints = []string{l.Addr().String()}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, status := range []func(context.Context) (*concordpb.StatusResponse, error){c.Status, c.StaleStatus} {
		if _, err := status(ctx); err != nil {
			t.Fatalf("Status: %v", err)
		}
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if len(node.stale) != 2 || node.stale[0] || !node.stale[1] {
		t.Fatalf("Status requests asked stale %v; want [false true]", node.stale)
	}
}

// TestAmbiguousOnlyIfAnAttemptMayHaveApplied protects what a failed write
// reports: ambiguous when an attempt timed out at a node (it may have
// proposed), but a plain error when every attempt was refused before
// proposing or never reached a node.
func TestAmbiguousOnlyIfAnAttemptMayHaveApplied(t *testing.T) {
	put := func(c *Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
		return err
	}
	// Generous: on a loaded machine a first connection can take a while, and
	// an attempt that never reached its node is (rightly) not ambiguous.
	opts := Options{AttemptTimeout: 500 * time.Millisecond}

	_, _, c := twoNodes(t, stall, refuse, opts)
	if err := put(c); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("stalled leader, refusing follower: %v; want ErrAmbiguous", err)
	}
	// Refusing nodes answer at once, but under make test's -race load an
	// answer once took longer than 500 ms: that attempt timed out, and a
	// timed-out attempt may have applied (ambiguous, rightly). Only a stall
	// of 2 s can do that here.
	refusing := Options{AttemptTimeout: 2 * time.Second}
	_, _, c = twoNodes(t, refuse, refuse, refusing)
	if err := put(c); err == nil || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("every attempt refused: %v; want a plain error", err)
	}

	// A leader whose port is closed: no attempt can reach it.
	_, _, c = twoNodes(t, answer, refuse, refusing)
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	r := c.routes.Load()
	c.routes.Store(&routes{table: r.table, leaders: r.leaders, addrs: map[uint64]string{1: r.addrs[1], 2: deadAddr}})
	c.refreshing.Store(true) // keep the dead address in the table
	if err := put(c); err == nil || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("leader unreachable, follower refusing: %v; want a plain error", err)
	}
}
