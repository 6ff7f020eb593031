package node

import (
	"context"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
)

// repair runs on the placement leader: every replica on a node that was
// REPLACED (its data is gone; a fresh node took its address) is swapped for
// a new replica on the node that replaced it.
func (n *Node) repair(ctx context.Context) {
	if _, local := n.leaderOf(routing.MetaShard); !local {
		return
	}
	nodes, err := placement.Nodes(n.eng.DB)
	if err != nil {
		return
	}
	shards, err := placement.Shards(n.eng.DB)
	if err != nil {
		return
	}
	up := map[uint64]bool{}
	for _, d := range nodes {
		up[d.GetNodeId()] = d.GetState() == concordpb.NodeState_NODE_UP
	}
	leaders := n.meta.leaders(n.reportMaxAge())
	for _, old := range nodes {
		if old.GetState() != concordpb.NodeState_NODE_REPLACED || !up[old.GetReplacedBy()] {
			continue
		}
		for _, d := range shards {
			for _, r := range d.GetReplicas() {
				if r.GetNodeId() == old.GetNodeId() {
					n.replaceReplica(d, r.GetReplicaId(), old.GetReplacedBy(), leaders[d.GetShardId()])
				}
			}
		}
	}
}

func (n *Node) replaceReplica(d *concordpb.ShardDescriptor, remove, addNode, leader uint64) {
	shard := d.GetShardId()
	if _, local := n.leaderOf(shard); local {
		leader = n.ID()
	}
	if leader == 0 || !n.meta.begin(shard) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.meta.end(shard)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := &concordpb.ChangeReplicasRequest{ShardId: shard, RemoveReplicaId: remove, AddNodeId: addNode}
		var resp *concordpb.ChangeReplicasResponse
		var err error
		if leader == n.ID() {
			resp, err = n.cluster.ChangeReplicas(ctx, req)
		} else {
			c, fctx, cerr := grpcapi.ClusterClientFor(ctx, n.backend(), leader)
			if cerr != nil {
				return
			}
			resp, err = c.ChangeReplicas(fctx, req)
		}
		if err != nil {
			n.log.Info("replica replacement not done yet", "shard", shard, "remove", remove, "add_node", addNode, "err", err)
			return
		}
		n.log.Info("replaced replica", "shard", shard, "removed", remove, "added_on_node", addNode, "epoch", resp.GetShard().GetEpoch())
		n.recordDescriptor(resp.GetShard())
	}()
}
