package scheduler

import (
	"cmp"
	"slices"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Settings are the scheduler's tunables. Every field is a limit with a unit;
// the node derives them from its configuration.
type Settings struct {
	// ReportMaxAge is how old a heartbeat report may be and still count
	// (inclusive: a report exactly this old counts). A node that stopped
	// reporting still has a last report claiming its old leaderships, so
	// older reports are ignored. A few heartbeat intervals, so one lost
	// heartbeat does not hide a leader.
	ReportMaxAge time.Duration
	// SuspectAfter is how long a node may be silent (no report, counted
	// from its last report or from View.ObservedSince, whichever is later)
	// before it is SUSPECT: no new replicas go there and its leaderships
	// move away. Zero disables it.
	SuspectAfter time.Duration
	// DeadAfter is how long a node may be silent before it is DEAD: its
	// replicas stop counting and are re-created elsewhere. Zero disables
	// it. (Both are strict: a node silent exactly this long is not yet.)
	DeadAfter time.Duration
	// Replication is the number of replicas every user shard should have
	// (R). Zero turns off every count-based rule (adding, removing and
	// balancing replicas): only replacements and leader moves are planned.
	Replication int
	// MetaReplication is the number of replicas of the meta shard once the
	// cluster has at least that many member nodes (UP or SUSPECT); below
	// that it has Replication. Counting members rather than eligible nodes
	// keeps a node flapping between UP and SUSPECT from resizing it.
	MetaReplication int
	// MaxMovesPerNode caps the replica moves one node takes part in at a
	// time: a learner it hosts (still catching up, or not yet promoted) or
	// an add, promote, remove or replace in flight (View.InFlightSteps) that
	// targets or removes a replica on it. No new learner goes to a node at
	// the cap. Zero means no learner is added anywhere.
	MaxMovesPerNode int
	// CatchUpEntries is how close a learner must be to be promoted: its
	// applied index, as its node last reported it, at most this many
	// entries behind the highest commit index reported for its shard (and
	// not zero: it has applied something, a snapshot at least).
	CatchUpEntries uint64
	// StepTimeout is the longest a step the executor starts may run (the
	// node gives each step this deadline). A placement leader that began
	// observing less than this long ago (View.ObservedSince) may share the
	// cluster with steps an earlier placement leader started and that it
	// cannot see: it plans nothing for a shard whose membership is mid
	// change (planner.inherited). Zero turns the wait off.
	StepTimeout time.Duration
	// LearnerTimeout is how long a learner may stay behind (not caught
	// up: see CatchUpEntries) before the scheduler removes it as stuck, so
	// that its shard's repair tries another node: a learner whose node
	// cannot take its snapshot (too little room above the space guard's
	// reserve after all: the shard grew, its size was unknown or
	// underestimated, the disk filled since; or low on space since) never
	// catches up, holds its node's
	// move slot, counts towards its shard's replicas and, while it sits
	// on a node that is not low, keeps balancing waiting for a repair that
	// never ends. Counted from View.LearnerSince: since when the
	// learner has made no progress while its shard was led; a learner
	// with no such time is never judged stuck. Zero turns it off.
	LearnerTimeout time.Duration
}

// DefaultSettings returns the settings the node uses for a heartbeat
// interval of heartbeat: reports count for three intervals; a node is
// suspect after 5 s of silence and dead after 60 s; three replicas per
// shard, five of the meta shard from five nodes on; four moves per node at
// a time; a learner within 1,000 entries of its shard's commit index is
// caught up; a step runs for at most 10 s; a learner behind, without
// progress for 30 min while its shard is led, is stuck.
//
// Four moves: a learner holds its node's slot from its add until its
// promotion, which waits for the learner's next heartbeat (up to an
// interval) and the next round, about 1.5 s in all; a node joining a
// three-node cluster of 17 shards must receive 12 replicas, which at two
// at a time took about 9 s of waves alone, over half the 10 s goal. A
// move's data is one shard's snapshot, sent by the shard's leader at the
// transport's rate limit, so four at a time stay far below what a node
// can take. 1,000 entries: the learner's applied index and the leader's
// commit index come from reports up to a heartbeat apart, so under load
// the comparison carries up to a second of the shard's writes; with 100,
// the learner of a shard taking more than 100 writes a second looked
// behind whenever its report was the older one, and waited. A voter a few hundred entries behind
// catches up from the log in milliseconds, and the quorum it joins has
// the others. 30 min: a snapshot send gives up after 10 min (the
// transport's snapshotSendTimeout), so by then a learner has had several
// full tries; a slower one would never finish anyway.
func DefaultSettings(heartbeat time.Duration) Settings {
	return Settings{
		ReportMaxAge: 3 * heartbeat,
		SuspectAfter: 5 * time.Second, DeadAfter: 60 * time.Second,
		Replication: 3, MetaReplication: 5,
		MaxMovesPerNode: 4, CatchUpEntries: 1000,
		StepTimeout: 10 * time.Second, LearnerTimeout: 30 * time.Minute,
	}
}

// Report is the last heartbeat a node sent to the placement leader.
type Report struct {
	// At is when the placement leader received the report (its own clock).
	At time.Time
	// Replicas are the node's replicas as it reported them; a leader says
	// so with IsLeader and its Term.
	Replicas []*concordpb.ReplicaStatus
	// DiskLow: the node said it is under its disk reserve (the space
	// guard, HeartbeatRequest.disk_low). See LowOnSpace.
	DiskLow bool
	// DiskFree and DiskReserve are the space guard's figures the node
	// reported (HeartbeatRequest.disk_free_bytes, disk_reserve_bytes): the
	// free bytes of its data dir's filesystem and its reserve (0: the
	// guard is off). With the sizes its Replicas give
	// (ReplicaStatus.approx_bytes), they decide whether a shard fits on
	// the node (fit.go).
	DiskFree, DiskReserve uint64
	// Tentative is the number of tentative writes (available mode) the
	// node said it holds, not yet reconciled
	// (HeartbeatRequest.tentative_writes): a drained LEAVING node is not
	// marked REMOVED while a fresh report says it holds any (see marks).
	// A node older than the field says 0, which is the rule before it.
	Tentative uint64
	// SawLeaving: the node's own record in the report
	// (HeartbeatRequest.node) said LEAVING, so it was built after the
	// node had learned it is leaving, from then on holding no new
	// tentative write (node.mayHoldTentative): its Tentative count cannot
	// grow after it. A count from before could: a write held between the
	// report and the node learning it is leaving would be lost with it.
	SawLeaving bool
	// Stopping: the node said it is stopping cleanly
	// (HeartbeatRequest.stopping): it is handing its leaderships off and
	// takes none back. While this is the node's latest report (received
	// since ObservedSince, of any age: see reportsStopping), the node is
	// not eligible (no leadership and no new replica goes there) but stays
	// UP and good until its silence says otherwise: it is expected back,
	// so its replicas are not replaced, and its voters still vote. A node
	// older than the field says false, which is the rule before it.
	Stopping bool
}

// Fresh reports whether r is recent enough to count at now.
func (r Report) Fresh(now time.Time, s Settings) bool {
	return now.Sub(r.At) <= s.ReportMaxAge
}

// View is everything the scheduler knows about the cluster. The placement
// leader assembles it from the meta shard's state (Nodes, Shards) and from
// what it holds in memory (Reports, InFlight). Slices may come in any order;
// each id must appear at most once in Nodes and in Shards.
type View struct {
	// Now is the time at which the view is evaluated, on the same clock as
	// Report.At.
	Now      time.Time
	Settings Settings

	// Nodes are the placement service's node descriptors.
	Nodes []*concordpb.NodeDescriptor
	// Reports holds the last heartbeat report per node; a node that never
	// reported to this placement leader has none.
	Reports map[ids.NodeID]Report
	// Shards are the placement service's shard descriptors. They may lag a
	// shard's own descriptor by a heartbeat; a step planned on a stale one
	// fails at the leader and is planned again from a fresher view.
	Shards []*concordpb.ShardDescriptor
	// InFlight holds the shards whose previous step is still executing;
	// they get no step.
	InFlight map[ids.ShardID]bool
	// InFlightSteps holds, per shard, the step still executing, if the
	// executor keeps it: such a shard gets no step either, and the step
	// counts as a move on the nodes it involves (Settings.MaxMovesPerNode).
	// A shard may be in InFlight without a step here (the cap then counts
	// only the learners the descriptors show).
	InFlightSteps map[ids.ShardID]Step

	// ObservedSince is when the planning node began collecting the reports
	// in Reports (when it became placement leader). A node is judged
	// silent from its last report or from ObservedSince, whichever is
	// later: a new placement leader has no reports yet and must not find
	// every node dead. Zero means unknown: a node without a report then
	// keeps the state the meta shard records.
	ObservedSince time.Time

	// LeaderOverride names leaders the planning node knows first-hand and
	// that win over the reports: the node puts here the shards its own
	// replica host leads (mapped to its own id), as the node's repair loop
	// did when it preferred itself over the heartbeat-derived leader. Only
	// Schedule consults it; Leaders reports what heartbeats say.
	LeaderOverride map[ids.ShardID]ids.NodeID

	// LearnerSince holds, per shard and learner (by replica id), now
	// less how long the learner has reported the same applied index while
	// its shard was led, as the planning node has observed (the count
	// starts when the learner first appears or makes progress, and pauses
	// while it goes unreported or its shard has no leader): the age
	// Settings.LearnerTimeout bounds. A learner missing here is never
	// judged stuck.
	LearnerSince map[ids.ShardID]map[ids.ReplicaID]time.Time
	// StuckLearners holds, per shard, the nodes a stuck learner of it was
	// removed from (a StepRemoveReplica with Stuck set, once done), and
	// when: no new replica of that shard goes to such a node until
	// Settings.LearnerTimeout has passed since, so its repair tries
	// another node first. The executor keeps it; the scheduler only reads.
	StuckLearners map[ids.ShardID]map[ids.NodeID]time.Time
}

// Leader is a shard's leader according to the heartbeat reports.
type Leader struct {
	Node ids.NodeID
	// Status is the winning claim: its term, commit and applied indexes and
	// descriptor epoch, for status pages.
	Status *concordpb.ReplicaStatus
	// At is when the report holding the claim was received.
	At time.Time
}

// Leaders returns the node leading each shard according to the reports that
// are fresh at v.Now. A node that died keeps a last report claiming its old
// leaderships, so stale reports are skipped; of two fresh claims the higher
// term wins (the newer leader has the higher term, by Raft's election
// rule). Two claims in one term cannot both be true; should reports
// disagree anyway, the more recent report wins, then the lower node id, so
// the answer never depends on map order.
//
// The node uses it for the routing hints in heartbeat answers and for the
// cluster status, as well as for planning.
func Leaders(v View) map[ids.ShardID]Leader {
	out := map[ids.ShardID]Leader{}
	for _, node := range sortedKeys(v.Reports) {
		r := v.Reports[node]
		if !r.Fresh(v.Now, v.Settings) {
			continue
		}
		for _, rs := range r.Replicas {
			if !rs.GetIsLeader() {
				continue
			}
			c := Leader{Node: node, Status: rs, At: r.At}
			shard := ids.ShardID(rs.GetShardId())
			if cur, ok := out[shard]; !ok || beats(c, cur) {
				out[shard] = c
			}
		}
	}
	return out
}

// beats reports whether claim a wins over claim b for the same shard.
func beats(a, b Leader) bool {
	if a.Status.GetTerm() != b.Status.GetTerm() {
		return a.Status.GetTerm() > b.Status.GetTerm()
	}
	if !a.At.Equal(b.At) {
		return a.At.After(b.At)
	}
	return a.Node < b.Node
}

// sortedNodes returns v.Nodes ordered by node id, leaving v untouched.
func sortedNodes(v View) []*concordpb.NodeDescriptor {
	return slices.SortedFunc(slices.Values(v.Nodes), func(a, b *concordpb.NodeDescriptor) int {
		return cmp.Compare(a.GetNodeId(), b.GetNodeId())
	})
}

// sortedShards returns v.Shards ordered by shard id, leaving v untouched.
func sortedShards(v View) []*concordpb.ShardDescriptor {
	return slices.SortedFunc(slices.Values(v.Shards), func(a, b *concordpb.ShardDescriptor) int {
		return cmp.Compare(a.GetShardId(), b.GetShardId())
	})
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
