// Package scheduler is the placement service's planner: given a View of the
// cluster (the nodes and their states, each node's last heartbeat report,
// every shard's descriptor, the shards with a change already under way, and
// the time), Schedule returns the Steps that move the cluster towards where
// it should be. The meta shard's leader builds the View, calls Schedule, and
// executes the steps; this package decides, the node acts. Health reports
// each shard's replication for status pages.
//
// # What it is not
//
// The scheduler is pure. It starts no goroutines, reads no clock (View.Now
// is an input), touches no network, disk or os, and keeps no state between
// calls: the same View always gives the same Steps, in the same order,
// whatever the order of the View's slices and maps. Randomness, if a future
// checker needs it, is injected through the View, never drawn from a global
// source. That is what lets the planner be tested with datadriven scripts
// (testdata/) and checked against a brute-force oracle, and what lets a
// simulation replay a placement decision from a seed.
//
// It does not execute steps, retry them, or remember that it asked for one:
// the executor marks a shard busy while its step runs and hands that set back
// as View.InFlight, so a shard is never given a second step while one runs.
// That set is the executor's memory: a new placement leader starts without
// its predecessor's, whose steps may run for Settings.StepTimeout more. So
// for that long after View.ObservedSince a shard mid-change (a learner, or
// a reported descriptor epoch newer than the view's) counts as busy with
// an unknown step.
//
// # Words
//
// Node states are judged, not just read (NodeStates): REPLACED, LEAVING and
// REMOVED are what the meta shard records; any other node is UP, SUSPECT
// (silent for longer than Settings.SuspectAfter) or DEAD (longer than
// DeadAfter), silence counting from its last report or from
// View.ObservedSince, whichever is later. A node is live unless it is
// DEAD, REPLACED, REMOVED or unknown (a LEAVING node is live until it dies);
// its replicas make up a shard's quorum. It is good if UP or SUSPECT: its
// replicas count towards the shard's replication factor. It is eligible
// (may receive replicas and leaderships) only if UP and not stopping (its
// latest report says it is stopping cleanly: Report.Stopping). A learner is caught up
// when its applied index is non-zero and within Settings.CatchUpEntries of
// the highest commit index reported for its shard.
//
// # What it plans
//
// Marks first: a StepMarkNode for every node whose judged state differs
// from the recorded one, and REMOVED for a LEAVING node no descriptor lists
// once it holds no tentative writes (a fresh report says 0) or is DEAD.
// Then, per shard, at most one step, the first rule that applies (a busy
// shard, one with no known leader, or one without a live quorum of voters
// gets none; a leader on a node that is not live — DEAD, REPLACED,
// REMOVED — is no known leader: a step sent there reaches nobody, or the
// node that took its address):
//
//  1. A replica on a REPLACED node whose successor is UP: StepReplace (one
//     joint change, the wiped replica's data being gone anyway).
//  2. Fewer good replicas than wanted (Settings.Replication; the meta
//     shard MetaReplication from that many good nodes on): StepAddLearner
//     on the least-loaded eligible node that does not hold the shard, is
//     under its move cap, is not low on space (LowOnSpace), has room for
//     the shard above its reserve (below) and had no stuck learner of the
//     shard removed within Settings.LearnerTimeout (View.StuckLearners);
//     ties to the lower id. Nowhere to go: nothing (the shard runs
//     under-replicated; Health says so).
//  3. A caught-up learner on an eligible node: StepPromoteLearner.
//  4. StepRemoveReplica of: a learner on a node that is not good; a
//     stuck learner, one not caught up and without progress for longer
//     than Settings.LearnerTimeout while its shard was led
//     (View.LearnerSince), marked
//     Step.Stuck so the executor records its node; a voter
//     on a node that is not live, once the good voters are back to the
//     wanted count; a voter on a leaving node, once the good voters are as
//     many as the shard can get; a good voter in excess, the one
//     predicted (suspect node first, then the node that will hold the
//     most once the moves under way are done). Never one that would leave
//     the voters without a live quorum, and never the leader's: its
//     leadership moves first (StepTransferLeader), to a caught-up voter
//     only; with none, the next candidate goes instead, or nothing.
//  5. A leader on a SUSPECT, LEAVING or stopping node: StepTransferLeader to a
//     running voter on an eligible node, caught up if any is (else one
//     that lags), leading the fewest shards (counting transfers in
//     flight).
//
// Then balancing, unless a node is SUSPECT or some shard is being
// repaired (a replacement, a removal from a node that is not good, a
// leadership moved off one, or fewer good voters than wanted while that
// repair can go on: a learner being added, catching up or promoted, or a
// node rule 2 would give one): repair keeps the move caps to itself. A
// shard that can be repaired nowhere (every node without its replica low
// on space, without room for it, or left by a stuck learner of it lately,
// say) holds nothing up. Among eligible nodes, and on shards that got no
// step this round, it balances replica counts (a learner on a node that
// will hold at least two fewer than a more loaded one, is not low on
// space, has room for the shard and was not left by a stuck learner of
// the shard lately; the excess
// voter is removed by rule 4
// after promotion) and, in the same round, leader counts (transfers to
// caught-up voters; when no single transfer from a loaded node reaches
// the short one, a chain of them along a shortest path, each node in
// between taking one leadership and handing on another, so that only the
// ends' counts change; with no chain either, the counts stay: leader
// balance never moves a replica). It balances the counts the nodes will have once the
// moves under way are done: the descriptors' replicas, learners included,
// plus the adds still executing, less the excess voters their shards will
// lose, predicted as rule 4 will pick them (planner.predictVictims, made
// as even as any choice by planner.evenVictims). So it keeps several moves
// going at once, up to the caps, without waiting for one to finish and
// without planning a move one under way already makes. Either kind stops
// once every count is within one of the mean, so a balanced cluster plans
// nothing, however long it runs.
//
// A node has room for a shard when its free bytes, less the shard's size
// and the sizes of the replicas on their way to it, stay at or above its
// reserve plus the margin a low node must regain to be low no more
// (SpaceMargin): free - size - incoming >= reserve + margin. Free bytes
// and reserve come from the node's report (Report.DiskFree, DiskReserve),
// a shard's size is the largest ReplicaStatus.approx_bytes a fresh report
// gives for it, and incoming are the node's learners not caught up, the
// adds in flight to it, the learners planned for it earlier in the round
// and the replicas its last report does not list with data (applied
// index above 0) yet. An unknown size (0), a guard off (reserve 0) or no report since
// View.ObservedSince skip the check (fit.go). A learner that cannot take
// its snapshot anyway (the estimate is approximate; the disk filled
// since) is stuck, rule 4.
//
// A node takes part in at most Settings.MaxMovesPerNode moves at a time:
// the learners it hosts, the steps in flight (View.InFlightSteps) that add
// or remove a replica on it, the excess voters predicted to leave it, and,
// within StepTimeout of View.ObservedSince, the replicas fresh reports
// show on it that its shard's descriptor does not list (an earlier
// placement leader's add whose result the meta shard does not record
// yet); no learner goes to a node at its cap, and no balancing move takes
// a replica from one.
//
// # Concurrency
//
// Every function is safe to call from any goroutine; none mutates its
// arguments. A View must not be modified while a call that reads it runs.
//
// # Usage
//
//	v := scheduler.View{Now: now, Settings: scheduler.DefaultSettings(hb),
//		Nodes: nodes, Shards: shards, Reports: reports, InFlight: busy}
//	for _, s := range scheduler.Schedule(v) {
//		execute(s) // the node executes StepReplace today; the rest follow
//	}
package scheduler
