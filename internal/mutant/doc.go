// Package mutant plants known-dangerous bugs in the real binary, so that the
// robustness suite can show which of them it catches (make
// robustness-mutants; docs/testing.md, "Mutation testing").
//
// Without the build tag "mutant", Enabled is the constant false and every
// hook, written as
//
//	if mutant.Enabled && mutant.On(mutant.FollowerRead) { … }
//
// is compiled out of the binary, as Pebble's invariants package does. With
// the tag, the one mutant named by the environment variable CONCORD_MUTANT,
// read once at start, is active in every process that inherits it. A mutant
// binary is for tests only; nothing else should build with the tag.
package mutant

// Name names one planted bug.
type Name string

// The planted bugs. Each hook is one if statement at the place named.
const (
	// LeaderReadNoReadIndex: a leader serves a linearizable read at once,
	// from its applied state, without a ReadIndex round (replica.ReadIndex).
	LeaderReadNoReadIndex Name = "leader-read-no-readindex"
	// AckBeforeFsync: the loop's batch (log entries, hard state, applied
	// state) is committed without fsync, then acknowledged and its messages
	// sent (multiraft handleReady).
	AckBeforeFsync Name = "ack-before-fsync"
	// NoSessionDedup: a retried sequence number applies again (kv.applyKV).
	NoSessionDedup Name = "no-session-dedup"
	// ForgetVote: the hard state is persisted without its vote, so a restart
	// forgets whom the node voted for in its term (replica.Persist).
	ForgetVote Name = "forget-vote"
	// FollowerRead: a node with a replica serves a linearizable Get (or
	// read-only Batch) locally without ReadIndex, leader or not (grpcapi
	// KV.Get, KV.readBatch).
	FollowerRead Name = "follower-read"
	// SnapshotDropsEntry: a snapshot is labelled one entry past its data
	// when the leader's log holds that entry, and the receiver installs it:
	// the entry's effect is lost on the receiver (multiraft snapshotFunc,
	// replica.InstallSnapshot).
	SnapshotDropsEntry Name = "snapshot-drops-entry"
	// LeaseIgnoresExpiry: a leader serves reads by lease after its lease
	// ran out on the monotonic clock, as long as it still leads the term it
	// got the lease in (replica.leaseValid), and off the loop while it
	// publishes one (multiraft fastRead).
	LeaseIgnoresExpiry Name = "lease-ignores-expiry"
	// SpaceRefusalAfterPropose: while the space alarm is on, a write that
	// adds data is proposed (and applies) before the node answers it
	// refused for space, so the client is told NOSPACE (a definite
	// failure) for a write that happened (grpcapi KV.Batch).
	SpaceRefusalAfterPropose Name = "space-refusal-after-propose"
)

// All lists every mutant, in the order make robustness-mutants runs them.
var All = []Name{LeaderReadNoReadIndex, AckBeforeFsync, NoSessionDedup, ForgetVote, FollowerRead, SnapshotDropsEntry, LeaseIgnoresExpiry, SpaceRefusalAfterPropose}

// Env is the environment variable that names the active mutant.
const Env = "CONCORD_MUTANT"
