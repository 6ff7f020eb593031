package node

import (
	"context"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
)

// repair runs on the placement leader: it asks the scheduler what the
// cluster needs (internal/placement/scheduler, pure planning) and executes
// the steps, each in the background, one at a time per shard.
func (n *Node) repair(context.Context) {
	if _, local := n.leaderOf(routing.MetaShard); !local {
		n.placement.stopObserving()
		return
	}
	v, err := n.placementView()
	if err != nil {
		n.log.Debug("placement view", "err", err)
		return
	}
	// This node's own leaderships are first-hand: fresher than any report.
	v.LeaderOverride = map[ids.ShardID]ids.NodeID{}
	for _, info := range n.host.Infos() {
		if info.IsLeader {
			v.LeaderOverride[info.Shard] = n.ID()
		}
	}
	for _, s := range scheduler.Schedule(v) {
		n.execute(s)
	}
}

// execute runs step s in the background. Replacement steps and node marks
// are executed today; the scheduler also plans the other kinds (learners,
// promotions, removals, leader transfers), which are skipped until their
// executors exist.
func (n *Node) execute(s scheduler.Step) {
	if s.Kind == scheduler.StepMarkNode {
		n.markNode(s)
		return
	}
	if s.Kind != scheduler.StepReplace {
		n.log.Debug("scheduler step not executed yet", "step", scheduler.DescribeStep(s))
		return
	}
	shard := s.Shard
	if !n.placement.begin(shard) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.placement.end(shard)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.replaceReplica(ctx, s)
	}()
}

// replaceReplica asks the shard's leader (s.Via, possibly this node) for
// the joint change that replaces s.Replica by a new replica on s.Target.
func (n *Node) replaceReplica(ctx context.Context, s scheduler.Step) {
	req := &concordpb.ChangeReplicasRequest{ShardId: uint64(s.Shard), RemoveReplicaId: uint64(s.Replica), AddNodeId: uint64(s.Target)}
	var resp *concordpb.ChangeReplicasResponse
	var err error
	if s.Via == n.ID() {
		resp, err = n.cluster.ChangeReplicas(ctx, req)
	} else {
		c, fctx, cerr := grpcapi.ClusterClientFor(ctx, n.backend(), s.Via)
		if cerr != nil {
			return
		}
		resp, err = c.ChangeReplicas(fctx, req)
	}
	if err != nil {
		n.log.Info("replica replacement not done yet", "shard", s.Shard, "remove", s.Replica, "add_node", s.Target, "err", err)
		return
	}
	n.log.Info("replaced replica", "shard", s.Shard, "removed", s.Replica, "added_on_node", s.Target, "epoch", resp.GetShard().GetEpoch())
	n.recordDescriptor(resp.GetShard())
}
