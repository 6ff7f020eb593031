package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// TestHeartbeatsResumeWhenTheBookShowsNoPeerUp, on three real nodes in
// this process: a node whose address book records every other node
// SUSPECT, and whose last heartbeat failed, still reaches the placement
// leader once it can. The book is refreshed only by a heartbeat answer, so
// a node that takes the next heartbeat's target from the book's UP nodes
// alone sends none at all, and stays silent for good: judged DEAD while
// alive. (The robustness suite's seed 379745906 once failed so: a placement
// leader, paused twice, sent raft messages but no heartbeat the new
// placement leader recorded for 60 s. A resumed leader's first heartbeat
// may find no target: it has stepped down and raft names no leader yet,
// and its routes name itself, so it asks nextCandidate.)
//
// The nodes send only the heartbeats the test sends (testHooks.noHeartbeats),
// so that no answer replaces the book the test gives node a, a node that
// leads no shard (so that its heartbeats must leave it), and none is judged
// silent meanwhile (a long SuspectAfter).
func TestHeartbeatsResumeWhenTheBookShowsNoPeerUp(t *testing.T) {
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0}, func(_ int, cfg *Config, hooks *testHooks) {
		cfg.SuspectAfter, cfg.DeadAfter = time.Minute, 2*time.Minute
		hooks.noHeartbeats = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := leaderless(ctx, t, nodes)
	waitFor(t, 10*time.Second, func() error {
		a.sendHeartbeat(ctx)
		if a.placement.heartbeatFailed.Load() || a.routes.Load() == nil {
			return errors.New("node a has no heartbeat answer yet")
		}
		return nil
	})
	// The book records the peers SUSPECT, as the answer of a placement
	// view that judged them silent does.
	var suspect []*concordpb.NodeDescriptor
	for _, d := range a.book.all() {
		if d.GetNodeId() != uint64(a.ID()) {
			d = proto.CloneOf(d)
			d.State = concordpb.NodeState_NODE_SUSPECT
			suspect = append(suspect, d)
		}
	}
	if len(suspect) != 2 {
		t.Fatalf("node a's book holds %d peers; want 2", len(suspect))
	}
	if err := a.book.update(a.eng, suspect); err != nil {
		t.Fatal(err)
	}
	// Its next heartbeat fails.
	a.partitionFrom(nil)
	a.sendHeartbeat(ctx)
	if !a.placement.heartbeatFailed.Load() {
		t.Fatal("a heartbeat across a partition did not fail")
	}
	a.heal()
	healed := time.Now()
	// Its heartbeats reach the placement leader again.
	waitFor(t, 10*time.Second, func() error {
		a.sendHeartbeat(ctx)
		return reportedSince(nodes, a.ID(), healed)
	})
}

// leaderless has every node report (nodes that send only the heartbeats a
// test sends) until leader balancing has the placement leader and the data
// shard's leader on two nodes, and returns the third: no balancing moves a
// leadership to it while the others lead one each.
func leaderless(ctx context.Context, t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var idle *Node
	waitFor(t, 10*time.Second, func() error {
		idle = nil
		for _, n := range nodes {
			n.sendHeartbeat(ctx)
		}
		leads := 0
		for _, n := range nodes {
			led := 0
			for _, shard := range []ids.ShardID{routing.MetaShard, 1} {
				if _, local := n.leaderOf(shard); local {
					led++
				}
			}
			leads += min(led, 1)
			if led == 0 {
				idle = n
			}
		}
		if leads != 2 || idle == nil {
			return errors.New("the two shards are not led by two nodes yet")
		}
		return nil
	})
	return idle
}

// reportedSince says whether the node that leads placement has recorded a
// report from node since t.
func reportedSince(nodes []*Node, node ids.NodeID, t time.Time) error {
	for _, n := range nodes {
		if _, local := n.leaderOf(routing.MetaShard); !local {
			continue
		}
		if n.ID() == node {
			// Its own heartbeats would not leave it: the test proves nothing.
			return fmt.Errorf("node %d leads placement itself", node)
		}
		n.placement.mu.Lock()
		r, ok := n.placement.reports[node]
		n.placement.mu.Unlock()
		if ok && r.At.After(t) {
			return nil
		}
		return fmt.Errorf("placement leader %d has no report from node %d since the partition healed", n.ID(), node)
	}
	return errors.New("no placement leader")
}

// TestNextCandidate: after a failed heartbeat the next goes to another node
// the book shows UP, in turn; if it shows none UP, to one it shows SUSPECT,
// DEAD or LEAVING (the book may be as stale as the heartbeats that failed);
// never to this node, nor to a node removed or replaced.
func TestNextCandidate(t *testing.T) {
	nodeIn := func(states map[uint64]concordpb.NodeState) *Node {
		n := &Node{}
		n.ident.Store(&storepb.NodeIdent{NodeId: 1})
		n.book.m = map[ids.NodeID]*concordpb.NodeDescriptor{}
		for id, s := range states {
			n.book.m[ids.NodeID(id)] = &concordpb.NodeDescriptor{NodeId: id, State: s}
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		states map[uint64]concordpb.NodeState
		want   []ids.NodeID // the candidates, in any order
	}{
		{"up first", map[uint64]concordpb.NodeState{1: concordpb.NodeState_NODE_UP, 2: concordpb.NodeState_NODE_UP,
			3: concordpb.NodeState_NODE_SUSPECT, 4: concordpb.NodeState_NODE_UP}, []ids.NodeID{2, 4}},
		{"none up", map[uint64]concordpb.NodeState{1: concordpb.NodeState_NODE_UP, 2: concordpb.NodeState_NODE_SUSPECT,
			3: concordpb.NodeState_NODE_DEAD, 4: concordpb.NodeState_NODE_REMOVED, 5: concordpb.NodeState_NODE_LEAVING,
			6: concordpb.NodeState_NODE_REPLACED}, []ids.NodeID{2, 3, 5}},
		{"none but gone ones", map[uint64]concordpb.NodeState{1: concordpb.NodeState_NODE_UP,
			2: concordpb.NodeState_NODE_REMOVED, 3: concordpb.NodeState_NODE_REPLACED}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := nodeIn(tc.states)
			got := map[ids.NodeID]bool{}
			for range 2 * len(tc.states) {
				if c := n.nextCandidate(); c != 0 || len(tc.want) > 0 {
					got[c] = true
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("candidates %v; want %v", got, tc.want)
			}
			for _, id := range tc.want {
				if !got[id] {
					t.Fatalf("candidates %v; want %v", got, tc.want)
				}
			}
		})
	}
}
