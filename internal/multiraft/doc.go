// Package multiraft is DESIGN's "replica host": it drives every shard
// replica on a node from one goroutine, the loop.
//
// Each loop iteration
//  1. takes everything queued since the last one: raft messages from peers,
//     client proposals (grouped per shard into one MsgProp), ReadIndex
//     requests, snapshot reports, and ticks;
//  2. collects the Ready of every replica that has one, writes all their log
//     entries, hard states and applied commands into ONE Pebble batch, and
//     commits it with ONE fsync (group commit across all shards);
//  3. only then sends the replicas' messages (raft's persist-before-send
//     rule), hands outcomes to the waiting callers, and advances raft. The
//     one exception: a leader's appends and heartbeats leave before the
//     fsync (unless the Ready changes its term or vote), so the leader's
//     write overlaps its followers' (Raft thesis §10.2.1); it counts itself
//     towards a commit only once its own write is durable.
//
// Client goroutines never touch a replica: they enqueue work with Propose,
// ReadIndex or ChangeReplicas and wait on a channel. Readers of replica state
// (routing, status) use the Info snapshot the loop publishes after each cycle.
//
// Snapshots are never built in memory: raft's Snapshot carries a handle to a
// Pebble snapshot taken at the applied index, and the transport streams the
// shard's state-machine keys from it.
package multiraft
