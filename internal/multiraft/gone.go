package multiraft

import (
	"slices"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Fast failover from a leader known to be gone.
//
// Raft alone notices a dead leader by silence: a follower campaigns once its
// randomized election timeout (1–2 election timeouts) passes without a
// heartbeat. Sometimes the node knows better: the placement service marked
// the leader's node REPLACED, DEAD or REMOVED, or a fresh process asked to
// join from the leader's address (so the process that led is gone). Then
// waiting is pure loss: a disk-loss rebuild cannot replace the replicas of
// the shards the wiped node led, and, if it led the meta shard, cannot even
// register its successor, until those shards elect.
//
// On such an event (LeaderGone) every local follower whose current leader
// is on that node forgets it (raft's ForgetLeader: with CheckQuorum, a
// follower that still believes in a leader ignores vote requests for the
// rest of an election timeout) and campaigns. To avoid split votes the
// surviving voters take turns by replica id, campaignStaggerTicks apart:
// the lowest campaigns at once, the next only if the shard still has no
// leader campaignStaggerTicks later, and so on. The turns also cover the
// event reaching voters at different moments: a first campaign whose
// pre-votes were ignored by a voter that had not forgotten its leader yet
// is followed by that voter's own turn, which the first grants (it no
// longer has a leader either). Where no turn succeeds, raft's election
// timeout still elects. Raft's safety does not depend on when a replica
// campaigns; PreVote still keeps a replica whose log is behind from
// disrupting anything.

// campaignStaggerTicks separates the campaigns of a shard's surviving
// voters: long enough for one pre-vote and vote round (a few round trips
// and an fsync), far shorter than an election timeout.
const campaignStaggerTicks = 2

// pendingCampaign is a replica's turn to campaign after its leader's node
// went.
type pendingCampaign struct {
	replica ids.ReplicaID
	due     uint64 // the host tick at which it campaigns
}

// LeaderGone tells the host that node's process is certainly gone (its
// identity was replaced or declared dead, or another process holds its
// address): the local followers of replicas it leads stop waiting for it
// and elect a new leader now. A node that leads nothing here changes
// nothing. Safe to call from any goroutine; it does not wait.
func (h *Host) LeaderGone(node ids.NodeID) {
	if node == 0 {
		return
	}
	_ = h.enqueue(func(in *inbox) { in.fns = append(in.fns, func() { h.forgetLeadersOn(node) }) })
}

// forgetLeadersOn makes every follower here whose leader is on node forget
// it and schedules its campaign. On the loop.
func (h *Host) forgetLeadersOn(node ids.NodeID) {
	forgot := 0
	for shard, r := range h.replicas {
		lead := r.CurrentLeader()
		if lead == 0 || lead == r.ID() || r.Nodes()[lead] != node {
			continue
		}
		rank, ok := campaignRank(r.Descriptor(), r.ID(), node)
		if !ok {
			continue // a learner: it cannot elect anyone
		}
		if err := r.ForgetLeader(); err != nil {
			h.log.Warn("forget leader", "shard", shard, "err", err)
			continue
		}
		h.campaigns[shard] = pendingCampaign{replica: r.ID(), due: h.ticks + rank*campaignStaggerTicks}
		h.dirty[shard] = r
		forgot++
	}
	if forgot > 0 {
		h.log.Info("leader's node is gone: followers forgot it and campaign", "node", node, "shards", forgot)
	}
	h.runCampaigns()
}

// runCampaigns starts the pending campaigns that are due, and drops those
// whose shard has a leader again. On the loop, after each event and tick.
func (h *Host) runCampaigns() {
	for shard, pc := range h.campaigns {
		r := h.replicas[shard]
		switch {
		case r == nil || r.ID() != pc.replica || r.CurrentLeader() != 0:
			delete(h.campaigns, shard) // gone, replaced, or a leader was elected
		case pc.due <= h.ticks:
			delete(h.campaigns, shard)
			if r.Campaigning() {
				continue // an election it started (or joined) is under way
			}
			if err := r.Campaign(); err != nil {
				h.log.Debug("campaign", "shard", shard, "err", err)
			}
			h.dirty[shard] = r
		}
	}
}

// campaignRank is self's turn among the voters of desc that are not on the
// gone node, in replica id order; ok is false if self is not such a voter.
func campaignRank(desc *concordpb.ShardDescriptor, self ids.ReplicaID, gone ids.NodeID) (rank uint64, ok bool) {
	var voters []ids.ReplicaID
	for _, rd := range desc.GetReplicas() {
		if rd.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER && ids.NodeID(rd.GetNodeId()) != gone {
			voters = append(voters, ids.ReplicaID(rd.GetReplicaId()))
		}
	}
	slices.Sort(voters)
	i := slices.Index(voters, self)
	return uint64(i), i >= 0
}
