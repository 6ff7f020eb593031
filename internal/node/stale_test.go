package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/version"
)

// pausableTicks is a raft tick source (testHooks.ticks) that ticks every
// interval until the test pauses it: a paused node's raft has no clock, so
// CheckQuorum never steps its leaders down, as a SIGSTOPped process's
// cannot, while the rest of the node (its gRPC handlers, its heartbeat
// and repair loops, on real timers) goes on.
type pausableTicks struct {
	c      chan time.Time
	paused atomic.Bool
	done   chan struct{}
	once   sync.Once
}

func newPausableTicks(interval time.Duration) *pausableTicks {
	p := &pausableTicks{c: make(chan time.Time, 1), done: make(chan struct{})}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case now := <-t.C:
				if p.paused.Load() {
					continue
				}
				select {
				case p.c <- now:
				default:
				}
			}
		}
	}()
	return p
}

func (p *pausableTicks) C() <-chan time.Time { return p.c }
func (p *pausableTicks) Stop()               { p.once.Do(func() { close(p.done) }) }

// deposedPlacementLeader starts three real nodes in this process, then
// freezes the raft clock of the placement leader (stale) and cuts it off
// from the others, and waits until another node (fresh) leads the meta
// shard and has recorded stale SUSPECT there, while stale still believes
// it leads: no tick steps it down (CheckQuorum), no message brings it the
// new term. That is a stale placement leader in the window before it
// learns it was deposed, held open for as long as the test needs.
func deposedPlacementLeader(t *testing.T) (nodes []*Node, stale, fresh *Node) {
	t.Helper()
	ticks := make([]*pausableTicks, 3)
	nodes, _ = startClusterWith(t, []version.Level{0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		cfg.SuspectAfter, cfg.DeadAfter = 300*time.Millisecond, time.Minute
		ticks[i] = newPausableTicks(cfg.TickInterval)
		hooks.ticks = ticks[i]
	})
	var idx int
	waitFor(t, 10*time.Second, func() error {
		stale = nil
		for i, n := range nodes {
			if n.routes.Load() == nil {
				return fmt.Errorf("node %d has no heartbeat answer yet", n.ID())
			}
			if _, local := n.leaderOf(routing.MetaShard); local {
				stale, idx = n, i
			}
		}
		if stale == nil {
			return errors.New("no placement leader yet")
		}
		return nil
	})
	ticks[idx].paused.Store(true)
	stale.partitionFrom(nil)
	waitFor(t, 20*time.Second, func() error {
		if isLeader, _, _ := stale.host.Leader(routing.MetaShard); !isLeader {
			t.Fatalf("node %d stepped down with its raft clock stopped", stale.ID())
		}
		fresh = nil
		for _, n := range nodes {
			if _, local := n.leaderOf(routing.MetaShard); local && n != stale {
				fresh = n
			}
		}
		if fresh == nil {
			return errors.New("no new meta leader yet")
		}
		if st, _ := recordedState(t, fresh, stale.ID()); st != concordpb.NodeState_NODE_SUSPECT {
			return fmt.Errorf("the new placement leader records node %d %s", stale.ID(), st)
		}
		return nil
	})
	return nodes, stale, fresh
}

// recordedState is node's state in n's local copy of the placement state;
// false if it lists no such node.
func recordedState(t *testing.T, n *Node, node ids.NodeID) (concordpb.NodeState, bool) {
	t.Helper()
	var ds []*concordpb.NodeDescriptor
	err := n.eng.Read(func(r storage.Reader) (err error) {
		ds, err = placement.Nodes(r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if ids.NodeID(d.GetNodeId()) == node {
			return d.GetState(), true
		}
	}
	return 0, false
}

// TestDeposedPlacementLeaderAnswersNoHeartbeat: a placement leader that was
// deposed but does not know it yet refuses heartbeats (Unavailable: the
// sender tries another node, which forwards to the real leader) rather
// than answering from its own state, which is stale. A node that takes
// such an answer overwrites its fresher book and routes with it: it
// records nodes in states the cluster left (here the deposed node UP,
// where the new leader recorded it SUSPECT; a node back UP recorded DEAD
// makes it drop that node's leaders, LeaderGone), names the deposed node
// as placement leader, and keeps heartbeating it.
func TestDeposedPlacementLeaderAnswersNoHeartbeat(t *testing.T) {
	nodes, stale, fresh := deposedPlacementLeader(t)
	var other *Node
	for _, n := range nodes {
		if n != stale && n != fresh {
			other = n
		}
	}
	// The heartbeat other would send, taken by the handler a peer's RPC
	// reaches (the partition's interceptor is not in this path).
	req := &concordpb.HeartbeatRequest{Node: other.book.get(other.ID()), Version: uint32(other.level())}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := stale.cluster.Heartbeat(ctx, req)
	if err == nil {
		state := "missing"
		for _, d := range resp.GetNodes() {
			if ids.NodeID(d.GetNodeId()) == stale.ID() {
				state = d.GetState().String()
			}
		}
		t.Fatalf("deposed placement leader %d answered a heartbeat: it names %d placement leader (%d leads) and itself %s (recorded SUSPECT)",
			stale.ID(), resp.GetMetaLeaderNodeId(), fresh.ID(), state)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("deposed placement leader refused a heartbeat with %v; want Unavailable (retry elsewhere)", err)
	}
}

// TestDeposedPlacementLeaderPlansNothing: a placement leader that was
// deposed but does not know it yet runs no scheduler round. Its reports
// stop with its leadership, so it judges every node silent (here SUSPECT,
// itself included) and would act on that: propose marks (which raft
// refuses, but only after holding them for their timeout) and send steps
// to shard leaders planned from a stale view of liveness, which a leader
// whose shard did not change accepts (its epoch check is all it checks).
func TestDeposedPlacementLeaderPlansNothing(t *testing.T) {
	_, stale, _ := deposedPlacementLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stale.repair(ctx)
	// Marks only: a step the leader began while it still led (a transfer
	// from leader balancing, say) may still be under way, and says
	// nothing. A mark is planned only for a node silent past SuspectAfter,
	// longer than the leader's lease outlives the partition.
	stale.placement.mu.Lock()
	defer stale.placement.mu.Unlock()
	for key := range stale.placement.inflight {
		if key&markBusy != 0 {
			t.Errorf("deposed placement leader %d is marking node %d from its stale view", stale.ID(), uint64(key&^markBusy))
		}
	}
}
