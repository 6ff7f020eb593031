package multiraft

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Config configures a Host. DefaultConfig gives the production values; New
// fills any zero field with them, and Start refuses impossible combinations.
type Config struct {
	NodeID ids.NodeID
	// TickInterval is the length of one raft tick (default 100 ms). Every
	// other duration below is converted to ticks, once, by newPolicy.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks: raft timeouts in ticks (election
	// should be at least 10 heartbeats).
	ElectionTicks, HeartbeatTicks int
	// LeaderPreferenceInterval is how often a leader that is not its
	// shard's preferred replica offers leadership back to it (default 5 s).
	LeaderPreferenceInterval time.Duration
	// NoLeaderPreference turns that hand-back off: where leaders are moved
	// on purpose (TransferLeader, the placement scheduler), handing them
	// back to the first replica would undo every move.
	NoLeaderPreference bool
	// StrayCheckInterval is how often replicas are checked against the
	// placement's descriptors and those the shard removed destroyed
	// (default 10 s; see collectStrays).
	StrayCheckInterval time.Duration
	// LogTruncationInterval is how often logs are checked for truncation and
	// unsent snapshot handles for expiry (default 200 ms: under load, an
	// entry truncated within a second or so is usually still in Pebble's
	// memtable, whose flush then drops it; see policy.truncateLogs).
	LogTruncationInterval time.Duration
	// SnapshotHandleTTL is how long a snapshot raft built but never sent
	// keeps its storage.Snapshot (which pins memtables and sstables) and its
	// slot among MaxOutgoingSnapshots before it is released (default 1 min).
	SnapshotHandleTTL time.Duration
	// PendingTimeout is how long a proposal or read may wait on its replica
	// before the replica forgets it as ambiguous; its caller has given up
	// long before (default 60 s).
	PendingTimeout time.Duration
	// Raft log truncation (replica/logtrunc.go): a leader truncates its log
	// up to what its slowest follower has (its Match), less LogTailEntries
	// (default 100), and its followers truncate where it did; but no
	// replica keeps more than LogKeepEntries applied entries (default
	// 5,000): a follower further behind catches up by snapshot. A replica
	// truncates only once LogTruncateEntries entries (default 100) can go,
	// so that an idle shard is not truncated entry by entry.
	LogKeepEntries, LogTailEntries, LogTruncateEntries uint64
	// Raft flow control, per shard. Bytes are raft's count of entry data.
	// They bound what the transport is asked to carry, which must stay
	// under its limits (transport.Config.QueueBytes, 64 MiB per peer lane;
	// MaxBatchBytes, 16 MiB per RaftBatch): a follower that fell behind
	// gets its backlog MaxInflightBytes at a time, never as one huge Ready.
	//
	// MaxSizePerMsgBytes bounds the entries in one MsgApp (default 1 MiB;
	// a single larger entry still goes, alone).
	MaxSizePerMsgBytes uint64
	// MaxInflightMsgs and MaxInflightBytes bound the MsgApps sent to one
	// follower and not yet acknowledged (default 256 messages, 4 MiB; the
	// bytes must be at least MaxSizePerMsgBytes). 4 MiB per shard times the
	// 16 shards a node may lead fills exactly one 64 MiB peer queue.
	MaxInflightMsgs  int
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds a leader's proposals not yet committed;
	// beyond it raft drops new ones (default 64 MiB).
	MaxUncommittedBytes uint64
	// MaxCommittedBytesPerReady bounds the committed entries one Ready hands
	// to apply, and so one loop iteration's apply batch (default 4 MiB).
	MaxCommittedBytesPerReady uint64
	// MaxInboxBytes bounds the raft messages received and not yet taken by
	// the loop, in bytes on the wire plus what each holds decoded (a few
	// hundred bytes a message; default 64 MiB; negative: no bound).
	// Past it, Deliver holds a batch that carries entries until the loop
	// drains the inbox, so a loop slowed by its disk pushes back on the
	// senders' bulk streams (and through gRPC flow control on their queues,
	// which drop) instead of growing without limit. Batches without entries
	// (heartbeats, votes, responses: the control lane) are never held; past
	// twice the bound they are dropped (raft retransmits). A soft bound:
	// each stream may overshoot it by one batch (which the transport bounds
	// decoded: its decode budget, 64 MiB by default).
	MaxInboxBytes int64
	// MaxOutgoingSnapshots bounds snapshots being streamed at once.
	MaxOutgoingSnapshots int
	// LeaseReads lets a leader whose ReadIndex round was answered serve
	// linearizable reads with no round for leaseDuration after it issued
	// the round (replica/lease.go). On in DefaultConfig; a Config built
	// without it has it off.
	LeaseReads bool
	// Clock is the host's monotonic clock, in nanoseconds, which it reads
	// once per loop turn for leases (a lease must run out while the process
	// is stopped, so it is not counted in ticks); nil means a monotonic
	// clock (CLOCK_BOOTTIME on Linux: see monotonic). Tests pass a manual one, which must never run slower than
	// ticks arrive (one TickInterval per tick at least).
	Clock func() int64
	// YieldToSenders is how the loop lets the transport's senders run
	// after it queued a leader's appends and before its own fsync (see
	// Host.yieldToSenders); nil means runtime.Gosched. Tests record it.
	YieldToSenders func()
	// Ticks is where the loop's ticks come from; nil means a time.Ticker of
	// TickInterval. Tests pass a manual source to drive a Host tick by tick.
	Ticks TickSource
	// Fatal is called, on the loop goroutine, with a storage error in the
	// raft path; nil means log it and exit the process with status 2. Raft's
	// storage contract makes the instance inoperable after such an error, so
	// if Fatal returns, the loop ends where it is (without the cleanup of
	// Stop) and every later call fails with ErrStopped.
	Fatal func(error)
	// Placement returns the newest descriptor of shard that the node knows
	// from placement (the meta shard's routes), with known false while it
	// knows no placement at all (a node before its first heartbeat answer);
	// known true and a nil descriptor mean the shard does not exist. A peer's
	// message may create or replace a replica here only if it is consistent
	// with it (validate.go). nil: no placement information (the in-process
	// harness), only the local checks apply.
	Placement func(shard ids.ShardID) (desc *concordpb.ShardDescriptor, known bool)
	// IDBase is the base of this process's proposal ids and ReadIndex
	// contexts; 0 means random (crypto/rand). Ids must not repeat across a
	// node's restarts, so only tests, which derive it from their seed, set it.
	IDBase uint64
	// Observer, if set, is told what the loop measures (for /metrics).
	Observer Observer
	// OnLeaderKnown, if set, is called (on the loop; it must return at
	// once) when a replica here learns of a leader of its shard other
	// than the one it knew, itself included: after an election or a
	// transfer. The node reports to the placement service at once then,
	// so that the scheduler addresses the shard's next step to the new
	// leader without waiting for the next heartbeat.
	OnLeaderKnown func(shard ids.ShardID)
	Logger        *slog.Logger
}

