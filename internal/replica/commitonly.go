package replica

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Commit-only appends (docs/architecture.md, "The path of a write", step 5).
//
// When an ack moves a leader's commit index, raft's bcastAppend sends every
// follower an empty MsgApp that carries nothing but the new index, and the
// follower runs a loop turn to step it, apply and acknowledge it; so does
// raft's reply to an ack that did not move the commit index when the
// follower may not know it (Progress.CanBumpCommit). A leader here sends
// neither to a follower it replicates to, as TiKV's raft does with
// skip_bcast_commit: the follower learns the commit index from the next
// append, which carries it, or from the next heartbeat (every tick), which
// carries min(its Match, commit). Nothing waits on a follower's apply: the
// leader answers a write once it applied it, reads are served by the
// leader, a leadership transfer waits on the transferee's log, not its
// apply, and a new leader commits an entry of its own term before it
// serves anything. What a follower's stale read sees may lag by up to a
// tick after a burst of writes ends, instead of a round trip.
//
// Two empty appends are raft's way of making progress, and go out:
//   - to a peer raft probes (or sends a snapshot), where the empty append
//     finds the index the logs agree at;
//   - raft's answer to a heartbeat response from a peer whose Match lags:
//     that is how a leader learns that appends in flight were lost (the
//     follower rejects the empty append, and raft probes), so it must not
//     be dropped in turn, or the follower never gets the lost entries.
//
// Dropping any message is what raft already tolerates; this drops only
// messages that carry no entries, to peers whose log the leader tracks
// exactly.

// commitOnly reports whether m is an append that carries no entries.
func commitOnly(m *pb.Message) bool {
	return m.GetType() == pb.MsgApp && len(m.GetEntries()) == 0
}

// heardHeartbeat notes, for a leader, that raft stepped a heartbeat
// response from peer id: an empty append to it in the next Ready may be
// raft's answer to it, which must go out.
func (r *Replica) heardHeartbeat(m *pb.Message) {
	if m.GetType() != pb.MsgHeartbeatResp {
		return
	}
	if r.hbResp == nil {
		r.hbResp = map[uint64]bool{}
	}
	r.hbResp[m.GetFrom()] = true
}

// commitSkipper decides, for one Ready's messages, which commit-only
// appends are left out. It reads raft's progress once, and only if the
// Ready holds a commit-only append.
type commitSkipper struct {
	r    *Replica
	read bool
}

// skip reports whether m is a commit-only append of this leader to a peer
// it replicates to, and not raft's answer to that peer's heartbeat
// response.
func (s *commitSkipper) skip(m *pb.Message) bool {
	r := s.r
	if !commitOnly(m) || !r.isLeader || m.GetTerm() != r.term || r.hbResp[m.GetTo()] {
		return false
	}
	if !s.read {
		s.read = true
		clear(r.replicating)
		if r.replicating == nil {
			r.replicating = map[uint64]bool{}
		}
		r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if pr.State == tracker.StateReplicate {
				r.replicating[id] = true
			}
		})
	}
	return r.replicating[m.GetTo()]
}
