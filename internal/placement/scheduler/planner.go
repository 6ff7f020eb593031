package scheduler

import (
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// metaShard is shard 0, the placement service's own shard (routing.MetaShard).
const metaShard ids.ShardID = 0

// planner is one Schedule call's working state: the view, digested once,
// and the counts that the steps planned so far in this round change (so
// that two shards do not both pick the same least-loaded node past its
// cap).
type planner struct {
	v        View
	s        Settings
	leaders  map[ids.ShardID]Leader
	shards   []*concordpb.ShardDescriptor // ascending id
	order    []ids.NodeID                 // known nodes, ascending id
	nodes    map[ids.NodeID]judgement
	recorded map[ids.NodeID]concordpb.NodeState
	wiped    []move // REPLACED nodes whose successor is UP

	members  int // nodes UP or SUSPECT
	eligible int // nodes UP

	replicas map[ids.NodeID]int // replicas per node (any role), planned learners included
	leads    map[ids.NodeID]int // leaderships per node, planned transfers included
	moves    map[ids.NodeID]int // moves per node (see Settings.MaxMovesPerNode)
	vias     map[ids.ShardID]ids.NodeID
}

func newPlanner(v View) *planner {
	p := &planner{
		v: v, s: v.Settings, leaders: Leaders(v), shards: sortedShards(v),
		nodes: map[ids.NodeID]judgement{}, recorded: map[ids.NodeID]concordpb.NodeState{},
		wiped:    replacements(v),
		replicas: map[ids.NodeID]int{}, leads: map[ids.NodeID]int{}, moves: map[ids.NodeID]int{},
		vias: map[ids.ShardID]ids.NodeID{},
	}
	p.nameLeaders()
	for _, n := range sortedNodes(v) {
		id := ids.NodeID(n.GetNodeId())
		j := judge(v, n)
		p.order, p.nodes[id], p.recorded[id] = append(p.order, id), j, n.GetState()
		if j.good {
			p.members++
		}
		if j.eligible {
			p.eligible++
		}
	}
	type pair struct {
		shard ids.ShardID
		node  ids.NodeID
	}
	moving := map[pair]bool{}
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		for _, r := range d.GetReplicas() {
			node := ids.NodeID(r.GetNodeId())
			p.replicas[node]++
			if r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER {
				moving[pair{shard, node}] = true
			}
		}
		if via := p.via(shard); via != 0 {
			p.leads[via]++
		}
	}
	for shard, s := range v.InFlightSteps {
		switch s.Kind {
		case StepReplace, StepAddLearner, StepPromoteLearner, StepRemoveReplica:
			for _, node := range []ids.NodeID{s.Target, s.ReplicaNode} {
				if node != 0 {
					moving[pair{shard, node}] = true
				}
			}
		}
	}
	for k := range moving {
		p.moves[k.node]++
	}
	return p
}

// via is the node to send shard's step to: leaderOf, else the leader its
// followers name in fresh reports; zero if unknown. The followers matter
// for a SUSPECT leader: its own reports are stale by then (ReportMaxAge is
// shorter than SuspectAfter), but it may still lead, cut off from the
// placement leader only, and its leadership must move.
func (p *planner) via(shard ids.ShardID) ids.NodeID {
	if n := leaderOf(p.v, p.leaders, shard); n != 0 {
		return n
	}
	return p.vias[shard]
}

// nameLeaders fills p.vias with the leader fresh follower reports name for
// each shard: of several, the one named in the highest term, then in the
// newest report, then by the lower reporting node. A name the shard's
// descriptor does not list is ignored.
func (p *planner) nameLeaders() {
	type claim struct {
		replica, term uint64
		at            time.Time
	}
	best := map[ids.ShardID]claim{}
	for _, node := range sortedKeys(p.v.Reports) {
		rep := p.v.Reports[node]
		if !rep.Fresh(p.v.Now, p.s) {
			continue
		}
		for _, rs := range rep.Replicas {
			shard := ids.ShardID(rs.GetShardId())
			c, ok := best[shard]
			if rs.GetLeaderReplicaId() == 0 || (ok && (rs.GetTerm() < c.term || (rs.GetTerm() == c.term && !rep.At.After(c.at)))) {
				continue
			}
			best[shard] = claim{replica: rs.GetLeaderReplicaId(), term: rs.GetTerm(), at: rep.At}
		}
	}
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		c, ok := best[shard]
		if !ok {
			continue
		}
		for _, r := range d.GetReplicas() {
			if r.GetReplicaId() == c.replica {
				p.vias[shard] = ids.NodeID(r.GetNodeId())
			}
		}
	}
}

// busy reports whether shard has a step executing.
func (p *planner) busy(shard ids.ShardID) bool {
	_, running := p.v.InFlightSteps[shard]
	return running || p.v.InFlight[shard]
}

// want is the number of replicas shard should have; zero turns the
// count-based rules off.
func (p *planner) want(shard ids.ShardID) int {
	if p.s.Replication <= 0 {
		return 0
	}
	if shard == metaShard && p.s.MetaReplication > 0 && p.members >= p.s.MetaReplication {
		return p.s.MetaReplication
	}
	return p.s.Replication
}

// underCap reports whether node may take part in one more move.
func (p *planner) underCap(node ids.NodeID) bool {
	return p.moves[node] < p.s.MaxMovesPerNode
}

// settled reports whether the cluster has no repair work: no shard step
// planned this round (marks aside), nothing in flight, no learner anywhere,
// no node SUSPECT (about to come back or to be declared dead). Balancing
// waits for that, so it never competes with repair for the move caps and
// never plans from counts a repair is about to change.
func (p *planner) settled(steps []Step) bool {
	for _, j := range p.nodes {
		if j.state == concordpb.NodeState_NODE_SUSPECT {
			return false
		}
	}
	for _, s := range steps {
		if s.Kind != StepMarkNode {
			return false
		}
	}
	for _, busy := range p.v.InFlight {
		if busy {
			return false
		}
	}
	if len(p.v.InFlightSteps) > 0 {
		return false
	}
	for _, d := range p.shards {
		for _, r := range d.GetReplicas() {
			if r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER {
				return false
			}
		}
	}
	return true
}

// replicaStatus returns the status node last reported, in a fresh report,
// for replica r of shard; nil if none.
func (p *planner) replicaStatus(shard ids.ShardID, r *concordpb.ReplicaDescriptor) *concordpb.ReplicaStatus {
	rep, ok := p.v.Reports[ids.NodeID(r.GetNodeId())]
	if !ok || !rep.Fresh(p.v.Now, p.s) {
		return nil
	}
	for _, rs := range rep.Replicas {
		if ids.ShardID(rs.GetShardId()) == shard && rs.GetReplicaId() == r.GetReplicaId() {
			return rs
		}
	}
	return nil
}

// commitIndex is the highest commit index any fresh report gives for
// shard: the leader's, or close to it.
func (p *planner) commitIndex(shard ids.ShardID) uint64 {
	var c uint64
	for _, rep := range p.v.Reports {
		if !rep.Fresh(p.v.Now, p.s) {
			continue
		}
		for _, rs := range rep.Replicas {
			if ids.ShardID(rs.GetShardId()) == shard {
				c = max(c, rs.GetCommitIndex())
			}
		}
	}
	return c
}
