package scheduler

import (
	"cmp"
	"slices"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// shardView is one shard's descriptor, classified against the judged node
// states.
type shardView struct {
	d    *concordpb.ShardDescriptor
	id   ids.ShardID
	via  ids.NodeID // its leader, as far as the planner knows
	want int        // replicas it should have (Settings.Replication, or the meta shard's)

	voters     int // voters in the descriptor
	liveVoters int // voters on live nodes: what a quorum is made of
	goodVoters int // voters on good nodes (UP or SUSPECT)
	good       int // replicas of any role on good nodes: what counts towards want
}

func (p *planner) classify(d *concordpb.ShardDescriptor, via ids.NodeID) shardView {
	id := ids.ShardID(d.GetShardId())
	c := shardView{d: d, id: id, via: via, want: p.want(id)}
	for _, r := range d.GetReplicas() {
		j := p.nodes[ids.NodeID(r.GetNodeId())] // an unknown node: zero, neither live nor good
		if j.good {
			c.good++
		}
		if !isVoter(r) {
			continue
		}
		c.voters++
		if j.live {
			c.liveVoters++
		}
		if j.good {
			c.goodVoters++
		}
	}
	return c
}

func isVoter(r *concordpb.ReplicaDescriptor) bool {
	return r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER
}

// quorum is the number of votes a configuration of voters needs.
func quorum(voters int) int { return voters/2 + 1 }

// repair plans shard d's one step, if it needs one; the first rule that
// applies wins. A busy shard or one with no known leader gets nothing, and
// neither does one that has lost its live quorum (no change could commit;
// Health reports it).
func (p *planner) repair(d *concordpb.ShardDescriptor) (Step, bool) {
	shard := ids.ShardID(d.GetShardId())
	via := p.via(shard)
	if p.busy(shard) || via == 0 {
		return Step{}, false
	}
	if s, ok := replaceReplaced(p.wiped, d, via); ok {
		return s, true
	}
	c := p.classify(d, via)
	if c.liveVoters < quorum(c.voters) {
		return Step{}, false
	}
	if c.want > 0 {
		for _, rule := range []func(shardView) (Step, bool){p.addLearner, p.promote, p.removeReplica} {
			if s, ok := rule(c); ok {
				return s, true
			}
		}
	}
	return p.moveLeader(c)
}

// base is a step on c's shard with the fields every kind shares.
func (c shardView) base(kind StepKind) Step {
	return Step{Kind: kind, Shard: c.id, Via: c.via, Epoch: c.d.GetEpoch()}
}

// addLearner: a shard with fewer good replicas than it wants gets a learner
// on the least-loaded eligible node that does not hold it, is under its
// move cap, is not low on space, has room for it above its reserve (fits)
// and did not lately have a stuck learner of it removed (ties: the lower
// node id). No such node: nothing (the shard runs under-replicated;
// Health says so).
func (p *planner) addLearner(c shardView) (Step, bool) {
	if c.good >= c.want {
		return Step{}, false
	}
	target, ok := p.leastLoaded(c.d)
	if !ok {
		return Step{}, false
	}
	return p.planAdd(c, target), true
}

// leastLoaded is the eligible node under its move cap and not low on
// space that holds no replica of d, has room for d above its reserve
// (planner.fits), is not avoided for d (a stuck learner of d was removed
// from it lately: planner.avoided) and holds the fewest replicas overall,
// ties to the lower id.
func (p *planner) leastLoaded(d *concordpb.ShardDescriptor) (ids.NodeID, bool) {
	var best ids.NodeID
	for _, id := range p.order {
		if !p.canTakeShard(d, id) {
			continue
		}
		if best == 0 || p.replicas[id] < p.replicas[best] {
			best = id
		}
	}
	return best, best != 0
}

// canTake reports whether a new replica may go to node: eligible, under
// its move cap, and not low on space.
func (p *planner) canTake(node ids.NodeID) bool {
	return p.nodes[node].eligible && p.underCap(node) && !p.low[node]
}

// canTakeShard reports whether a new replica of d may go to node:
// canTake, no replica of d there, room for d (fits), and not avoided for
// d.
func (p *planner) canTakeShard(d *concordpb.ShardDescriptor, node ids.NodeID) bool {
	shard := ids.ShardID(d.GetShardId())
	return p.canTake(node) && replicaOn(d, node) == nil && p.fits(shard, node) && !p.avoided(shard, node)
}

// planAdd is an add-learner step on target, counted against its load, its
// cap and its room (the shard's size, planner.fits) for the rest of the
// round.
func (p *planner) planAdd(c shardView, target ids.NodeID) Step {
	p.replicas[target]++
	p.moves[target]++
	p.addIncoming(target, c.id)
	s := c.base(StepAddLearner)
	s.Target = target
	return s
}

// promote: a learner on an eligible node that has caught up (its applied
// index non-zero and within Settings.CatchUpEntries of the shard's commit
// index, as fresh reports give them) becomes a voter; the lowest replica
// id first. A learner that has not reported yet is not caught up.
func (p *planner) promote(c shardView) (Step, bool) {
	for _, r := range sortedReplicas(c.d) {
		if isVoter(r) || !p.nodes[ids.NodeID(r.GetNodeId())].eligible || !p.caughtUp(c.id, r) {
			continue
		}
		return c.with(StepPromoteLearner, r), true
	}
	return Step{}, false
}

// caughtUp reports whether replica r of shard has, by its node's fresh
// report, a non-zero applied index within Settings.CatchUpEntries of the
// shard's commit index (planner.commitIndex).
func (p *planner) caughtUp(shard ids.ShardID, r *concordpb.ReplicaDescriptor) bool {
	rs := p.replicaStatus(shard, r)
	return rs != nil && rs.GetAppliedIndex() != 0 && rs.GetAppliedIndex()+p.s.CatchUpEntries >= p.commitIndex(shard)
}

// stuck reports whether learner r of shard has been behind for longer
// than Settings.LearnerTimeout: without progress while its shard was led
// (View.LearnerSince) for longer than that, and not caught up (caughtUp)
// by a fresh report of its node. A learner with no such time is not
// stuck; nor is one whose node's report is stale right now (caughtUp
// could not tell a learner waiting for its promotion from one behind).
func (p *planner) stuck(shard ids.ShardID, r *concordpb.ReplicaDescriptor) bool {
	since, ok := p.v.LearnerSince[shard][ids.ReplicaID(r.GetReplicaId())]
	rep, reported := p.v.Reports[ids.NodeID(r.GetNodeId())]
	return ok && p.s.LearnerTimeout > 0 && p.v.Now.Sub(since) > p.s.LearnerTimeout &&
		reported && rep.Fresh(p.v.Now, p.s) && !p.caughtUp(shard, r)
}

// avoided reports whether a stuck learner of shard was removed from node
// no longer than Settings.LearnerTimeout ago (View.StuckLearners): no new
// replica of shard goes there meanwhile.
func (p *planner) avoided(shard ids.ShardID, node ids.NodeID) bool {
	at, ok := p.v.StuckLearners[shard][node]
	return ok && p.s.LearnerTimeout > 0 && p.v.Now.Sub(at) <= p.s.LearnerTimeout
}

// with is a step of kind on existing replica r of c's shard.
func (c shardView) with(kind StepKind, r *concordpb.ReplicaDescriptor) Step {
	s := c.base(kind)
	s.Replica, s.ReplicaNode = ids.ReplicaID(r.GetReplicaId()), ids.NodeID(r.GetNodeId())
	if kind == StepRemoveReplica {
		s.MinVoters = c.want
	}
	return s
}

// removeReplica removes, in this order: a learner on a node that is not
// good (dead, leaving, replaced, removed, unknown: it will never be
// promoted); a stuck learner (planner.stuck; the step says so, Step.Stuck,
// so that the executor records its node); a voter on a node that is not live, once the shard has its
// full count of good voters again (its replacement was promoted); a voter
// on a leaving or removed node (dead or alive), once the shard has as many
// good voters as it can get (its count, or every eligible node); a good
// voter in excess of the count, the one predicted (planner.predictVictims:
// a suspect node first, then the node that will hold the most once the
// moves under way are done, then the higher id). A voter is removed only if the voters left keep a live quorum
// (canRemove), and never while it leads: its leadership is transferred
// first.
func (p *planner) removeReplica(c shardView) (Step, bool) {
	var dead, leaving, spare []*concordpb.ReplicaDescriptor
	for _, r := range sortedReplicas(c.d) {
		j := p.nodes[ids.NodeID(r.GetNodeId())]
		switch {
		case !isVoter(r) && !j.good:
			return c.with(StepRemoveReplica, r), true
		case !isVoter(r) && p.stuck(c.id, r):
			s := c.with(StepRemoveReplica, r)
			s.Stuck = true
			return s, true
		case !isVoter(r):
		case !j.live && !p.departing(ids.NodeID(r.GetNodeId())):
			dead = append(dead, r)
		case !j.good:
			leaving = append(leaving, r)
		default:
			spare = append(spare, r)
		}
	}
	if c.goodVoters >= c.want {
		if s, ok := p.removeFirst(c, dead); ok {
			return s, true
		}
	}
	if c.goodVoters >= max(1, min(c.want, p.eligible)) {
		if s, ok := p.removeFirst(c, leaving); ok {
			return s, true
		}
	}
	if c.goodVoters > c.want {
		// The predicted victims first, so that the removal takes what
		// balancing counted on (planner.predictVictims); then the others,
		// in the same order, should none of those be removable.
		p.sortSpare(spare)
		return p.removeFirst(c, append(slices.Clone(p.victims[c.id]), spare...))
	}
	return Step{}, false
}

// departing reports whether node is recorded LEAVING or REMOVED: the
// operator asked for its replicas to go, so they go as soon as the shard
// has as many good voters as it can get, even if the node died meanwhile.
func (p *planner) departing(node ids.NodeID) bool {
	st := p.recorded[node]
	return st == concordpb.NodeState_NODE_LEAVING || st == concordpb.NodeState_NODE_REMOVED
}

// removeFirst removes the first of candidates that canRemove allows; if it
// is on the leader's node, it plans the leader's transfer instead (the
// removal follows in a later round), to a caught-up voter only: raft
// abandons a transfer to one that lags, and the rule would plan it again
// every round. With no such voter the leader's replica is passed over
// and the next candidate goes, as CockroachDB's allocator removes another
// replica when the lease cannot move; with no other candidate, nothing
// (the shard waits for a voter to catch up or a node to come back).
func (p *planner) removeFirst(c shardView, candidates []*concordpb.ReplicaDescriptor) (Step, bool) {
	for _, r := range candidates {
		if !p.canRemove(c.d, r) {
			continue
		}
		if ids.NodeID(r.GetNodeId()) != c.via {
			return c.with(StepRemoveReplica, r), true
		}
		if s, ok := p.transferAway(c, true); ok {
			return s, true
		}
	}
	return Step{}, false
}

// canRemove reports whether removing r leaves d with at least one voter
// and a quorum of its voters on live nodes; and, if r's node answers, a
// quorum of them on nodes that answer too (judgement.answering). Live
// counts SUSPECT nodes, which may be dead: removing a voter that answers
// so that the quorum left needs a suspect one (n4 leaving, {n1, n3
// suspect, n4} down to {n1, n3}) can turn a shard that commits into one
// that never commits again once n3 is declared dead. Removing a voter
// that does not answer never costs an answering vote. Removing a learner
// always may.
func (p *planner) canRemove(d *concordpb.ShardDescriptor, r *concordpb.ReplicaDescriptor) bool {
	if !isVoter(r) {
		return true
	}
	voters, live, answering := 0, 0, 0
	for _, o := range d.GetReplicas() {
		if o == r || !isVoter(o) {
			continue
		}
		voters++
		j := p.nodes[ids.NodeID(o.GetNodeId())]
		if j.live {
			live++
		}
		if j.answering {
			answering++
		}
	}
	if voters == 0 || live < quorum(voters) {
		return false
	}
	return !p.nodes[ids.NodeID(r.GetNodeId())].answering || answering >= quorum(voters)
}

// moveLeader: a leader on a node that is not eligible (SUSPECT, LEAVING or
// stopping) hands its leadership to a voter on an eligible node, one that
// lags if none is caught up: it may catch up while raft waits on the
// transfer, and a leader left on a node about to go is worse than a failed
// try.
func (p *planner) moveLeader(c shardView) (Step, bool) {
	if j, known := p.nodes[c.via]; !known || j.eligible {
		return Step{}, false
	}
	return p.transferAway(c, false)
}

// transferAway plans a leadership transfer from c's leader to the voter,
// on an eligible node and running (a fresh report lists it), caught up if
// any is (raft abandons a transfer to a replica that lags) and only if
// caughtUpOnly, whose node leads the fewest shards; ties to the lower
// node id. False if there is no such voter.
func (p *planner) transferAway(c shardView, caughtUpOnly bool) (Step, bool) {
	var best *concordpb.ReplicaDescriptor
	var bestUp bool
	for _, r := range sortedReplicas(c.d) {
		node := ids.NodeID(r.GetNodeId())
		if !isVoter(r) || node == c.via || !p.nodes[node].eligible || p.replicaStatus(c.id, r) == nil {
			continue
		}
		up := p.caughtUp(c.id, r)
		if caughtUpOnly && !up {
			continue
		}
		b := ids.NodeID(best.GetNodeId())
		if best == nil || cmp.Or(-cmp.Compare(b2i(up), b2i(bestUp)), cmp.Compare(p.leads[node], p.leads[b]), cmp.Compare(node, b)) < 0 {
			best, bestUp = r, up
		}
	}
	if best == nil {
		return Step{}, false
	}
	p.leads[c.via]--
	p.leads[ids.NodeID(best.GetNodeId())]++
	return c.with(StepTransferLeader, best), true
}

// sortedReplicas returns d's replicas by replica id, leaving d untouched.
func sortedReplicas(d *concordpb.ShardDescriptor) []*concordpb.ReplicaDescriptor {
	return slices.SortedFunc(slices.Values(d.GetReplicas()), func(a, b *concordpb.ReplicaDescriptor) int {
		return cmp.Compare(a.GetReplicaId(), b.GetReplicaId())
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
