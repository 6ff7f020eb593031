package scheduler

import (
	"cmp"
	"slices"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// checkSteps asserts what every plan must satisfy, whatever the view: in
// shard order, at most one step per shard and none for a busy one, only
// replace steps sent to a known leader, never a new replica on a node that
// is not UP, and every step consistent with the shard's descriptor. The
// harness runs it on every scripted schedule, the property tests on every
// random view.
func checkSteps(t *testing.T, v View, steps []Step) {
	t.Helper()
	if !slices.IsSortedFunc(steps, func(a, b Step) int { return cmp.Compare(a.Shard, b.Shard) }) {
		t.Fatalf("steps not in shard order:\n%s", DescribeSteps(steps))
	}
	seen := map[ids.ShardID]bool{}
	for _, s := range steps {
		if seen[s.Shard] || v.InFlight[s.Shard] {
			t.Fatalf("%s: a second step for its shard, or one for a busy shard", DescribeStep(s))
		}
		seen[s.Shard] = true
		if s.Kind != StepReplace || s.Via == 0 {
			t.Fatalf("%s: today's planner emits only replace steps with a leader", DescribeStep(s))
		}
		if st, ok := nodeState(v, s.Target); !ok || st != concordpb.NodeState_NODE_UP {
			t.Fatalf("%s: targets a node that is not UP", DescribeStep(s))
		}
		d := shardOf(v, s.Shard)
		if r := replicaOn(d, s.ReplicaNode); r == nil || ids.ReplicaID(r.GetReplicaId()) != s.Replica || replicaOn(d, s.Target) != nil {
			t.Fatalf("%s: does not match the descriptor %v", DescribeStep(s), d)
		}
	}
}

func nodeState(v View, id ids.NodeID) (concordpb.NodeState, bool) {
	for _, n := range v.Nodes {
		if ids.NodeID(n.GetNodeId()) == id {
			return n.GetState(), true
		}
	}
	return 0, false
}

func shardOf(v View, id ids.ShardID) *concordpb.ShardDescriptor {
	for _, d := range v.Shards {
		if ids.ShardID(d.GetShardId()) == id {
			return d
		}
	}
	return nil
}
