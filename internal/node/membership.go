package node

import (
	"context"
	"fmt"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/storepb"
)

// Membership on the placement leader: node removal (`concord node remove`)
// and the execution of the scheduler's node marks (liveness, drained
// nodes). Joining is in bootstrap.go.

// removeNode marks node LEAVING: the scheduler then moves its replicas
// away and marks it REMOVED once no shard lists it. The state machine
// refuses it when fewer than the replication factor of other nodes would
// be up, so that every shard keeps somewhere to put its replicas.
func (n *Node) removeNode(ctx context.Context, node ids.NodeID) (*concordpb.NodeDescriptor, error) {
	res, err := n.proposeMeta(ctx, &storepb.Command{Kind: &storepb.Command_MarkNode{MarkNode: &storepb.MarkNode{
		NodeId: uint64(node), State: concordpb.NodeState_NODE_LEAVING, MinRemaining: uint32(n.cfg.Replicas),
	}}})
	if err != nil {
		return nil, err
	}
	_ = n.book.update(n.eng, res.GetNodes())
	for _, d := range res.GetNodes() {
		if ids.NodeID(d.GetNodeId()) == node {
			n.log.Info("node removal requested: draining", "node", node, "state", d.GetState())
			return d, nil
		}
	}
	return nil, fmt.Errorf("node %d missing from the placement state after marking it", node)
}

// markBusy marks the busy keys of node marks in placementState.inflight, a
// key space apart from shards' repairs and descriptor updates.
const markBusy = 1 << 62

// markNode executes a StepMarkNode: it records the scheduler's judgement
// of a node in the meta shard, in the background, one mark per node at a
// time.
func (n *Node) markNode(s scheduler.Step) {
	n.placementJob(ids.ShardID(s.Target)|markBusy, func(ctx context.Context) {
		_, err := n.proposeMeta(ctx, &storepb.Command{Kind: &storepb.Command_MarkNode{MarkNode: &storepb.MarkNode{
			NodeId: uint64(s.Target), State: s.State,
		}}})
		if err != nil {
			n.log.Info("node state not recorded yet", "node", s.Target, "state", s.State, "err", err)
			return
		}
		n.log.Info("node state recorded", "node", s.Target, "state", s.State)
	})
}
