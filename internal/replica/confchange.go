package replica

import (
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storepb"
)

// ReplaceChange builds the joint conf change that swaps replica remove of
// desc's shard for a fresh replica on node addNode. The new replica takes
// the shard's next replica id, never used before (raft ids must never be
// reused). cmdID is the proposal id the change completes when it applies.
//
// It refuses a node that already holds a replica of the shard (two replicas
// of one shard on a node share one key prefix) and a replica that is not a
// member.
func ReplaceChange(desc *concordpb.ShardDescriptor, cmdID uint64, remove ids.ReplicaID, addNode ids.NodeID) (*pb.ConfChangeV2, error) {
	if desc == nil {
		return nil, fmt.Errorf("shard has no descriptor yet")
	}
	found := false
	for _, rd := range desc.GetReplicas() {
		if rd.GetNodeId() == uint64(addNode) {
			return nil, fmt.Errorf("shard %d already has a replica on node %d", desc.GetShardId(), addNode)
		}
		found = found || rd.GetReplicaId() == uint64(remove)
	}
	if !found {
		return nil, fmt.Errorf("shard %d has no replica %d", desc.GetShardId(), remove)
	}
	added := &concordpb.ReplicaDescriptor{ReplicaId: desc.GetNextReplicaId(), NodeId: uint64(addNode)}
	ctx, err := proto.Marshal(&storepb.ConfChangeContext{CommandId: cmdID, Added: []*concordpb.ReplicaDescriptor{added}})
	if err != nil {
		return nil, err
	}
	return &pb.ConfChangeV2{
		Changes: []*pb.ConfChangeSingle{
			{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(added.GetReplicaId())},
			{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(remove))},
		},
		Context: ctx,
	}, nil
}

// AddLearnerChange builds the change that adds a fresh learner of desc's
// shard on node node, with the shard's next (never used) replica id. A
// learner receives the log and snapshots but neither votes nor counts for
// quorum, so adding one never changes what it takes to commit: the first
// half of a safe replacement. cmdID is the proposal id the change completes.
func AddLearnerChange(desc *concordpb.ShardDescriptor, cmdID uint64, node ids.NodeID) (*pb.ConfChangeV2, error) {
	if desc == nil {
		return nil, fmt.Errorf("shard has no descriptor yet")
	}
	if node == 0 {
		return nil, fmt.Errorf("no node to add a learner on")
	}
	for _, rd := range desc.GetReplicas() {
		if rd.GetNodeId() == uint64(node) {
			return nil, fmt.Errorf("shard %d already has a replica on node %d", desc.GetShardId(), node)
		}
	}
	added := &concordpb.ReplicaDescriptor{ReplicaId: desc.GetNextReplicaId(), NodeId: uint64(node), Role: concordpb.ReplicaRole_REPLICA_LEARNER}
	return single(pb.ConfChangeAddLearnerNode, added.GetReplicaId(), &storepb.ConfChangeContext{CommandId: cmdID, Added: []*concordpb.ReplicaDescriptor{added}})
}

// PromoteChange builds the change that makes learner id of desc's shard a
// voter. The caller decides that the learner has caught up; raft itself
// would accept a promotion of a lagging learner, which then only slows
// commits until it catches up.
func PromoteChange(desc *concordpb.ShardDescriptor, cmdID uint64, id ids.ReplicaID) (*pb.ConfChangeV2, error) {
	rd, err := memberOf(desc, id)
	if err != nil {
		return nil, err
	}
	if rd.GetRole() != concordpb.ReplicaRole_REPLICA_LEARNER {
		return nil, fmt.Errorf("replica %d of shard %d is already a voter", id, desc.GetShardId())
	}
	return single(pb.ConfChangeAddNode, uint64(id), &storepb.ConfChangeContext{CommandId: cmdID})
}

// RemoveChange builds the change that removes replica id from desc's shard.
// leader is the replica proposing it. It refuses to remove the leader itself
// (etcd raft lets a leader remove itself, but the group then stalls until an
// election times out: transfer leadership away first) and to remove a voter
// when fewer voters than a majority of the current ones would remain (a
// step that can cost the shard its quorum, or, from two voters, leave its
// data on one, is not one to take in one go), unless minVoters (the
// replication factor wanted; 0: none given) is lower and that many remain:
// a shard meant to have one replica may go from two voters to its leader
// alone, which holds every committed entry. Removing a learner never
// touches the quorum.
func RemoveChange(desc *concordpb.ShardDescriptor, cmdID uint64, id, leader ids.ReplicaID, minVoters int) (*pb.ConfChangeV2, error) {
	rd, err := memberOf(desc, id)
	if err != nil {
		return nil, err
	}
	if id == leader {
		return nil, fmt.Errorf("replica %d leads shard %d: transfer leadership away before removing it", id, desc.GetShardId())
	}
	if rd.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER {
		voters := 0
		for _, r := range desc.GetReplicas() {
			if r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER {
				voters++
			}
		}
		floor := voters/2 + 1
		if minVoters > 0 && minVoters < floor {
			floor = minVoters
		}
		if voters-1 < floor {
			return nil, fmt.Errorf("removing voter %d would leave shard %d %d voters, fewer than a majority of its %d", id, desc.GetShardId(), voters-1, voters)
		}
	}
	return single(pb.ConfChangeRemoveNode, uint64(id), &storepb.ConfChangeContext{CommandId: cmdID})
}

// memberOf returns replica id's entry in desc.
func memberOf(desc *concordpb.ShardDescriptor, id ids.ReplicaID) (*concordpb.ReplicaDescriptor, error) {
	if desc == nil {
		return nil, fmt.Errorf("shard has no descriptor yet")
	}
	for _, rd := range desc.GetReplicas() {
		if rd.GetReplicaId() == uint64(id) {
			return rd, nil
		}
	}
	return nil, fmt.Errorf("shard %d has no replica %d", desc.GetShardId(), id)
}

// single builds a one-step change: raft applies it directly, without a
// joint configuration, which is safe because it changes at most one voter.
func single(t pb.ConfChangeType, id uint64, c *storepb.ConfChangeContext) (*pb.ConfChangeV2, error) {
	ctx, err := proto.Marshal(c)
	if err != nil {
		return nil, err
	}
	return &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(id)}}, Context: ctx}, nil
}
