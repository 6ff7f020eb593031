package node

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/routing"
)

// maxHops bounds node-to-node forwarding of one request, so that nodes with
// stale leader hints cannot bounce a request between them forever.
const maxHops = 2

// shardDescriptors returns what this node knows of every shard: its own
// replicas' descriptors, else the placement leader's view from heartbeats.
func (n *Node) shardDescriptors() map[uint64]*concordpb.ShardDescriptor {
	out := map[uint64]*concordpb.ShardDescriptor{}
	if routes := n.routes.Load(); routes != nil {
		for _, r := range *routes {
			out[r.GetShard().GetShardId()] = r.GetShard()
		}
	}
	for _, info := range n.host.Infos() {
		if info.Desc != nil {
			out[info.Shard] = info.Desc
		}
	}
	return out
}

// table returns the routing table of the user shards this node knows of.
func (n *Node) table() *routing.Table {
	descs := n.shardDescriptors()
	list := make([]*concordpb.ShardDescriptor, 0, len(descs))
	for _, d := range descs {
		list = append(list, d)
	}
	return routing.NewTable(list)
}

// shardOf returns the shard that owns key.
func (n *Node) shardOf(key []byte) (uint64, error) {
	d := n.table().Lookup(key)
	if d == nil {
		return 0, status.Error(codes.Unavailable, "this node does not know the shard of the key yet")
	}
	return d.GetShardId(), nil
}

// leaderOf returns the node leading shard as far as this node knows
// (0 if unknown) and whether that is this node.
func (n *Node) leaderOf(shard uint64) (leader uint64, local bool) {
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
			if r.GetShard().GetShardId() == shard && r.GetLeaderNodeId() != n.ID() {
				return r.GetLeaderNodeId(), false
			}
		}
	}
	return 0, false
}

// anyReplicaNode returns a node hosting a replica of shard, preferring the leader.
func (n *Node) anyReplicaNode(shard uint64) uint64 {
	if leader, _ := n.leaderOf(shard); leader != 0 {
		return leader
	}
	if d := n.shardDescriptors()[shard]; d != nil && len(d.GetReplicas()) > 0 {
		return d.GetReplicas()[0].GetNodeId()
	}
	return 0
}

// header builds the response header for shard.
func (n *Node) header(shard uint64) *concordpb.ResponseHeader {
	h := &concordpb.ResponseHeader{ShardId: shard, ServedByNodeId: n.ID()}
	if leader, _ := n.leaderOf(shard); leader != 0 {
		h.LeaderNodeId = leader
		h.LeaderAddress, _ = n.book.resolve(leader)
	}
	return h
}

// kvClientFor returns a KV client for node, or Unavailable if this request
// may not be forwarded further.
func (n *Node) kvClientFor(node uint64, hops uint32, shard uint64) (concordpb.KVClient, error) {
	if node == 0 {
		return nil, status.Errorf(codes.Unavailable, "shard %d: no leader known yet (election in progress?)", shard)
	}
	if hops >= maxHops {
		return nil, status.Errorf(codes.Unavailable, "shard %d: not the leader here, and the request was already forwarded %d times", shard, hops)
	}
	if n.blocked(node) {
		return nil, status.Errorf(codes.Unavailable, "shard %d: leader node %d is cut off by a partition (fault injection)", shard, node)
	}
	addr, ok := n.book.resolve(node)
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "shard %d: leader node %d has no known address", shard, node)
	}
	conn, err := n.conns.get(addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "connect to node %d at %s: %v", node, addr, err)
	}
	return concordpb.NewKVClient(conn), nil
}

// clusterClientFor returns a Cluster client for node, with the forwarding
// hop count carried in the outgoing context's metadata.
func (n *Node) clusterClientFor(ctx context.Context, node uint64) (concordpb.ClusterClient, context.Context, error) {
	hops := incomingHops(ctx)
	if node == 0 || node == n.ID() {
		return nil, ctx, status.Error(codes.Unavailable, "placement leader unknown")
	}
	if hops >= maxHops {
		return nil, ctx, status.Errorf(codes.Unavailable, "request already forwarded %d times", hops)
	}
	if n.blocked(node) {
		return nil, ctx, status.Errorf(codes.Unavailable, "node %d is cut off by a partition (fault injection)", node)
	}
	addr, ok := n.book.resolve(node)
	if !ok {
		return nil, ctx, status.Errorf(codes.Unavailable, "node %d has no known address", node)
	}
	conn, err := n.conns.get(addr)
	if err != nil {
		return nil, ctx, status.Errorf(codes.Unavailable, "connect to node %d at %s: %v", node, addr, err)
	}
	out := metadata.AppendToOutgoingContext(ctx, hopsKey, strconv.Itoa(int(hops+1)))
	return concordpb.NewClusterClient(conn), out, nil
}

const hopsKey = "concord-hops"

func incomingHops(ctx context.Context) uint32 {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(hopsKey); len(v) > 0 {
		h, _ := strconv.Atoi(v[0])
		return uint32(h)
	}
	return 0
}

func forwardedHeader(h *concordpb.RequestHeader) *concordpb.RequestHeader {
	return &concordpb.RequestHeader{SessionId: h.GetSessionId(), Seq: h.GetSeq(), Consistency: h.GetConsistency(), Hops: h.GetHops() + 1}
}
