package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// StepKind names one operation the executor knows how to perform. The
// planner emits every kind; the node executes StepReplace and, as their
// executors land, the others.
type StepKind uint8

const (
	// StepReplace swaps replica Replica of Shard for a fresh replica on
	// node Target, in one joint configuration change proposed by the shard's
	// leader (Via). This is what ChangeReplicas does today. It is the right
	// step only when the old replica's data is already gone: the shard runs
	// without it until the new replica catches up.
	StepReplace StepKind = iota + 1
	// StepAddLearner adds a fresh replica of Shard on node Target as a
	// learner (non-voting), via the shard's leader. The first half of a
	// safe replacement: the learner catches up before it votes.
	StepAddLearner
	// StepPromoteLearner makes learner Replica of Shard a voter, via the
	// shard's leader, once it has caught up.
	StepPromoteLearner
	// StepRemoveReplica removes replica Replica from Shard, via the
	// shard's leader.
	StepRemoveReplica
	// StepTransferLeader asks Shard's leader (Via) to hand leadership to
	// replica Replica, which lives on node ReplicaNode.
	StepTransferLeader
	// StepMarkNode sets node Target's state to State in the meta shard. It
	// concerns no shard: the placement leader proposes it itself (Via is
	// the meta shard's leader, Shard is zero and means nothing).
	StepMarkNode
)

var stepKindNames = map[StepKind]string{
	StepReplace:        "replace",
	StepAddLearner:     "add-learner",
	StepPromoteLearner: "promote-learner",
	StepRemoveReplica:  "remove-replica",
	StepTransferLeader: "transfer-leader",
	StepMarkNode:       "mark-node",
}

// Step is one operation the scheduler asks for. Which fields mean something
// depends on Kind (see each StepKind); the others are zero. One flat struct,
// rather than a type per kind, keeps steps comparable with ==, sortable, and
// printable by one function.
type Step struct {
	Kind StepKind
	// Shard is the shard the step changes (every kind but StepMarkNode).
	Shard ids.ShardID
	// Via is the node to send the step to: the shard's leader as the
	// scheduler saw it. If it no longer leads, the step fails there and is
	// planned again.
	Via ids.NodeID
	// Epoch is the epoch of the shard descriptor the step was planned
	// against, so an executor can tell a plan made on an older membership.
	Epoch uint64
	// Replica is the existing replica the step acts on: the one replaced
	// or removed, the learner promoted, the new leader.
	Replica ids.ReplicaID
	// ReplicaNode is the node hosting Replica in that descriptor. The
	// executor needs only Replica; this is for logs and printed plans.
	ReplicaNode ids.NodeID
	// Target is the node the step puts something on (the new replica of
	// StepReplace and StepAddLearner) or, for StepMarkNode, the node marked.
	Target ids.NodeID
	// State is the new state of StepMarkNode.
	State concordpb.NodeState
	// MinVoters, for StepRemoveReplica, is the number of voters the shard
	// is meant to have: the shard's leader lets the removal leave that
	// many even when it is fewer than a majority of the current voters
	// (replica.RemoveChange), which only a shard meant to have one replica
	// needs, to end a move (two voters, then its leader alone).
	MinVoters int
	// Stuck, for StepRemoveReplica, says the replica is a learner removed
	// because it did not catch up within Settings.LearnerTimeout: once
	// the removal is done, the executor records its node in
	// View.StuckLearners, so that the shard's next learner goes elsewhere.
	Stuck bool
}

// sortSteps orders steps by shard, then kind, then the remaining fields, so
// the output never depends on the order the checkers found them in.
func sortSteps(steps []Step) {
	slices.SortFunc(steps, func(a, b Step) int {
		return cmp.Or(
			cmp.Compare(a.Shard, b.Shard),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Replica, b.Replica),
			cmp.Compare(a.Target, b.Target),
			cmp.Compare(a.Via, b.Via),
		)
	})
}

// DescribeStep prints s on one line, e.g.
//
//	s1: replace r3@n3 -> new replica on n4 (via leader n1, epoch 2)
func DescribeStep(s Step) string {
	name, ok := stepKindNames[s.Kind]
	if !ok {
		return fmt.Sprintf("unknown step kind %d", s.Kind)
	}
	via := fmt.Sprintf("(via leader n%d, epoch %d)", s.Via, s.Epoch)
	switch s.Kind {
	case StepReplace:
		return fmt.Sprintf("s%d: %s r%d@n%d -> new replica on n%d %s", s.Shard, name, s.Replica, s.ReplicaNode, s.Target, via)
	case StepAddLearner:
		return fmt.Sprintf("s%d: %s on n%d %s", s.Shard, name, s.Target, via)
	case StepRemoveReplica:
		if s.Stuck {
			return fmt.Sprintf("s%d: %s r%d@n%d, a stuck learner %s", s.Shard, name, s.Replica, s.ReplicaNode, via)
		}
		return fmt.Sprintf("s%d: %s r%d@n%d %s", s.Shard, name, s.Replica, s.ReplicaNode, via)
	case StepPromoteLearner, StepTransferLeader:
		return fmt.Sprintf("s%d: %s r%d@n%d %s", s.Shard, name, s.Replica, s.ReplicaNode, via)
	default: // StepMarkNode
		return fmt.Sprintf("%s n%d %s (via n%d)", name, s.Target, s.State, s.Via)
	}
}

// DescribeSteps prints one step per line, or "no steps".
func DescribeSteps(steps []Step) string {
	if len(steps) == 0 {
		return "no steps"
	}
	lines := make([]string, len(steps))
	for i, s := range steps {
		lines[i] = DescribeStep(s)
	}
	return strings.Join(lines, "\n")
}

// DescribeLeaders prints one shard per line in shard order, with the age
// of the winning report at now, or "no leaders".
func DescribeLeaders(leaders map[ids.ShardID]Leader, v View) string {
	if len(leaders) == 0 {
		return "no leaders"
	}
	var b strings.Builder
	for _, shard := range sortedKeys(leaders) {
		l := leaders[shard]
		fmt.Fprintf(&b, "s%d: n%d (term %d, report age %s)\n", shard, l.Node, l.Status.GetTerm(), v.Now.Sub(l.At))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
