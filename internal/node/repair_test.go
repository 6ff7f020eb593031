package node

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/placement/scheduler"
)

// TestChangeRequest protects the executor's translation of scheduler steps
// into ChangeReplicas requests: each kind, its fields, and the epoch it was
// planned at (which makes the leader refuse a plan made on an older
// membership).
func TestChangeRequest(t *testing.T) {
	for _, c := range []struct {
		step scheduler.Step
		want *concordpb.ChangeReplicasRequest
	}{
		{scheduler.Step{Kind: scheduler.StepReplace, Shard: 3, Epoch: 4, Replica: 2, Target: 5},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 4, RemoveReplicaId: 2, AddNodeId: 5}},
		{scheduler.Step{Kind: scheduler.StepAddLearner, Shard: 3, Epoch: 4, Target: 5},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 4, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, AddNodeId: 5}},
		{scheduler.Step{Kind: scheduler.StepPromoteLearner, Shard: 3, Epoch: 5, Replica: 7, ReplicaNode: 5},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 5, Kind: concordpb.ChangeKind_CHANGE_PROMOTE, ReplicaId: 7}},
		{scheduler.Step{Kind: scheduler.StepRemoveReplica, Shard: 3, Epoch: 6, Replica: 2, ReplicaNode: 2},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 6, Kind: concordpb.ChangeKind_CHANGE_REMOVE, ReplicaId: 2}},
	} {
		if got := changeRequest(c.step); !proto.Equal(got, c.want) {
			t.Errorf("%s: request %v, want %v", scheduler.DescribeStep(c.step), got, c.want)
		}
	}
}
