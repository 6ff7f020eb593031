package grpcapi

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// shardOf returns the shard that owns key.
func shardOf(r Router, key []byte) (ids.ShardID, error) {
	d := r.Table().Lookup(key)
	if d == nil {
		return 0, status.Error(codes.Unavailable, "this node does not know the shard of the key yet")
	}
	return ids.ShardID(d.GetShardId()), nil
}

// anyReplicaNode returns a node hosting a replica of shard, preferring the leader.
func anyReplicaNode(r Router, shard ids.ShardID) ids.NodeID {
	if leader, _ := r.Leader(shard); leader != 0 {
		return leader
	}
	if d := r.Descriptors()[shard]; d != nil && len(d.GetReplicas()) > 0 {
		return ids.NodeID(d.GetReplicas()[0].GetNodeId())
	}
	return 0
}

// header builds the response header for shard.
func header(r Router, shard ids.ShardID) *concordpb.ResponseHeader {
	h := &concordpb.ResponseHeader{ShardId: uint64(shard), ServedByNodeId: uint64(r.ID())}
	if leader, _ := r.Leader(shard); leader != 0 {
		h.LeaderNodeId = uint64(leader)
		h.LeaderAddress, _ = r.Resolve(leader)
	}
	return h
}

// ready fails with Unavailable until the node has an identity and raft runs.
func ready(r interface{ Ready() <-chan struct{} }, msg string) error {
	select {
	case <-r.Ready():
		return nil
	default:
		return status.Error(codes.Unavailable, msg)
	}
}

// notReady is the text of ready's error for client-facing services.
const notReady = "node not initialized yet (waiting for its peers)"
