package replica

import (
	"bytes"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/mutant"
)

// Leader leases: a leader whose ReadIndex round was answered serves later
// linearizable reads for a while with no round at all.
//
// Where the lease comes from. A round's ReadState means that a quorum of
// voters acknowledged a heartbeat of this term that the leader sent after
// the round was issued (ReadOnlySafe; heartbeats of a round leave in a
// Ready after FlushReads). A voter that takes a heartbeat resets its
// election clock (electionElapsed = 0), and with CheckQuorum it then
// ignores every (pre)vote request, unless forced by a leader transfer,
// until electionElapsed reaches the election timeout: ElectionTicks of its
// ticks. Ticks come from a time.Ticker, which drops ticks rather than
// bursting them: one tick may be pending when the heartbeat arrives and
// the next may follow at once, every later one a full TickInterval after
// the one before. So each acknowledging voter refuses to help elect
// anyone for at least (ElectionTicks - 2) × TickInterval after it got the
// heartbeat, and so after the time T the host took at or before the loop
// turn that issued the round. Any new leader needs a vote from a quorum,
// which includes one of those voters: none can exist before T plus that.
// The lease therefore runs until T + LeaseDuration, where the host sets
// LeaseDuration to (ElectionTicks - 2) × TickInterval less 10 % for
// clocks running at different rates. Time here is the host's monotonic
// clock (CLOCK_BOOTTIME on Linux: it runs while the process is stopped,
// and while the machine is suspended), passed in by the host; this package
// reads no clock.
//
// What a lease read returns. FlushReads, with the lease valid at the
// host's time now (taken after the reads it flushes reached the loop, so
// inside each read's interval), releases them at index = raft's commit
// index, once applied, with no round. A round's ReadState proved this
// leader committed an entry of its term, so its commit index covers every
// write acknowledged before now by it or an earlier leader; and no later
// leader can exist at now. Every entry in this leader's log past that
// index was proposed to it before now. The read may wait for apply, or
// the whole process may be stopped (SIGSTOP) between the check and the
// release, while a new leader takes over and commits writes: the read
// then returns the state at some applied index ≥ its commit index, made
// only of writes invoked before now, and misses only writes invoked after
// the lease ran out (a new leader's), so now remains a valid
// linearization point. A read whose leader learns of a newer term before
// it is released fails (failStaleRounds, updateLeadership), as rounds do.
// A resumed leader's lease has run out on the monotonic clock, so new
// reads go through rounds again, which a deposed leader cannot complete.
//
// What voids a lease before its time:
//   - A leader transfer: MsgTimeoutNow makes its target campaign with the
//     force flag, which voters grant despite the lease. Once this leader
//     has a transferee or sends a MsgTimeoutNow, it uses no lease for the
//     rest of its term (leaseBarredTerm).
//   - A membership change: the quorum that acknowledged the round was of
//     the old configuration; the next round re-establishes the lease.
//   - A restarted voter forgets its leader (lead = None) and would grant
//     votes at once: a replica loaded with a term past the bootstrap one
//     (it may have acknowledged a leader before its process stopped) drops
//     vote requests for its first ElectionTicks - 1 ticks (dropVote), and
//     does not campaign meanwhile either (Campaign: its own vote counts). The
//     host's ticker starts with the host, so the k-th tick comes at least
//     k intervals after the load, past the ElectionTicks - 2 intervals the
//     acknowledgement promised; one tick short of raft's own earliest
//     campaign, so the replica's own timer never fires inside the window.
//     A fresh cluster (term still the bootstrap one) elects at once; a
//     whole cluster restarted elects about an election timeout later.
//   - multiraft's LeaderGone makes followers forget their leader; it does
//     so only for a leader not heard from for at least ElectionTicks - 2
//     tick periods, the lease duration without its allowance for clock
//     rates (LeaderSilentFor).

// leaseValid reports whether this replica may serve reads by lease at now,
// given raft's status st. It bars the rest of the term once it sees a
// leader transfer under way.
func (r *Replica) leaseValid(now int64, st raft.BasicStatus) bool {
	if r.cfg.LeaseDuration <= 0 || r.removed || st.RaftState != raft.StateLeader {
		return false
	}
	if st.LeadTransferee != 0 {
		r.leaseBarredTerm = st.GetTerm()
	}
	if r.leaseTerm != st.GetTerm() || r.leaseBarredTerm == st.GetTerm() {
		return false
	}
	if mutant.Enabled && mutant.On(mutant.LeaseIgnoresExpiry) {
		return true
	}
	return now < r.leaseExpiry
}

// LeaseHeld reports the lease this replica may serve reads by as raft's
// leader, without looking at time (this package reads no clock): its term
// and expiry on the host's monotonic clock, with ok false when there is
// none (not leading, a lease of an earlier term, dropped by a membership
// change, barred by a leader transfer, a transfer under way, removed,
// leases off). caughtUp reports whether everything raft has committed is
// applied. multiraft publishes the lease for reads served off its loop
// (multiraft/fastread.go) and voids what it published as soon as ok turns
// false, before this replica's next messages leave.
func (r *Replica) LeaseHeld() (term uint64, expiry int64, ok, caughtUp bool) {
	st := r.rn.BasicStatus()
	caughtUp = r.applied == st.GetCommit()
	if r.cfg.LeaseDuration <= 0 || r.removed || st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return 0, 0, false, caughtUp
	}
	if r.leaseTerm != st.GetTerm() || r.leaseBarredTerm == st.GetTerm() {
		return 0, 0, false, caughtUp
	}
	return st.GetTerm(), r.leaseExpiry, true, caughtUp
}