// Observer receives the host loop's measurements. Its methods run on the
// loop goroutine and must return at once.
type Observer interface {
	// Commit: one loop turn's storage commit took d; synced says whether
	// it included an fsync. The turn handled readies Ready cycles and its
	// batch held records records (memtable inserts): per put, these two
	// say what a turn's per-replica overhead costs (docs/benchmarks.md,
	// "Per-shard cost of a loop turn").
	Commit(synced bool, d time.Duration, readies, records int)
	// LeaderChange: a replica here became, or stopped being, leader.
	LeaderChange()
	// Reads: linearizable reads were served, byLease by the loop with no
	// ReadIndex round, byLeaseFast by lease off the loop (fastread.go),
	// byRound released by an answered round.
	Reads(byLease, byLeaseFast, byRound uint64)
}

// DefaultConfig returns the production settings.
func DefaultConfig(nodeID ids.NodeID) Config {
	return Config{
		NodeID:                   nodeID,
		TickInterval:             100 * time.Millisecond,
		ElectionTicks:            10,
		HeartbeatTicks:           1,
		LeaderPreferenceInterval: 5 * time.Second,
		LogTruncationInterval:    200 * time.Millisecond,
		SnapshotHandleTTL:        time.Minute,
		StrayCheckInterval:       10 * time.Second,
		PendingTimeout:           60 * time.Second,
		LogKeepEntries:           5000,
		LogTailEntries:           100,
		LogTruncateEntries:       100,
		MaxSizePerMsgBytes:       1 << 20,
		MaxInflightMsgs:          256,
		MaxUncommittedBytes:      64 << 20,
		MaxOutgoingSnapshots:     4,
		MaxInboxBytes:            64 << 20,
		Logger:                   slog.Default(),
		LeaseReads:               true,

		MaxInflightBytes:          4 << 20,
		MaxCommittedBytesPerReady: 4 << 20,
	}
}

