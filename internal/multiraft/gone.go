package multiraft

import (
	"slices"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/replica"
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

// A follower forgets only a leader it has not heard from (any message of
// the leader's term) for at least ElectionTicks - 2 tick periods on the
// host's monotonic clock (leaseSilence: the lease duration plus the
// lease's allowance for clock rates): a leader heard from more recently
// may hold a read lease that this follower's acknowledgement backs
// (replica/lease.go), and the
// event may be wrong about it (a node marked dead through a partial
// partition while raft traffic still flows). Such a follower waits, tick
// by tick, until its leader has been silent that long, then forgets it and
// takes its turn; if another leader takes over, or an election timeout
// passes while the leader is still heard from, it gives up waiting
// (raft's own election timeout still elects if the leader is really gone).
// A leader that really died was heard from last before it died, so the
// wait is at most ElectionTicks - 2 tick periods after its death.

// campaignStaggerTicks separates the campaigns of a shard's surviving
// voters: long enough for one pre-vote and vote round (a few round trips
// and an fsync), far shorter than an election timeout.
const campaignStaggerTicks = 2

// pendingCampaign is a replica's turn to campaign after its leader's node
// went.
type pendingCampaign struct {
	replica ids.ReplicaID
	due     uint64 // the host tick at which it campaigns
	// Before it forgot its leader: the leader, the campaign's rank, and
	// the tick after which it gives up waiting for the leader's silence.
	forgot bool
	leader ids.ReplicaID
	rank   uint64
	giveUp uint64
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

// forgetLeadersOn schedules every follower here whose leader is on node to
// forget it and campaign. On the loop.
func (h *Host) forgetLeadersOn(node ids.NodeID) {
	scheduled := 0
	for shard, r := range h.replicas {
		lead := r.CurrentLeader()
		if lead == 0 || lead == r.ID() || r.Nodes()[lead] != node {
			continue
		}
		rank, ok := campaignRank(r.Descriptor(), r.ID(), node)
		if !ok {
			continue // a learner: it cannot elect anyone
		}
		h.campaigns[shard] = pendingCampaign{replica: r.ID(), leader: lead, rank: rank,
			giveUp: h.ticks + uint64(h.cfg.ElectionTicks)}
		scheduled++
	}
	if scheduled > 0 {
		h.log.Info("leader's node is gone: followers forget it and campaign", "node", node, "shards", scheduled)
	}
	h.runCampaigns()
}

// runCampaigns makes the followers waiting for their gone leader's silence
// forget it once it lasted leaseSilence, starts the pending campaigns
// that are due, and drops those whose shard has a leader again. On the
// loop, after each event and tick.
func (h *Host) runCampaigns() {
	for shard, pc := range h.campaigns {
		r := h.replicas[shard]
		switch {
		case r == nil || r.ID() != pc.replica:
			delete(h.campaigns, shard) // gone or replaced
		case !pc.forgot:
			h.forgetIfSilent(shard, r, pc)
		default:
			h.campaignIfDue(shard, r, pc)
		}
	}
}

// forgetIfSilent makes r forget its gone leader once the leader has been
// silent for leaseSilence, and runs its turn to campaign if due at
// once; it gives up when r follows another leader or has waited an
// election timeout (the leader is still heard from: the event was wrong,
// or the leader is cut off from the placement service only).
func (h *Host) forgetIfSilent(shard ids.ShardID, r *replica.Replica, pc pendingCampaign) {
	switch {
	case r.CurrentLeader() != pc.leader || h.ticks > pc.giveUp:
		delete(h.campaigns, shard)
		return
	case !r.LeaderSilentFor(h.now, int64(h.cfg.leaseSilence())):
		return // it may hold a lease this replica backs; wait
	}
	if err := r.ForgetLeader(); err != nil {
		h.log.Warn("forget leader", "shard", shard, "err", err)
		delete(h.campaigns, shard)
		return
	}
	pc.forgot, pc.due = true, h.ticks+pc.rank*campaignStaggerTicks
	h.campaigns[shard] = pc
	h.dirty[shard] = r
	h.campaignIfDue(shard, r, pc)
}

// campaignIfDue starts r's campaign if its turn has come, or drops it if
// the shard has a leader again.
func (h *Host) campaignIfDue(shard ids.ShardID, r *replica.Replica, pc pendingCampaign) {
	switch {
	case r.CurrentLeader() != 0:
		delete(h.campaigns, shard) // a leader was elected
	case pc.due <= h.ticks:
		delete(h.campaigns, shard)
		if r.Campaigning() {
			return // an election it started (or joined) is under way
		}
		if err := r.Campaign(); err != nil {
			h.log.Debug("campaign", "shard", shard, "err", err)
		}
		h.dirty[shard] = r
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
