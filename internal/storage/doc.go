// Package storage is Concord's disk: one Pebble database per node holding
// every shard replica's Raft log and hard state, every shard's state machine,
// and the node's own records (see package keys for the layout).
//
// RaftLog implements raft.Storage for one replica over that database. It
// keeps a few fields in memory (hard state, first and last index) that the
// caller updates in the same step as it writes them into a batch; the caller
// (the multiraft loop) must commit that batch before it next calls into raft,
// and must treat any storage error as fatal, as raft's Storage contract says.
//
// Snapshots travel as the key/value pairs of a shard's state-machine span.
// The receiver writes them into an SSTable file as they stream in, then
// installs it with IngestAndExcise, which replaces the replica's whole prefix
// (log, hard state, data) in one atomic step.
package storage
