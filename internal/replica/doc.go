// Package replica is one shard replica on one node: an etcd raft RawNode, its
// RaftLog, the shard's state machine, and the client work waiting on it
// (proposals and linearizable reads).
//
// A Replica has no goroutines, timers or sockets and is not safe for
// concurrent use: the multiraft loop owns every replica and drives it through
// one Ready cycle at a time:
//
//	rd := r.Ready()
//	r.InstallSnapshot(rd)       // if rd carries one; durable on return
//	r.Persist(batch, rd)        // log entries and hard state into the batch
//	r.Apply(batch, rd)          // committed entries and applied index into the same batch
//	batch.Commit(sync)          // one fsync for every replica of the node
//	r.Messages(rd)              // then, and only then, send
//	r.Advance(rd)               // deliver outcomes, serve reads, raft Advance
//
// Between cycles the loop hands a replica work: Propose then FlushProposals
// (one MsgProp for the proposals of a loop turn), ReadIndex then FlushReads
// (one ReadIndex round for the linearizable reads of a loop turn; reads.go;
// or none, under a leader lease: lease.go). The host passes in its
// monotonic time (FlushReads, Step): a replica reads no clock.
//
// Apply is deterministic: an entry's effect depends only on the entry and the
// state before it. Outcomes go back to clients only after the batch holding
// them is durable.
package replica
