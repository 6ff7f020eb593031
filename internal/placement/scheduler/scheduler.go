package scheduler

import (
	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Schedule returns the steps that v calls for: marks first (StepMarkNode
// for every node whose judged state differs from the recorded one), then
// at most one step per shard, sorted by shard (then kind, replica, target
// and leader). One step per shard because the executor runs one change per
// shard at a time, and a shard's later problems are planned from the view
// that follows the first change.
//
// Per shard, the first rule that applies wins (see rules.go): replace a
// replica on a wiped node; add a learner to a shard short of replicas;
// promote a caught-up learner; remove a replica that is dead, leaving or
// in excess, once the shard can spare it; move a leader off a suspect or
// leaving node. Then, unless some shard is being repaired or a node is
// suspect (planner.calm), it balances the shards that got no step:
// replica counts, then leader counts, in the same round, alongside the
// moves already under way (see balance.go).
func Schedule(v View) []Step {
	p := newPlanner(v)
	steps := p.marks()
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		if p.busy(shard) {
			if s, ok := v.InFlightSteps[shard]; ok {
				p.noteRepair(d, &s)
			} else {
				p.repairing = true // its step is unknown: assume a repair
			}
			continue
		}
		s, ok := p.repair(d)
		if ok {
			steps = append(steps, s)
			p.noteRepair(d, &s)
		} else {
			p.noteRepair(d, nil)
		}
	}
	if p.calm() {
		stepped := map[ids.ShardID]bool{}
		for _, s := range steps {
			if s.Kind != StepMarkNode {
				stepped[s.Shard] = true
			}
		}
		steps = append(steps, p.balanceReplicas(stepped)...)
		steps = append(steps, p.balanceLeaders(stepped)...)
	}
	sortSteps(steps)
	return steps
}

// leaderOf is the node to address shard's step to: the planning node's own
// knowledge first (View.LeaderOverride), then the leaders' own claims in
// the heartbeat reports (Leaders); zero if neither knows. planner.via adds
// what followers report.
func leaderOf(v View, leaders map[ids.ShardID]Leader, shard ids.ShardID) ids.NodeID {
	if n, ok := v.LeaderOverride[shard]; ok && n != 0 {
		return n
	}
	return leaders[shard].Node
}

// move is a wiped node and the UP node that took its address.
type move struct{ from, to ids.NodeID }

// replacements lists, in order of the old node's id, every node in state
// REPLACED whose successor is UP. A successor that is not UP yet (or was
// itself wiped) gets nothing: the new replica would have nowhere to run.
// So in a chain (n1 replaced by n2, then n2 replaced by n3) n1's replicas
// stay until dead-node detection replaces them; the repair loop did the
// same.
func replacements(v View) []move {
	up := map[ids.NodeID]bool{}
	for _, n := range v.Nodes {
		up[ids.NodeID(n.GetNodeId())] = n.GetState() == concordpb.NodeState_NODE_UP
	}
	var out []move
	for _, n := range sortedNodes(v) {
		to := ids.NodeID(n.GetReplacedBy())
		if n.GetState() == concordpb.NodeState_NODE_REPLACED && to != 0 && up[to] {
			out = append(out, move{from: ids.NodeID(n.GetNodeId()), to: to})
		}
	}
	return out
}

// replaceReplaced is the checker for wiped nodes: a replica on a node in
// state REPLACED is replaced by a new replica on the node that took the
// old one's address. Of several such replicas in d, the one on the lowest
// node id goes first, as in the node's repair loop.
//
// A shard that already has a replica on the replacement node is left
// alone: ChangeReplicas refuses that change, and it happens only while the
// view's descriptor lags a replacement already made. So is a learner on
// the wiped node: the joint change adds its new replica as a voter, which
// would turn a non-voting member into an empty voter with no catch-up as
// a learner first; the removal rule takes the learner instead.
func replaceReplaced(moves []move, d *concordpb.ShardDescriptor, via ids.NodeID) (Step, bool) {
	for _, m := range moves {
		r := replicaOn(d, m.from)
		if r == nil || !isVoter(r) || replicaOn(d, m.to) != nil {
			continue
		}
		return Step{
			Kind: StepReplace, Shard: ids.ShardID(d.GetShardId()), Via: via, Epoch: d.GetEpoch(),
			Replica: ids.ReplicaID(r.GetReplicaId()), ReplicaNode: m.from, Target: m.to,
		}, true
	}
	return Step{}, false
}

// replicaOn returns d's replica on node, or nil.
func replicaOn(d *concordpb.ShardDescriptor, node ids.NodeID) *concordpb.ReplicaDescriptor {
	for _, r := range d.GetReplicas() {
		if ids.NodeID(r.GetNodeId()) == node {
			return r
		}
	}
	return nil
}
