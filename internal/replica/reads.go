package replica

import (
	"encoding/binary"

	"go.etcd.io/raft/v3"

	"github.com/concord-kv/concord/internal/mutant"
)

// Linearizable reads are batched: ReadIndex only queues a read, and
// FlushReads, which the host calls once per loop turn, asks raft for ONE
// read index on behalf of every read queued since the previous round (a
// round). Each ReadIndex costs the leader a heartbeat to every follower and
// their answers; a round pays that once for all its reads. At most one
// round per replica awaits raft's answer at a time: reads arriving
// meanwhile queue, and go out together as the next round once it is
// answered (the host flushes again right after Advance). Loop turns are far
// shorter than a heartbeat round trip, so a round per turn would carry
// about one read each under load (measured: 1.1 reads per round at 100
// clients). A read that arrives after a round was issued always waits for
// a later one, so it never reuses an index confirmed before it arrived:
// linearizability needs the index to be confirmed after the read began.
//
// Safety: a round's index is trusted only from raft's ReadState for the
// round's own context, which raft produces only on a leader that a quorum
// confirmed after the request (ReadOnlySafe). A round is issued only while
// raft itself leads (never on a follower, where raft would forward it to
// the leader, which refuses peers' MsgReadIndex, or drop it when no leader
// is known). Every round fails, never hangs: when the replica stops leading
// (updateLeadership), the term moves past the round's (failStaleRounds), the
// replica is removed or destroyed (failPending), or it outlives
// PendingTimeoutTicks (expireReads).

// readRound is one ReadIndex request to raft and the reads it serves.
type readRound struct {
	reads    []*Read
	term     uint64 // raft's term when the round was issued
	born     uint64 // replica tick when it was issued
	index    uint64 // the read index, once raft answered (hasIndex)
	hasIndex bool
	// byLease: reads served by lease, waiting only for apply (lease.go).
	byLease bool
	// issuedAt is the host's monotonic time at or before the loop turn
	// that issued it: its answer grants a lease from then (lease.go).
	issuedAt int64
}

// ReadIndex queues a linearizable read for the next round (FlushReads):
// Done receives nil once the shard's commit index at the time of the round
// is applied locally, or an error; a replica that does not lead refuses
// the read at once.
func (r *Replica) ReadIndex(rd *Read) {
	if err := r.checkLeader(); err != nil {
		rd.Done <- err
		return
	}
	if mutant.Enabled && mutant.On(mutant.LeaderReadNoReadIndex) {
		// Serve from the applied state now, trusting leadership.
		v, err := r.eng.NewReadView(1)
		if err != nil {
			rd.Done <- err
			return
		}
		rd.serve(v)
		return
	}
	rd.born = r.ticks
	r.readQueue = append(r.readQueue, rd)
}

// FlushReads, at the host's monotonic time now (taken after the queued
// reads reached the loop), serves every queued read by lease when this
// leader holds a valid one (lease.go), and otherwise issues one ReadIndex
// round for them, unless a round is still waiting for raft's answer (the
// reads then wait for the next flush after it). A lease with less than
// half its duration left is renewed by a round issued alongside. If raft
// no longer leads (it stepped down while this loop turn stepped messages),
// the reads fail at once with NotLeaderError, which callers retry at the
// new leader.
func (r *Replica) FlushReads(now int64) {
	if len(r.readQueue) == 0 {
		return
	}
	st := r.rn.BasicStatus()
	if r.leaseValid(now, st) {
		reads := r.readQueue
		r.readQueue = nil
		r.serveByLease(reads, st)
		if r.leaseExpiry-now < r.cfg.LeaseDuration/2 && !r.roundInFlight() {
			r.issueRound(nil, st.GetTerm(), now)
		}
		return
	}
	if r.roundInFlight() {
		return
	}
	reads := r.readQueue
	r.readQueue = nil
	if r.removed || st.RaftState != raft.StateLeader {
		err := r.checkLeader()
		if err == nil {
			err = &NotLeaderError{Shard: r.cfg.Shard, LeaderNode: r.LeaderNode()}
		}
		for _, rd := range reads {
			rd.Done <- err
		}
		return
	}
	r.issueRound(reads, st.GetTerm(), now)
}

