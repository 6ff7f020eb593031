package scheduler

import (
	"cmp"
	"slices"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// checkSteps asserts what every plan must satisfy, whatever the view: in
// shard order; at most one step per shard and none for a busy one, each
// sent to a known leader, never on a node DEAD, REPLACED or REMOVED (its
// address reaches nobody, or its successor); marks only of known nodes and only to a new
// state; new replicas only on nodes that may take them (replace: UP as
// recorded; add-learner: UP as judged, not low on space, and with room
// for the shard's size above its reserve plus the margin); every step
// consistent with the shard's descriptor; a removal never on the leader's
// node and never leaving the shard without a quorum of live voters. The harness runs it
// on every scripted schedule, the property tests on every random view.
func checkSteps(t *testing.T, v View, steps []Step) {
	t.Helper()
	if !slices.IsSortedFunc(steps, func(a, b Step) int { return cmp.Compare(a.Shard, b.Shard) }) {
		t.Fatalf("steps not in shard order:\n%s", DescribeSteps(steps))
	}
	judged, low, sizes := NodeStates(v), LowOnSpace(v), ShardSizes(v)
	seen := map[ids.ShardID]bool{}
	for _, s := range steps {
		if s.Kind == StepMarkNode {
			rec, ok := nodeState(v, s.Target)
			if !ok || rec == s.State || s.Shard != 0 {
				t.Fatalf("%s: marks an unknown node or to its recorded state", DescribeStep(s))
			}
			continue
		}
		_, running := v.InFlightSteps[s.Shard]
		if seen[s.Shard] || v.InFlight[s.Shard] || running || s.Via == 0 {
			t.Fatalf("%s: a second step for its shard, one for a busy shard, or one with no leader", DescribeStep(s))
		}
		seen[s.Shard] = true
		if midChangeEarly(v, shardOf(v, s.Shard)) {
			t.Fatalf("%s: a step for a shard mid-change while an earlier placement leader's steps may run", DescribeStep(s))
		}
		if st, ok := judged[s.Via]; ok && (st == concordpb.NodeState_NODE_DEAD || st == concordpb.NodeState_NODE_REPLACED || st == concordpb.NodeState_NODE_REMOVED) {
			t.Fatalf("%s: sent to a node that is %s", DescribeStep(s), st)
		}
		d := shardOf(v, s.Shard)
		switch s.Kind {
		case StepReplace:
			if st, ok := nodeState(v, s.Target); !ok || st != concordpb.NodeState_NODE_UP {
				t.Fatalf("%s: targets a node that is not UP", DescribeStep(s))
			}
		case StepAddLearner:
			if judged[s.Target] != concordpb.NodeState_NODE_UP || replicaOn(d, s.Target) != nil {
				t.Fatalf("%s: targets a node that is not UP or already holds the shard", DescribeStep(s))
			}
			if low[s.Target] {
				t.Fatalf("%s: targets a node low on space", DescribeStep(s))
			}
			if size, r, ok := sizes[s.Shard], v.Reports[s.Target], v.Reports[s.Target].DiskReserve > 0; ok && size > 0 && !r.At.Before(v.ObservedSince) &&
				r.DiskFree < r.DiskReserve+SpaceMargin(r.DiskReserve)+size {
				t.Fatalf("%s: the shard (%d bytes) does not fit on its target (%d free, reserve %d)", DescribeStep(s), size, r.DiskFree, r.DiskReserve)
			}
			continue
		}
		r := replicaOn(d, s.ReplicaNode)
		if r == nil || ids.ReplicaID(r.GetReplicaId()) != s.Replica || (s.Kind == StepReplace && replicaOn(d, s.Target) != nil) {
			t.Fatalf("%s: does not match the descriptor %v", DescribeStep(s), d)
		}
		switch s.Kind {
		case StepPromoteLearner:
			if r.GetRole() != concordpb.ReplicaRole_REPLICA_LEARNER || judged[s.ReplicaNode] != concordpb.NodeState_NODE_UP {
				t.Fatalf("%s: promotes a voter or a learner on a node that is not UP", DescribeStep(s))
			}
		case StepTransferLeader:
			if r.GetRole() != concordpb.ReplicaRole_REPLICA_VOTER || s.ReplicaNode == s.Via || judged[s.ReplicaNode] != concordpb.NodeState_NODE_UP {
				t.Fatalf("%s: transfers to a learner, to the leader, or to a node that is not UP", DescribeStep(s))
			}
		case StepRemoveReplica:
			if s.ReplicaNode == s.Via {
				t.Fatalf("%s: removes the leader's replica", DescribeStep(s))
			}
			if live, voters := liveVoters(judged, d, s.Replica); r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER && (voters == 0 || live < voters/2+1) {
				t.Fatalf("%s: leaves %d live of %d voters", DescribeStep(s), live, voters)
			}
			if up, voters := answeringVoters(judged, d, s.Replica); r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER && judgedUp(judged, s.ReplicaNode) && up < voters/2+1 {
				t.Fatalf("%s: removes a voter that answers and leaves %d answering of %d voters (the others suspect or gone)", DescribeStep(s), up, voters)
			}
		}
	}
}

// liveVoters counts d's voters other than without, and those of them on
// live nodes (judged neither dead, replaced nor removed; known).
func liveVoters(judged map[ids.NodeID]concordpb.NodeState, d *concordpb.ShardDescriptor, without ids.ReplicaID) (live, voters int) {
	for _, r := range d.GetReplicas() {
		if ids.ReplicaID(r.GetReplicaId()) == without || r.GetRole() != concordpb.ReplicaRole_REPLICA_VOTER {
			continue
		}
		voters++
		switch st, ok := judged[ids.NodeID(r.GetNodeId())]; {
		case !ok, st == concordpb.NodeState_NODE_DEAD, st == concordpb.NodeState_NODE_REPLACED, st == concordpb.NodeState_NODE_REMOVED:
		default:
			live++
		}
	}
	return live, voters
}

// answeringVoters counts d's voters other than without, and those of them
// on nodes that answer (answers).
func answeringVoters(judged map[ids.NodeID]concordpb.NodeState, d *concordpb.ShardDescriptor, without ids.ReplicaID) (up, voters int) {
	for _, r := range d.GetReplicas() {
		if ids.ReplicaID(r.GetReplicaId()) == without || r.GetRole() != concordpb.ReplicaRole_REPLICA_VOTER {
			continue
		}
		voters++
		if answersIn(judged, ids.NodeID(r.GetNodeId())) {
			up++
		}
	}
	return up, voters
}

// answersIn: node is known and judged UP, or LEAVING (a leaving node
// counted as answering among the voters left, and the removed one only if
// UP, make the check looser, never stricter, than the planner's).
func answersIn(judged map[ids.NodeID]concordpb.NodeState, node ids.NodeID) bool {
	st, ok := judged[node]
	return ok && (st == concordpb.NodeState_NODE_UP || st == concordpb.NodeState_NODE_LEAVING)
}

// judgedUp: node is known and judged UP.
func judgedUp(judged map[ids.NodeID]concordpb.NodeState, node ids.NodeID) bool {
	st, ok := judged[node]
	return ok && st == concordpb.NodeState_NODE_UP
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

// midChangeEarly: v's placement leader began observing less than
// StepTimeout ago, and d has a learner or a fresh report gives a newer
// epoch for it (an earlier placement leader's step may be running on it).
func midChangeEarly(v View, d *concordpb.ShardDescriptor) bool {
	if d == nil || v.ObservedSince.IsZero() || v.Now.Sub(v.ObservedSince) >= v.Settings.StepTimeout {
		return false
	}
	for _, r := range d.GetReplicas() {
		if r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER {
			return true
		}
	}
	for _, rep := range v.Reports {
		for _, rs := range rep.Replicas {
			if rs.GetShardId() == d.GetShardId() && rs.GetDescriptorEpoch() > d.GetEpoch() && v.Now.Sub(rep.At) <= v.Settings.ReportMaxAge {
				return true
			}
		}
	}
	return false
}