// withDefaults returns c with every zero field set to its default. (A zero
// LogKeepEntries, LogTailEntries or LogTruncateEntries is taken as unset
// too.)
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.NodeID)
	for _, f := range []struct{ v, d *time.Duration }{
		{&c.TickInterval, &d.TickInterval}, {&c.LeaderPreferenceInterval, &d.LeaderPreferenceInterval},
		{&c.LogTruncationInterval, &d.LogTruncationInterval}, {&c.SnapshotHandleTTL, &d.SnapshotHandleTTL},
		{&c.PendingTimeout, &d.PendingTimeout}, {&c.StrayCheckInterval, &d.StrayCheckInterval},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *int }{
		{&c.ElectionTicks, &d.ElectionTicks}, {&c.HeartbeatTicks, &d.HeartbeatTicks},
		{&c.MaxInflightMsgs, &d.MaxInflightMsgs}, {&c.MaxOutgoingSnapshots, &d.MaxOutgoingSnapshots},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if c.MaxInboxBytes == 0 {
		c.MaxInboxBytes = d.MaxInboxBytes
	}
	for _, f := range []struct{ v, d *uint64 }{
		{&c.LogKeepEntries, &d.LogKeepEntries}, {&c.LogTailEntries, &d.LogTailEntries}, {&c.LogTruncateEntries, &d.LogTruncateEntries},
		{&c.MaxSizePerMsgBytes, &d.MaxSizePerMsgBytes}, {&c.MaxUncommittedBytes, &d.MaxUncommittedBytes},
		{&c.MaxInflightBytes, &d.MaxInflightBytes}, {&c.MaxCommittedBytesPerReady, &d.MaxCommittedBytesPerReady},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Clock == nil {
		c.Clock = monotonic()
	}
	if c.Fatal == nil {
		c.Fatal = exitOnFatal(c.Logger, c.NodeID)
	}
	return c
}

// validate refuses settings raft or the loop cannot work with.
func (c Config) validate() error {
	switch {
	case c.TickInterval <= 0:
		return fmt.Errorf("multiraft: TickInterval %v must be positive", c.TickInterval)
	case c.HeartbeatTicks <= 0 || c.ElectionTicks <= c.HeartbeatTicks:
		return fmt.Errorf("multiraft: ElectionTicks %d must exceed HeartbeatTicks %d > 0", c.ElectionTicks, c.HeartbeatTicks)
	case c.MaxOutgoingSnapshots <= 0:
		return fmt.Errorf("multiraft: MaxOutgoingSnapshots %d must be positive", c.MaxOutgoingSnapshots)
	case c.MaxInflightBytes < c.MaxSizePerMsgBytes:
		return fmt.Errorf("multiraft: MaxInflightBytes %d must be at least MaxSizePerMsgBytes %d", c.MaxInflightBytes, c.MaxSizePerMsgBytes)
	}
	return nil
}

// LeaseDuration is how long an answered ReadIndex round lets its leader
// serve reads by lease, 0 when lease reads are off: a voter that
// acknowledged the round's heartbeat ignores vote requests for at least
// ElectionTicks - 2 tick periods after it got it (a pending tick may come
// at once, and the next one right after it; ticks are dropped, never
// burst), less 10 % for the clocks of the nodes running at different
// rates (replica/lease.go).
func (c Config) LeaseDuration() time.Duration {
	if !c.LeaseReads || c.ElectionTicks <= 2 {
		return 0
	}
	return time.Duration(c.ElectionTicks-2) * c.TickInterval / 10 * 9
}

// leaseSilence is how long a follower must not have heard from its leader
// before it forgets it (LeaderGone), 0 when lease reads are off: the
// silence an acknowledgement of the leader's heartbeat promises on the
// follower's own clock, ElectionTicks - 2 tick periods, without the 10 %
// LeaseDuration leaves for clock rates, which is this margin: a follower
// whose clock runs fast still waits out the leader's lease.
func (c Config) leaseSilence() time.Duration {
	if c.LeaseDuration() == 0 {
		return 0
	}
	return time.Duration(c.ElectionTicks-2) * c.TickInterval
}

// exitOnFatal is the production Fatal: stop the process, since a replica
// must never continue from state it could not persist.
func exitOnFatal(log *slog.Logger, node ids.NodeID) func(error) {
	return func(err error) {
		log.Error("fatal storage error; stopping the node", "node", node, "err", err)
		os.Exit(2)
	}
}

// TickSource delivers the loop's ticks. The loop reads C until it ends, then
// calls Stop.
type TickSource interface {
	C() <-chan time.Time
	Stop()
}

// realTicker is the production TickSource.
type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
