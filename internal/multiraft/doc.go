// Package multiraft is DESIGN's "replica host": it drives every shard
// replica on a node from one goroutine, the loop.
//
// Each loop iteration
//  1. takes everything queued since the last one: raft messages from peers,
//     client proposals (grouped per shard into one MsgProp), linearizable
//     reads (per shard, the queued ones share ONE ReadIndex round, at most
//     one unanswered at a time: replica.FlushReads), snapshot reports, and
//     ticks;
//  2. collects the Ready of every replica that has one, writes all their log
//     entries, hard states and applied commands into ONE Pebble batch, and
//     commits it with ONE fsync (group commit across all shards);
//  3. only then sends the replicas' messages (raft's persist-before-send
//     rule), hands outcomes to the waiting callers, and advances raft. The
//     one exception: a leader's appends and heartbeats leave before the
//     fsync (unless the Ready changes its term or vote), so the leader's
//     write overlaps its followers' (Raft thesis §10.2.1); it counts itself
//     towards a commit only once its own write is durable. The loop yields
//     once between flushing them and its fsync, so that the senders write
//     them before the fsync starts (yieldToSenders).
//
// Client goroutines never touch a replica: they enqueue work with Propose,
// ReadIndex or ChangeReplicas and wait on a channel. Readers of replica state
// (routing, status) use the Info snapshot the loop publishes after each cycle.
//
// Snapshots are never built in memory: raft's Snapshot carries a handle to a
// storage.Snapshot taken at the applied index, and the transport streams the
// shard's state-machine keys from it. A received snapshot arrives as a
// storage.StagedSnapshot, which the replica owns until it installs or
// discards it. The host never touches Pebble directly: every key it writes
// (hosted records, tombstones, batches) goes through storage.Engine.
//
// Time, failure and randomness are injected through Config, so that a Host
// can run inside a deterministic test harness (package multiraftest):
//   - Ticks is the tick source (nil: a time.Ticker of TickInterval). Every
//     periodic policy is configured as a duration and converted to ticks once
//     (policy.go), so the loop itself only counts ticks.
//   - Fatal receives storage errors in the raft path (nil: log and exit 2).
//   - IDBase seeds proposal ids and the replicas' ReadIndex contexts
//     (0: crypto/rand).
//
// Files, by concern:
//
//	host.go       the Host, its collaborators (Transport, NewStateMachine), New
//	config.go     Config, DefaultConfig, defaults and validation, TickSource,
//	              LeaseDuration
//	clock_*.go    the lease clock (CLOCK_BOOTTIME on Linux), read once a turn
//	api.go        what other goroutines call: Propose, ReadIndex,
//	              ChangeReplicas, Deliver, DeliverSnapshot, ReportUnreachable,
//	              Info/Infos, RefuseLeadership, TransferLeadersAway, Do
//	loop.go       the loop: the inbox, run, tick, drain, step, handleReady, send
//	lifecycle.go  Start/Stop and replica load, creation and removal
//	policy.go     periodic policies: leader preference, log truncation
//	gone.go       LeaderGone: followers of a leader known gone forget it
//	              (once silent a lease long) and campaign in turns, without
//	              the election timeout
//	snapshots.go  outgoing snapshot handles and raft's Snapshot function
//	validate.go   what peers' messages may do: types per stream, creating
//	              and replacing replicas, the log of dropped messages
package multiraft
