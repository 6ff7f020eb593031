package scheduler

import (
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/replica"
)

// TestR1MoveEndsWithARemovalTheLeaderAccepts: with one replica wanted, a
// move (learner, promote, remove the old voter) passes through two voters,
// and its last step, two voters to the leader alone, must be one the
// shard's leader accepts (replica.RemoveChange, given the step's
// MinVoters); refused, as it was, the shard stayed on two voters (less
// available than one) and a LEAVING node never drained.
func TestR1MoveEndsWithARemovalTheLeaderAccepts(t *testing.T) {
	v := View{Now: base, Settings: DefaultSettings(time.Second), ObservedSince: base.Add(-time.Hour),
		Reports: map[ids.NodeID]Report{}}
	v.Settings.Replication = 1
	v.Nodes = []*concordpb.NodeDescriptor{{NodeId: 1, State: concordpb.NodeState_NODE_LEAVING}, {NodeId: 2}}
	d := &concordpb.ShardDescriptor{ShardId: 1, Epoch: 3, NextReplicaId: 3, Replicas: []*concordpb.ReplicaDescriptor{
		{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}}}
	v.Shards = []*concordpb.ShardDescriptor{d}
	v.Reports[1] = Report{At: base, Replicas: []*concordpb.ReplicaStatus{{ShardId: 1, ReplicaId: 1, LeaderReplicaId: 2, Term: 2, CommitIndex: 10, AppliedIndex: 10}}}
	v.Reports[2] = Report{At: base, Replicas: []*concordpb.ReplicaStatus{{ShardId: 1, ReplicaId: 2, LeaderReplicaId: 2, IsLeader: true, Term: 2, CommitIndex: 10, AppliedIndex: 10}}}
	for _, s := range Schedule(v) {
		if s.Kind != StepRemoveReplica {
			continue
		}
		if _, err := replica.RemoveChange(d, 1, s.Replica, 2, s.MinVoters); err != nil {
			t.Fatalf("%s: the leader refuses it: %v", DescribeStep(s), err)
		}
		return
	}
	t.Fatal("no removal planned: node 1 never drains")
}

// TestRemovalsCarryTheReplicationWanted: every removal the scheduler plans
// names the count the shard is meant to have, so that the leader never lets
// a shard meant for three go below a majority (three voters of a shard
// meant for three, one leaving: the removal carries 3).
func TestRemovalsCarryTheReplicationWanted(t *testing.T) {
	v := View{Now: base, Settings: DefaultSettings(time.Second), ObservedSince: base.Add(-time.Hour),
		Reports: map[ids.NodeID]Report{}}
	v.Nodes = []*concordpb.NodeDescriptor{{NodeId: 1}, {NodeId: 2}, {NodeId: 3}, {NodeId: 4, State: concordpb.NodeState_NODE_LEAVING}}
	d := &concordpb.ShardDescriptor{ShardId: 1, Epoch: 3, NextReplicaId: 5, Replicas: []*concordpb.ReplicaDescriptor{
		{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}, {ReplicaId: 3, NodeId: 3}, {ReplicaId: 4, NodeId: 4}}}
	v.Shards = []*concordpb.ShardDescriptor{d}
	for n := range uint64(4) {
		v.Reports[ids.NodeID(n+1)] = Report{At: base, Replicas: []*concordpb.ReplicaStatus{{ShardId: 1, ReplicaId: n + 1,
			LeaderReplicaId: 1, IsLeader: n == 0, Term: 2, CommitIndex: 10, AppliedIndex: 10}}}
	}
	for _, s := range Schedule(v) {
		if s.Kind == StepRemoveReplica {
			if s.Replica != 4 || s.MinVoters != v.Settings.Replication {
				t.Fatalf("%s with MinVoters %d; want the removal of r4 carrying %d", DescribeStep(s), s.MinVoters, v.Settings.Replication)
			}
			return
		}
	}
	t.Fatal("no removal planned for the leaving node's voter")
}
