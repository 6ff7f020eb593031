package replica

import (
	pb "go.etcd.io/raft/v3/raftpb"
)

// Refusing leadership (a node that stops cleanly).
//
// A node that stops cleanly hands the leadership of the shards it leads to
// its peers first, so that clients see no election timeout. That is undone
// if the replicas of the stopping node take leadership back: another
// leader's transfer (the placement service balancing leaders, say) or an
// election won by this replica would leave the shard led by a process
// about to exit, and the shard leaderless until an election timeout after
// it did. So a replica told to refuse leadership (RefuseLeadership) never
// becomes leader again:
//
//   - It drops MsgTimeoutNow, a leader's order to campaign at once (the
//     end of a transfer to it). The transferring leader keeps leading: raft
//     abandons a transfer whose target has not taken over after an
//     election timeout; until then it drops proposals (Propose:
//     ErrProposalDropped), which is why the placement service is told not
//     to plan transfers onto a stopping node in the first place.
//   - Its (pre-)vote requests do not leave, and the answers to them are
//     dropped, so neither an election raft's own timer starts (MsgHup is
//     local to raft: there is no hook before it) nor one already under way
//     when the refusal began is ever won. Raft's timer still runs: a
//     follower whose leader went silent turns pre-candidate as before,
//     forgets that leader and so, as before, grants its vote to the other
//     voters (CheckQuorum ignores vote requests only while a leader is
//     believed in), which elect one of them. PreVote is on: a
//     pre-candidate changes no term, so a campaign that never leaves
//     disturbs nobody, and it follows the next leader it hears from.
//   - Campaign refuses (ErrRefusingLeadership), so the host's own
//     campaigns (at start, after a leader's node is gone) do not run.
//
// A leader keeps leading until it hands its leadership away
// (TransferAway). The only voter of its configuration can still elect
// itself on its timer (raft needs no message for that); no other replica
// could lead its shard anyway. The refusal lasts as long as the replica:
// a restarted process loads fresh replicas that lead as before. Not
// campaigning never costs safety, and votes are granted as raft grants
// them, so the lease (lease.go) is unaffected.

// RefuseLeadership makes this replica refuse leadership from now on (see
// above). It does not make a leader step down: TransferAway does that.
func (r *Replica) RefuseLeadership() { r.refuseLead = true }

// RefusesLeadership reports whether RefuseLeadership was called.
func (r *Replica) RefusesLeadership() bool { return r.refuseLead }

// refusedStep reports whether m is a message that would help this replica
// take leadership, to drop because it refuses leadership.
func (r *Replica) refusedStep(m *pb.Message) bool {
	if !r.refuseLead {
		return false
	}
	switch m.GetType() {
	case pb.MsgTimeoutNow, pb.MsgVoteResp, pb.MsgPreVoteResp:
		return true
	}
	return false
}

// refusedSend reports whether m, from this replica, asks for a vote that
// this replica, refusing leadership, must not get.
func (r *Replica) refusedSend(m *pb.Message) bool {
	t := m.GetType()
	return r.refuseLead && (t == pb.MsgVote || t == pb.MsgPreVote)
}
