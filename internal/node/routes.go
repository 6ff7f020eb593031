package node

import (
	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/routing"
)

// The node's view of the shards: what its own replicas know, filled in by
// the placement leader's routes from heartbeats. The front door (grpcapi)
// routes and forwards with it; the loops use it to find leaders.

// routeView is what the front door derives from the shards this node
// knows of: built once per change of its inputs (the host's descriptors,
// the placement leader's routes), not once per request — rebuilding it per
// request was a tenth of the allocations of a read.
type routeView struct {
	gen    uint64                                     // the host's DescGeneration it was built from
	routes *[]*concordpb.ShardRoute                   // the routes it was built from
	descs  map[ids.ShardID]*concordpb.ShardDescriptor // read-only
	table  *routing.Table
}

// routes returns the current view, rebuilding it if its inputs changed.
// The generation is read before the descriptors, so a change racing with a
// rebuild leaves a view that the next call rebuilds again.
func (n *Node) routeView() *routeView {
	gen, routes := n.host.DescGeneration(), n.routes.Load()
	if v := n.routeCache.Load(); v != nil && v.gen == gen && v.routes == routes {
		return v
	}
	descs := n.buildDescriptors(routes)
	list := make([]*concordpb.ShardDescriptor, 0, len(descs))
	for _, d := range descs {
		list = append(list, d)
	}
	v := &routeView{gen: gen, routes: routes, descs: descs, table: routing.NewTable(list)}
	n.routeCache.Store(v)
	return v
}

// shardDescriptors returns what this node knows of every shard: its own
// replicas' descriptors, else the placement leader's view from heartbeats.
// The map is shared: callers must not modify it.
func (n *Node) shardDescriptors() map[ids.ShardID]*concordpb.ShardDescriptor {
	return n.routeView().descs
}

// routingTable is the table of shardDescriptors, for key lookups.
func (n *Node) routingTable() *routing.Table { return n.routeView().table }

func (n *Node) buildDescriptors(routes *[]*concordpb.ShardRoute) map[ids.ShardID]*concordpb.ShardDescriptor {
	out := map[ids.ShardID]*concordpb.ShardDescriptor{}
	if routes != nil {
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
	if isLeader, leader, ok := n.host.Leader(shard); ok {
		if isLeader {
			return n.ID(), true
		}
		if leader != 0 {
			return leader, false
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
