package grpcapi

import (
	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// checkChange validates a ChangeReplicas request: a known kind, and the
// fields that kind needs (and no others, so a caller who confused two kinds
// hears of it).
func checkChange(req *concordpb.ChangeReplicasRequest) (Change, error) {
	c := Change{Kind: req.GetKind(), Shard: ids.ShardID(req.GetShardId()), Epoch: req.GetPlannedEpoch()}
	rm, add, rep := req.GetRemoveReplicaId(), req.GetAddNodeId(), req.GetReplicaId()
	switch c.Kind {
	case concordpb.ChangeKind_CHANGE_REPLACE:
		if rm == 0 || add == 0 || rep != 0 {
			return c, invalid("a replacement needs remove_replica_id and add_node_id (and no replica_id)")
		}
		c.Replica, c.Node = ids.ReplicaID(rm), ids.NodeID(add)
	case concordpb.ChangeKind_CHANGE_ADD_LEARNER:
		if add == 0 || rm != 0 || rep != 0 {
			return c, invalid("adding a learner needs add_node_id (and no replica ids)")
		}
		c.Node = ids.NodeID(add)
	case concordpb.ChangeKind_CHANGE_PROMOTE, concordpb.ChangeKind_CHANGE_REMOVE:
		if rep == 0 || rm != 0 || add != 0 {
			return c, invalid("%v needs replica_id (and no remove_replica_id or add_node_id)", c.Kind)
		}
		c.Replica = ids.ReplicaID(rep)
	default:
		return c, invalid("unknown change kind %d", c.Kind)
	}
	if req.GetMinVoters() != 0 && c.Kind != concordpb.ChangeKind_CHANGE_REMOVE {
		return c, invalid("min_voters is for CHANGE_REMOVE only")
	}
	c.MinVoters = int(req.GetMinVoters())
	return c, nil
}

// checkTransfer validates a TransferLeader request: exactly one of
// replica_id and node_id names the target.
func checkTransfer(req *concordpb.TransferLeaderRequest) error {
	if (req.GetReplicaId() == 0) == (req.GetNodeId() == 0) {
		return invalid("name the new leader by exactly one of replica_id and node_id")
	}
	return nil
}

// transferTarget returns the replica and node req names in d, the leader's
// descriptor of the shard.
func transferTarget(d *concordpb.ShardDescriptor, req *concordpb.TransferLeaderRequest) (ids.ReplicaID, ids.NodeID, error) {
	for _, rd := range d.GetReplicas() {
		if rd.GetReplicaId() == req.GetReplicaId() || rd.GetNodeId() == req.GetNodeId() {
			return ids.ReplicaID(rd.GetReplicaId()), ids.NodeID(rd.GetNodeId()), nil
		}
	}
	if req.GetNodeId() != 0 {
		return 0, 0, failedPrecondition("shard %d has no replica on node %d", req.GetShardId(), req.GetNodeId())
	}
	return 0, 0, failedPrecondition("shard %d has no replica %d", req.GetShardId(), req.GetReplicaId())
}