// issueRound asks raft for a read index for reads (none: a lease renewal)
// in term, recording now as the earliest time its heartbeats may leave.
func (r *Replica) issueRound(reads []*Read, term uint64, now int64) {
	r.readSeq++
	r.readRounds++
	ctx := r.readCtx(term, r.readSeq)
	r.rounds[string(ctx)] = &readRound{reads: reads, term: term, born: r.ticks, issuedAt: now}
	r.rn.ReadIndex(ctx)
}

// readCtx is the context of a round: ReadCtxBase, the term and a sequence
// number, 24 bytes. Within a process the sequence never repeats. A
// restarted process has another base; even with the same base (tests pass
// a fixed one) it cannot repeat a context, because rounds are issued only
// by a leader, and a term has one leader, elected once: a restarted node
// leads only in a term later than any it led before.
func (r *Replica) readCtx(term, seq uint64) []byte {
	ctx := make([]byte, 0, 24)
	ctx = binary.BigEndian.AppendUint64(ctx, r.cfg.ReadCtxBase)
	ctx = binary.BigEndian.AppendUint64(ctx, term)
	return binary.BigEndian.AppendUint64(ctx, seq)
}

// roundInFlight reports whether a round waits for raft's read index.
// Rounds are few (at most one unanswered, plus answered ones waiting for
// apply), so a scan is cheap.
func (r *Replica) roundInFlight() bool {
	for _, round := range r.rounds {
		if !round.hasIndex {
			return true
		}
	}
	return false
}

// ReadRounds is the number of ReadIndex rounds this replica has issued.
func (r *Replica) ReadRounds() uint64 { return r.readRounds }

// noteReadStates records the read index raft returned for each round.
// States for contexts this replica does not know (a round already failed)
// are ignored.
func (r *Replica) noteReadStates(states []raft.ReadState) {
	for _, rs := range states {
		if round, ok := r.rounds[string(rs.RequestCtx)]; ok && !round.hasIndex {
			round.index, round.hasIndex = rs.Index, true
			r.grantLease(round.term, round.issuedAt)
		}
	}
}

// failStaleRounds fails the rounds issued in a term before the current one:
// their leadership is over (raft forgot their requests when it changed
// term), whatever the replica's role now.
func (r *Replica) failStaleRounds() {
	for k, round := range r.rounds {
		if round.term < r.term {
			delete(r.rounds, k)
			failRound(round, &NotLeaderError{Shard: r.cfg.Shard, LeaderNode: r.LeaderNode()})
		}
	}
}

// expireReads fails the reads that have waited longer than
// PendingTimeoutTicks: their callers gave up long ago. A read changed
// nothing, so it fails with ErrReadTimeout, never ErrAmbiguous.
func (r *Replica) expireReads() {
	for k, round := range r.rounds {
		if r.ticks-round.born > r.cfg.PendingTimeoutTicks {
			delete(r.rounds, k)
			failRound(round, ErrReadTimeout)
		}
	}
	kept := r.readQueue[:0]
	for _, rd := range r.readQueue {
		if r.ticks-rd.born > r.cfg.PendingTimeoutTicks {
			rd.Done <- ErrReadTimeout
			continue
		}
		kept = append(kept, rd)
	}
	r.readQueue = kept
}

// failReads ends every queued read and every round with err.
func (r *Replica) failReads(err error) {
	for k, round := range r.rounds {
		delete(r.rounds, k)
		failRound(round, err)
	}
	for _, rd := range r.readQueue {
		rd.Done <- err
	}
	r.readQueue = nil
}

func failRound(round *readRound, err error) {
	for _, rd := range round.reads {
		rd.Done <- err
	}
}

// serveReads releases the rounds whose index is applied, with one view of
// the engine for all their reads. It is taken here, in Advance: after the
// batch holding their index is committed, and before the loop may destroy
// this replica's data (a removal applied in this very Ready) or replace it
// by a snapshot, so a read that runs later on its own goroutine still sees
// the state it was released at.
func (r *Replica) serveReads() {
	var ready []*Read
	for k, round := range r.rounds {
		if round.hasIndex && round.index <= r.applied {
			delete(r.rounds, k)
			ready = append(ready, round.reads...)
			if !round.byLease {
				r.roundReads += uint64(len(round.reads))
			}
		}
	}
	if len(ready) == 0 {
		return
	}
	v, err := r.eng.NewReadView(len(ready))
	for _, rd := range ready {
		if err != nil {
			rd.Done <- err
			continue
		}
		rd.serve(v)
	}
}
