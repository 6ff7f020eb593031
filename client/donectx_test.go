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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// doneContexts are contexts done before a call starts: cancelled, and one
// whose deadline passed a second ago.
func doneContexts() []struct {
	name string
	ctx  context.Context
	err  error
	code codes.Code
} {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	cancelPast() // done already; its error stays DeadlineExceeded
	return []struct {
		name string
		ctx  context.Context
		err  error
		code codes.Code
	}{
		{"cancelled", cancelled, context.Canceled, codes.Canceled},
		{"past its deadline", past, context.DeadlineExceeded, codes.DeadlineExceeded},
	}
}

// TestCallWithADoneContextFailsWithItsError protects a KV call whose
// context is done before it starts, on each path: it makes no attempt
// (the node receives nothing) and fails with the context's error alone,
// its code and words, never ErrAmbiguous. Unary writes were reported
// ErrAmbiguous (gRPC refused the call locally with the context's code,
// read as an attempt cut in flight), and the request streams answered
// Unavailable with a made-up last error ("no connection to the node was
// ready in time") from a node whose connection was ready.
func TestCallWithADoneContextFailsWithItsError(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f, c := scriptedNode(t, p.opts, func(int, *concordpb.RequestHeader) error { return nil })
			// One call first, so that the connection (and stream) is up.
			if _, _, err := c.Put(context.Background(), []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			before := len(f.received())
			for _, o := range kvOps {
				for _, d := range doneContexts() {
					err := o.op(d.ctx, c)
					what := o.name + " " + d.name
					switch {
					case err == nil:
						t.Errorf("%s: succeeded", what)
					case errors.Is(err, ErrAmbiguous):
						t.Errorf("%s: %v: ErrAmbiguous, though nothing was sent", what, err)
					case !errors.Is(err, d.err) || status.Code(err) != d.code || err.Error() != d.err.Error():
						t.Errorf("%s: %v (code %v); want the context's error alone, %v, code %v", what, err, status.Code(err), d.err, d.code)
					}
				}
			}
			if n := len(f.received()) - before; n != 0 {
				t.Errorf("the node received %d requests from calls whose context was done", n)
			}
		})
	}
}

// TestHelpersWithADoneContextFailWithItsError: the calls that ask one
// node after another fail with the context's error alone too, not with a
// made-up "no node known" as their last error.
func TestHelpersWithADoneContextFailWithItsError(t *testing.T) {
	_, c := scriptedNode(t, Options{}, func(int, *concordpb.RequestHeader) error { return nil })
	for _, d := range doneContexts() {
		_, err := c.RoutingTable(d.ctx)
		if !errors.Is(err, d.err) || status.Code(err) != d.code || err.Error() != d.err.Error() {
			t.Errorf("RoutingTable %s: %v (code %v); want the context's error alone, %v, code %v", d.name, err, status.Code(err), d.err, d.code)
		}
	}
}

// blackHole is a stalled node: its port accepts connections (the kernel
// does, for a SIGSTOPped process) and never reads or answers them.
type blackHole struct {
	l        net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	b := &blackHole{l: listen(t)}
	go func() {
		for {
			c, err := b.l.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		b.l.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			c.Close()
		}
	})
	return b
}

// routeToStalledLeader gives c a routing table whose one shard is led by
// the stalled node behind hole (node 2), the scripted node f being node 1.
func routeToStalledLeader(t *testing.T, f *scriptNode, c *Client, hole *blackHole) {
	t.Helper()
	f.rt = &concordpb.RoutingTableResponse{
		Nodes: []*concordpb.NodeDescriptor{{NodeId: 1, Address: c.endpoints[0]}, {NodeId: 2, Address: hole.l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64},
			LeaderNodeId: 2}},
	}
	if err := c.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestWriteToAStalledNodeNeverConnectedIsNotAmbiguous: a write whose
// first attempt goes to a stalled leader the client has no connection to
// yet never leaves the client (no connection becomes ready), so when its
// other attempts are refused it fails plainly, not ErrAmbiguous, on each
// path, and the attempt's error is the client's not-sent Unavailable. The
// request streams took the call out of their queue before opening the
// stream, so its attempt, ended while the stream opened, read as sent;
// unary gRPC's error for a call that waited for a ready connection had
// the context's code, which read as an attempt cut in flight.
func TestWriteToAStalledNodeNeverConnectedIsNotAmbiguous(t *testing.T) {
	refused := status.Error(codes.Unavailable, "shard 1: no leader known")
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			hole := newBlackHole(t)
			opts := p.opts
			opts.AttemptTimeout = 300 * time.Millisecond
			f, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return refused })
			// The first attempt goes to the stalled node, the others (it is
			// avoided once its attempt ran out) to the node that refuses.
			routeToStalledLeader(t, f, c, hole)
			for _, o := range kvOps {
				if !o.write {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
				err := o.op(ctx, c)
				cancel()
				if errors.Is(err, ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.Unavailable {
					t.Errorf("%s: %v (code %v); want a plain deadline error, code Unavailable", o.name, err, status.Code(err))
				}
			}
			if hole.accepted.Load() == 0 {
				t.Fatal("no attempt went to the stalled node")
			}
		})
	}
}

// TestStalledLeaderNeverConnectedIsAvoided: a write whose first attempt
// goes to a stalled leader the client has no connection to yet is not
// sent there (no connection becomes ready), and its next attempt goes to
// another node at once, as after a timeout, so it succeeds within a
// deadline shorter than two attempts. Before, a not-sent attempt left the
// node eligible: the routing table's leader took the first three attempts
// (each waiting out its attempt timeout, with backoffs between), and the
// write failed at its deadline (the tcp wire) or came late.
func TestStalledLeaderNeverConnectedIsAvoided(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			hole := newBlackHole(t)
			opts := p.opts
			opts.AttemptTimeout = 400 * time.Millisecond
			f, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return nil })
			routeToStalledLeader(t, f, c, hole)
			// Two attempts at the stalled node would take 800 ms of it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
				t.Fatalf("put with the routing table's leader stalled and never connected: %v", err)
			}
			if hole.accepted.Load() == 0 {
				t.Fatal("no attempt went to the stalled node")
			}
		})
	}
}