// grantLease extends the lease from a round raft answered, issued at
// issuedAt in term.
func (r *Replica) grantLease(term uint64, issuedAt int64) {
	if r.cfg.LeaseDuration <= 0 || term != r.rn.BasicStatus().GetTerm() {
		return
	}
	if r.leaseTerm != term || issuedAt+r.cfg.LeaseDuration > r.leaseExpiry {
		r.leaseTerm, r.leaseExpiry = term, issuedAt+r.cfg.LeaseDuration
	}
}

// dropLease voids the lease (a membership change was applied).
func (r *Replica) dropLease() { r.leaseTerm, r.leaseExpiry = 0, 0 }

// barLeaseForTransfer stops lease reads for the rest of the current term:
// a transfer is starting, or its MsgTimeoutNow is about to leave.
func (r *Replica) barLeaseForTransfer() { r.leaseBarredTerm = r.rn.BasicStatus().GetTerm() }

// serveByLease releases reads under a valid lease at the commit index
// (status st): at once if it is applied, else as an answered round that
// serveReads releases once it is.
func (r *Replica) serveByLease(reads []*Read, st raft.BasicStatus) {
	r.leaseReads += uint64(len(reads))
	if st.GetCommit() > r.applied {
		r.readSeq++
		r.rounds[string(r.readCtx(st.GetTerm(), r.readSeq))] = &readRound{reads: reads, term: st.GetTerm(), born: r.ticks,
			index: st.GetCommit(), hasIndex: true, byLease: true}
		return
	}
	v, err := r.eng.NewReadView(len(reads))
	for _, rd := range reads {
		if err != nil {
			rd.Done <- err
			continue
		}
		rd.serve(v)
	}
}

// LeaseReads is the number of reads this replica served by lease.
func (r *Replica) LeaseReads() uint64 { return r.leaseReads }

// TakeReadCounts returns the reads served by lease and released by rounds
// since its last call (for metrics).
func (r *Replica) TakeReadCounts() (byLease, byRound uint64) {
	byLease, byRound = r.leaseReads-r.takenLease, r.roundReads-r.takenRound
	r.takenLease, r.takenRound = r.leaseReads, r.roundReads
	return byLease, byRound
}

// noteTransfers bars the lease for the term when rd carries a
// MsgTimeoutNow, before it is sent.
func (r *Replica) noteTransfers(rd raft.Ready) {
	for _, m := range rd.Messages {
		if m.GetType() == pb.MsgTimeoutNow {
			r.barLeaseForTransfer()
			return
		}
	}
}

// campaignTransfer is the context raft puts on the (pre)votes of a
// campaign forced by a leader transfer (raft's campaignTransfer), which
// voters grant despite their lease.
var campaignTransfer = []byte("CampaignTransfer")

// dropVote reports whether m is a vote request to drop because this
// replica was loaded after it may have acknowledged a leader, less than
// ElectionTicks - 1 ticks ago: raft, which starts with no leader, would grant
// it at once, breaking the promise its acknowledgement made to that
// leader's lease. Transfer campaigns are exempt (raft grants them anyway).
func (r *Replica) dropVote(m *pb.Message) bool {
	t := m.GetType()
	return (t == pb.MsgVote || t == pb.MsgPreVote) && r.ticks < r.voteQuietTicks &&
		!bytes.Equal(m.GetContext(), campaignTransfer)
}

// noteHeard records when a message of the current term from the leader
// raft follows was stepped (after the step, so a heartbeat that made it
// the leader counts). A heartbeat's truncation index is recorded too
// (logtrunc.go). Only the kinds a leader sends its followers are
// looked at, to spare the status on every response a leader receives.
func (r *Replica) noteHeard(m *pb.Message, now int64) {
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap, pb.MsgTimeoutNow, pb.MsgReadIndexResp:
	default:
		return
	}
	st := r.rn.BasicStatus()
	if st.Lead != 0 && m.GetFrom() == st.Lead && m.GetTerm() == st.GetTerm() {
		r.heardLead, r.heardTerm, r.heardAt = ids.ReplicaID(st.Lead), st.GetTerm(), now
		r.noteTruncation(m, st.GetTerm())
	}
}

// LeaderSilentFor reports whether the leader this replica follows has sent
// nothing in its term for at least d before now (or was never heard from
// here). multiraft's LeaderGone forgets only such a leader: one heard from
// more recently may hold a lease this replica's acknowledgement backs.
func (r *Replica) LeaderSilentFor(now, d int64) bool {
	st := r.rn.BasicStatus()
	if r.heardLead != ids.ReplicaID(st.Lead) || r.heardTerm != st.GetTerm() {
		return true
	}
	return now-r.heardAt >= d
}
