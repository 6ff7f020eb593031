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
// The sender reads them from a Snapshot (ScanState), an open iterator over
// the span taken at the applied index: unlike a Pebble snapshot, it keeps
// its data when Excise (DestroyReplica, InstallSnapshot) removes the shard
// while the stream runs, at the price of pinning memtables and sstables
// until it is closed (snapshot.go). The receiver writes them through a
// SnapshotWriter into an SSTable file as they stream in, getting a
// StagedSnapshot, a handle storage owns the file behind: InstallSnapshot
// consumes it with IngestAndExcise, which replaces the replica's whole
// prefix (log, hard state, data) in one atomic step, or Discard removes it.
//
// The engine also owns the records of which replicas a node hosts
// (HostedReplicas, SetHosted, Tombstone, DestroyReplica) and the initial
// state of a bootstrapped replica (BootstrapReplica), so that no other
// package writes those keys, and the node's own records (identity, address
// book, seen peers: local.go). The *pebble.DB never leaves the package:
// other packages read through Reader and snapshots and write through
// batches, and only storage and the state machines' apply code import
// Pebble (internal/lint enforces it). Reads from outside the host loop (RPC
// handlers) go through Read and ReadView (readview.go), which fail with
// ErrClosed once the engine is closed instead of letting Pebble panic.
//
// OpenFS runs an engine on any Pebble vfs.FS; tests use an in-memory one.
package storage
