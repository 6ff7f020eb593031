package node

import (
	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// The node's view of the shards: what its own replicas know, filled in by
// the placement leader's routes from heartbeats. The front door (grpcapi)
// routes and forwards with it; the loops use it to find leaders.

// shardDescriptors returns what this node knows of every shard: its own
// replicas' descriptors, else the placement leader's view from heartbeats.
func (n *Node) shardDescriptors() map[ids.ShardID]*concordpb.ShardDescriptor {
	out := map[ids.ShardID]*concordpb.ShardDescriptor{}
	if routes := n.routes.Load(); routes != nil {
		for _, r := range *routes {
			out[ids.ShardID(r.GetShard().GetShardId())] = r.GetShard()
		}
	}
	for _, info := range n.host.Infos() {
		if info.Desc != nil {
			out[info.Shard] = info.Desc
		}
	}
	return out
}

// leaderOf returns the node leading shard as far as this node knows
// (0 if unknown) and whether that is this node.
func (n *Node) leaderOf(shard ids.ShardID) (leader ids.NodeID, local bool) {
	if info, ok := n.host.Info(shard); ok {
		if info.IsLeader {
			return n.ID(), true
		}
		if info.LeaderNode != 0 {
			return info.LeaderNode, false
		}
	}
	if routes := n.routes.Load(); routes != nil {
		for _, r := range *routes {
			if l := ids.NodeID(r.GetLeaderNodeId()); ids.ShardID(r.GetShard().GetShardId()) == shard && l != n.ID() {
				return l, false
			}
		}
	}
	return 0, false
}

// placementOf is the host's Config.Placement: shard's descriptor in the
// placement leader's routes, and whether any routes arrived yet (a shard
// missing from them does not exist: every shard has a descriptor in the
// meta shard from bootstrap on).
func (n *Node) placementOf(shard ids.ShardID) (*concordpb.ShardDescriptor, bool) {
	routes := n.routes.Load()
	if routes == nil || len(*routes) == 0 {
		return nil, false
	}
	for _, r := range *routes {
		if ids.ShardID(r.GetShard().GetShardId()) == shard {
			return r.GetShard(), true
		}
	}
	return nil, true
}
