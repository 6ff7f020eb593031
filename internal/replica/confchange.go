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
