package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/localcluster"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// TestLeavingNodeWaitsForItsTentativeWrites: `concord node remove` drains
// a node, but one that holds a tentative write (available mode) stays
// LEAVING, the write and its count in the status shown, until it has
// reconciled it, which it does while leaving and holding no replica: then
// it is REMOVED, and the write is in the cluster. Four nodes, three
// replicas per shard; node 4's reconciler is held back until the drain
// is seen done and the placement leader has gone on planning for a
// second (the rounds that would have removed it).
func TestLeavingNodeWaitsForItsTentativeWrites(t *testing.T) {
	gate := make(chan struct{})
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		cfg.Replicas = 3
		cfg.RepairInterval = 100 * time.Millisecond
		if i == 3 {
			hooks.reconcileGate = gate
		}
	})
	leaving, rest := nodes[3], nodes[:3]
	if _, _, err := leaving.hints.Hold([]byte("hinted"), hints.Put, []byte("held")); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithOptions(context.Background(), client.Options{Endpoints: []string{rest[0].Addr(), rest[1].Addr(), rest[2].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.RemoveNode(ctx, uint64(leaving.ID()))
		return err
	})
	// state gives node 4's status by the placement leader; a REMOVED
	// node 4 while it still holds the write fails at once.
	state := func() (*concordpb.NodeStatus, error) {
		st, err := placementStatus(rest)
		if err != nil {
			return nil, err
		}
		for _, ns := range st.GetNodes() {
			if ns.GetNode().GetNodeId() != uint64(leaving.ID()) {
				continue
			}
			if ns.GetNode().GetState() == concordpb.NodeState_NODE_REMOVED && leaving.hints.Count() > 0 {
				return nil, localcluster.Permanent(fmt.Errorf("node %d removed holding %d tentative writes", leaving.ID(), leaving.hints.Count()))
			}
			return ns, nil
		}
		return nil, errors.New("node 4 missing from the status")
	}
	var drained time.Time
	waitFor(t, 60*time.Second, func() error {
		ns, err := state()
		if err != nil {
			return err
		}
		if ns.GetNode().GetState() != concordpb.NodeState_NODE_LEAVING || ns.GetReplicas() != 0 || ns.GetTentativeWrites() != 1 {
			return fmt.Errorf("node 4: %v, %d replicas, %d tentative writes; want leaving, 0, 1",
				ns.GetNode().GetState(), ns.GetReplicas(), ns.GetTentativeWrites())
		}
		drained = time.Now()
		return nil
	})
	waitFor(t, 20*time.Second, func() error {
		ns, err := state()
		if err != nil {
			return err
		}
		if ns.GetNode().GetState() != concordpb.NodeState_NODE_LEAVING {
			return localcluster.Permanent(fmt.Errorf("node 4 %v while it holds a tentative write", ns.GetNode().GetState()))
		}
		for _, n := range rest {
			n.placement.mu.Lock()
			last := n.placement.lastRound
			n.placement.mu.Unlock()
			if last.Sub(drained) > time.Second {
				return nil
			}
		}
		return errors.New("the placement leader has not planned for a second since the drain")
	})
	close(gate)
	waitFor(t, 30*time.Second, func() error {
		ns, err := state()
		if err != nil {
			return err
		}
		if ns.GetNode().GetState() != concordpb.NodeState_NODE_REMOVED {
			return fmt.Errorf("node 4 %v, holding %d tentative writes", ns.GetNode().GetState(), leaving.hints.Count())
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, found, err := c.Get(ctx, []byte("hinted"))
	if err != nil || !found || string(v) != "held" {
		t.Fatalf("the reconciled write: %q, found %v, err %v; want \"held\"", v, found, err)
	}
}

// TestLeavingNodeHoldsNoNewTentativeWrites: a node whose own record says
// it is leaving (or gone) holds no new tentative write: the placement
// leader removes a drained leaving node once a heartbeat says it holds
// none, and a write held after that heartbeat would be lost with it.
func TestLeavingNodeHoldsNoNewTentativeWrites(t *testing.T) {
	n := &Node{book: addressBook{m: map[ids.NodeID]*concordpb.NodeDescriptor{}}}
	n.ident.Store(&storepb.NodeIdent{NodeId: 4})
	if !n.mayHoldTentative() {
		t.Fatal("a node not yet in its address book refused to hold a tentative write")
	}
	for st, want := range map[concordpb.NodeState]bool{
		concordpb.NodeState_NODE_UP: true, concordpb.NodeState_NODE_SUSPECT: true, concordpb.NodeState_NODE_DEAD: true,
		concordpb.NodeState_NODE_LEAVING: false, concordpb.NodeState_NODE_REMOVED: false, concordpb.NodeState_NODE_REPLACED: false,
	} {
		n.book.m[4] = &concordpb.NodeDescriptor{NodeId: 4, State: st}
		if got := n.mayHoldTentative(); got != want {
			t.Errorf("node recorded %v: mayHoldTentative %v, want %v", st, got, want)
		}
	}
}
