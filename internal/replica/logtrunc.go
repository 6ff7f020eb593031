package replica

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Leader-aware log truncation (docs/architecture.md, "Raft log
// truncation"). Truncating applied entries is always safe for raft: a
// follower that needs a truncated entry gets a snapshot instead. What is
// at stake is the cost of keeping entries (every entry is a Pebble record;
// one truncated while still in the memtable is dropped by the flush, one
// kept longer is flushed to L0 and compacted before its range deletion
// drops it) against the cost of catching a follower up by snapshot.
//
// A leader knows each follower's Match (the highest index it has
// persisted), so it keeps exactly what its followers still need, plus a
// small tail, and no more than the cap (keep applied entries) for a
// follower that is down or far behind: past the cap, that follower catches
// up by snapshot as before. Every follower counts, whether or not raft
// finds it recently active: a follower down for a few seconds then
// catches up from the log, and the cap bounds what a dead one holds.
//
// A follower does not know the others' progress, yet its log matters if
// it becomes leader while another follower lags. So it truncates no
// further than its leader may: the leader stamps the index it may truncate
// to on its heartbeats (Index, a field raft leaves unset on heartbeats and
// ignores on receipt), and the follower, at its next truncation pass,
// takes the lower of the latest stamp and its own applied index. With no
// word from the current term's leader (a leader that has not judged yet,
// or a build that does not stamp), it keeps the cap, as every replica did
// before. The followers' logs thus
// start where the leader's does, as they do in CockroachDB and TiKV, where
// the leader proposes the truncation through raft; a heartbeat field
// costs nothing on the log.

// TruncationTarget returns the index up to which this replica's log may be
// truncated now: never past the applied index, never keeping more than
// Config.LogKeepEntries applied entries, and on a leader keeping
// Config.LogTailEntries entries below the slowest follower's Match.
func (r *Replica) TruncationTarget() uint64 {
	if r.isLeader {
		return r.leaderTarget()
	}
	if r.leaderTruncTerm != r.rn.BasicStatus().GetTerm() {
		return r.capFloor()
	}
	return max(r.capFloor(), min(r.applied, r.leaderTruncTo))
}

// capFloor is the lowest truncation index the cap allows: the log keeps at
// most LogKeepEntries applied entries.
func (r *Replica) capFloor() uint64 { return r.applied - min(r.applied, r.cfg.LogKeepEntries) }

// leaderTarget is a leader's truncation index.
func (r *Replica) leaderTarget() uint64 {
	need := min(r.applied, r.followersNeed())
	return max(r.capFloor(), need-min(need, r.cfg.LogTailEntries))
}

// followersNeed is the lowest index a follower of this leader has not
// confirmed it holds: its Match, or the index of the snapshot it is being
// sent (after which it needs the entries that follow). ^0 with no follower.
func (r *Replica) followersNeed() uint64 {
	need := ^uint64(0)
	self := uint64(r.cfg.ReplicaID)
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == self {
			return
		}
		m := pr.Match
		if pr.State == tracker.StateSnapshot {
			m = max(m, pr.PendingSnapshot)
		}
		need = min(need, m)
	})
	return need
}

// stampTruncations puts the leader's truncation index on the heartbeats
// among msgs (see above), computed afresh: a follower then truncates, at
// its next truncation pass, to within a heartbeat of where its leader
// could, instead of where the leader's own last pass got to (which would
// keep its entries up to one pass longer, and more of them past a
// memtable flush). Once per Ready with heartbeats: once a tick at most.
func (r *Replica) stampTruncations(msgs []*pb.Message) {
	if !r.isLeader {
		return
	}
	var idx *uint64
	for _, m := range msgs {
		if m.GetType() != pb.MsgHeartbeat {
			continue
		}
		if idx == nil {
			idx = new(r.leaderTarget())
		}
		if *idx > 0 {
			m.Index = idx
		}
	}
}

// noteTruncation records the truncation index the leader of term stamped
// on heartbeat m.
func (r *Replica) noteTruncation(m *pb.Message, term uint64) {
	if m.GetType() == pb.MsgHeartbeat {
		r.leaderTruncTo, r.leaderTruncTerm = m.GetIndex(), term
	}
}
