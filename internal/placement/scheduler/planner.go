package scheduler

import (
	"cmp"
	"slices"
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

	members int // nodes UP or SUSPECT
	// eligible counts the nodes UP, stopping ones included (they are
	// expected back): the nodes a shard could have replicas on.
	eligible int
	// low are the nodes held low on space (LowOnSpace): eligible still
	// (they serve, lead and keep their replicas), but no new replica goes
	// there: a node under its reserve refuses the snapshot that would
	// fill it (the transport's SnapshotDiskMargin). Nor to a node where a
	// shard's snapshot would not fit above the reserve (fits).
	low map[ids.NodeID]bool
	// size is, per shard, its size as fresh reports give it (ShardSizes;
	// missing: unknown), and incoming, per node, the bytes of the
	// replicas on their way there: learners not caught up, adds in flight
	// and those planned this round. See fits.
	size     map[ids.ShardID]uint64
	incoming map[ids.NodeID]uint64

	replicas map[ids.NodeID]int // replicas per node (any role), planned learners included
	// leaving counts, per node, the replicas that moves under way will
	// remove from it: each shard's voters in excess of its count, predicted
	// (victims) as the removal rule will pick them, plus the sources of the
	// balancing moves planned this round. replicas - leaving is the count
	// a node will have once every move under way is done: what balancing
	// balances, so it never plans a move a move in flight already makes.
	leaving map[ids.NodeID]int
	// victims are, per shard with more good replicas than it wants, the
	// voters the removal rule will take, in the order it takes them.
	victims map[ids.ShardID][]*concordpb.ReplicaDescriptor
	// adding counts, per shard, the learners on good nodes that steps in
	// flight are adding and the descriptor does not list yet.
	adding map[ids.ShardID]int
	leads  map[ids.NodeID]int // leaderships per node, planned transfers included
	moves  map[ids.NodeID]int // moves per node (see Settings.MaxMovesPerNode)
	vias   map[ids.ShardID]ids.NodeID
	// repairing: some repair that can go on is pending or under way (see
	// noteRepair); balancing then plans no new move, so repair has the
	// caps to itself.
	repairing bool
	// inherited are the shards that may be running a step an earlier
	// placement leader started (see inheritedShards): busy, their step
	// unknown.
	inherited map[ids.ShardID]bool
}

func newPlanner(v View) *planner {
	p := &planner{
		v: v, s: v.Settings, leaders: Leaders(v), shards: sortedShards(v),
		nodes: map[ids.NodeID]judgement{}, recorded: map[ids.NodeID]concordpb.NodeState{},
		wiped: replacements(v), low: LowOnSpace(v),
		replicas: map[ids.NodeID]int{}, leaving: map[ids.NodeID]int{}, leads: map[ids.NodeID]int{}, moves: map[ids.NodeID]int{},
		vias: map[ids.ShardID]ids.NodeID{}, victims: map[ids.ShardID][]*concordpb.ReplicaDescriptor{},
		adding: map[ids.ShardID]int{}, size: ShardSizes(v), incoming: map[ids.NodeID]uint64{},
	}
	p.nameLeaders()
	p.inherited = p.inheritedShards()
	for _, n := range sortedNodes(v) {
		id := ids.NodeID(n.GetNodeId())
		j := judge(v, n)
		p.order, p.nodes[id], p.recorded[id] = append(p.order, id), j, n.GetState()
		if j.good {
			p.members++
		}
		if j.eligible || j.stopping {
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
		p.countInFlight(shard, s)
	}
	for k := range p.unrecordedReplicas() {
		moving[pair{k.shard, k.node}] = true
	}
	p.countIncoming()
	for _, d := range p.shards {
		p.predictVictims(d)
	}
	p.evenVictims()
	for shard, victims := range p.victims {
		for _, r := range victims {
			moving[pair{shard, ids.NodeID(r.GetNodeId())}] = true
		}
	}
	for k := range moving {
		p.moves[k.node]++
	}
	return p
}

// predictVictims records, for shard d, the good voters the removal rule
// will take once its learners are promoted: as many as d has good
// replicas (learners included) beyond its count, chosen as removeReplica
// chooses (a suspect node first, then the node that will hold the most
// once the removals already predicted are done, then the higher id). The
// shards are visited in id order, each prediction lowering its node's
// count for the next, so excess spread over several shards is taken from
// the most loaded nodes, one replica each, rather than all from one.
func (p *planner) predictVictims(d *concordpb.ShardDescriptor) {
	shard := ids.ShardID(d.GetShardId())
	c := p.classify(d, p.via(shard))
	excess := c.good + p.adding[shard] - c.want
	if c.want == 0 || excess <= 0 {
		return
	}
	var spare []*concordpb.ReplicaDescriptor
	var removing *concordpb.ReplicaDescriptor
	for _, r := range sortedReplicas(d) {
		if !isVoter(r) || !p.nodes[ids.NodeID(r.GetNodeId())].good {
			continue
		}
		if p.removing(shard, r) {
			removing = r // already on its way out: the first victim
			continue
		}
		spare = append(spare, r)
	}
	p.sortSpare(spare)
	if removing != nil {
		spare = append([]*concordpb.ReplicaDescriptor{removing}, spare...)
	}
	victims := spare[:min(excess, len(spare))]
	for _, r := range victims {
		p.leaving[ids.NodeID(r.GetNodeId())]++
	}
	p.victims[shard] = victims
}

// evenVictims improves the predicted victims until no change helps. The
// shard-by-shard prediction can pile the removals on a few nodes (a node
// holding only shards whose other holders are as loaded is never picked);
// balancing would then see those nodes short and move replicas onto them,
// between old nodes, which other removals would have spared. So while
// some node that is a victim will hold at least two fewer than a node
// reachable from it, the victim role is passed along the chain: in a
// shard where the low node is a victim, to another of its voters, which
// hands on its own victim role in another shard, and so on, up to the
// high node. Only the chain's ends change counts (one more on the low
// node, one fewer on the high), so the sum of the squared counts falls
// and it ends; when no chain is left, no other choice of victims is more
// even. A victim being removed already, or on a suspect node, stays.
func (p *planner) evenVictims() {
	for p.passVictim() {
	}
}

// hop is one link of a victim chain: in shard, the victim at index i (on
// the previous node) becomes voter r.
type hop struct {
	from  ids.NodeID
	shard ids.ShardID
	i     int
	r     *concordpb.ReplicaDescriptor
}

// passVictim finds one chain (evenVictims) and applies it; false if none.
func (p *planner) passVictim() bool {
	lows := slices.Clone(p.order)
	slices.SortStableFunc(lows, func(a, b ids.NodeID) int { return cmp.Compare(p.final(a), p.final(b)) })
	for _, low := range lows {
		if p.leaving[low] == 0 {
			continue // a victim nowhere: nothing to hand on
		}
		if chain := p.victimChain(low); chain != nil {
			for _, h := range chain {
				p.victims[h.shard][h.i] = h.r
				p.leaving[h.from]--
				p.leaving[ids.NodeID(h.r.GetNodeId())]++
			}
			return true
		}
	}
	return false
}

// victimChain searches breadth first, in id order, for a chain from low
// to a node that will hold at least two more; nil if there is none. A
// chain uses each shard once.
func (p *planner) victimChain(low ids.NodeID) []hop {
	prev := map[ids.NodeID]hop{low: {}}
	queue := []ids.NodeID{low}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		used := map[ids.ShardID]bool{}
		for n := a; n != low; n = prev[n].from {
			used[prev[n].shard] = true
		}
		for _, d := range p.shards {
			shard := ids.ShardID(d.GetShardId())
			victims := p.victims[shard]
			i := slices.IndexFunc(victims, func(r *concordpb.ReplicaDescriptor) bool { return ids.NodeID(r.GetNodeId()) == a })
			if used[shard] || i < 0 || p.removing(shard, victims[i]) || p.nodes[a].state == concordpb.NodeState_NODE_SUSPECT {
				continue
			}
			for _, r := range sortedReplicas(d) {
				b := ids.NodeID(r.GetNodeId())
				j := p.nodes[b]
				if _, seen := prev[b]; seen || !isVoter(r) || !j.good || j.state == concordpb.NodeState_NODE_SUSPECT || slices.Contains(victims, r) {
					continue
				}
				prev[b] = hop{from: a, shard: shard, i: i, r: r}
				if p.final(b) >= p.final(low)+2 {
					var chain []hop
					for n := b; n != low; n = prev[n].from {
						chain = append(chain, prev[n])
					}
					return chain
				}
				queue = append(queue, b)
			}
		}
	}
	return nil
}

// removing reports whether a step in flight is removing replica r of shard.
func (p *planner) removing(shard ids.ShardID, r *concordpb.ReplicaDescriptor) bool {
	s, ok := p.v.InFlightSteps[shard]
	return ok && s.Kind == StepRemoveReplica && s.Replica == ids.ReplicaID(r.GetReplicaId())
}

// countInFlight counts step s, still executing on shard, as done where
// the descriptors cannot show it yet: a replica being added counts on its
// target (and, a learner on a good node, towards its shard's excess), a
// leadership being transferred on its new node. Without it, a round
// planned while a step runs would plan the same change again elsewhere.
func (p *planner) countInFlight(shard ids.ShardID, s Step) {
	var d *concordpb.ShardDescriptor
	for _, sd := range p.shards {
		if ids.ShardID(sd.GetShardId()) == shard {
			d = sd
		}
	}
	if d == nil {
		return
	}
	switch s.Kind {
	case StepAddLearner, StepReplace:
		if s.Target == 0 || replicaOn(d, s.Target) != nil {
			return
		}
		p.replicas[s.Target]++
		p.addIncoming(s.Target, shard)
		if s.Kind == StepAddLearner && p.nodes[s.Target].good {
			p.adding[shard]++
		}
	case StepTransferLeader:
		if via := p.via(shard); via != 0 && via == s.Via && s.ReplicaNode != 0 && s.ReplicaNode != via {
			p.leads[via]--
			p.leads[s.ReplicaNode]++
		}
	}
}

// sortSpare orders good voters for removal: a suspect node first, then
// the node with the highest count once the removals under way are done,
// then the higher id.
func (p *planner) sortSpare(spare []*concordpb.ReplicaDescriptor) {
	slices.SortStableFunc(spare, func(a, b *concordpb.ReplicaDescriptor) int {
		na, nb := ids.NodeID(a.GetNodeId()), ids.NodeID(b.GetNodeId())
		return cmp.Or(
			-cmp.Compare(p.nodes[na].state, p.nodes[nb].state), // SUSPECT (2) before UP (0)
			-cmp.Compare(p.final(na), p.final(nb)),
			-cmp.Compare(na, nb),
		)
	})
}

// final is node's replica count once the moves under way and those
// planned so far this round are done.
func (p *planner) final(node ids.NodeID) int {
	return p.replicas[node] - p.leaving[node]
}

// via is the node to send shard's step to: leaderOf, else the leader its
// followers name in fresh reports; zero if unknown. The followers matter
// for a SUSPECT leader: its own reports are stale by then (ReportMaxAge is
// shorter than SuspectAfter), but it may still lead, cut off from the
// placement leader only, and its leadership must move.
//
// A leader on a node known to be gone (gone) is no leader to send to: a
// REPLACED node's address now belongs to its successor, which forwards
// the step and fails it, and a DEAD or REMOVED node answers nothing. Its
// last report stays fresh for up to ReportMaxAge, and its followers keep
// naming it until their election timeout, so without this every round
// of a wiped leader's shard's wait for its election sent steps there to
// fail (79 failed attempts in one 3 s rebuild). Such a shard gets no step
// until a fresh report names a live leader.
func (p *planner) via(shard ids.ShardID) ids.NodeID {
	n := leaderOf(p.v, p.leaders, shard)
	if n == 0 || p.gone(n) {
		n = p.vias[shard]
	}
	if p.gone(n) {
		return 0
	}
	return n
}

// gone reports whether node is known and not live (DEAD, REPLACED,
// REMOVED, or LEAVING and dead): whatever it claims, it leads nothing a
// step can be sent to. A node the view does not know is not judged here.
func (p *planner) gone(node ids.NodeID) bool {
	j, known := p.nodes[node]
	return known && !j.live
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

// busy reports whether shard has a step executing, this placement
// leader's or (inherited) maybe an earlier one's.
func (p *planner) busy(shard ids.ShardID) bool {
	_, running := p.v.InFlightSteps[shard]
	return running || p.v.InFlight[shard] || p.inherited[shard]
}

// inheritedShards returns, while an earlier placement leader's steps may
// still run, the shards whose membership is mid-change: a learner in the
// descriptor (an add-learner's promotion, which the executor runs in the
// same step, may be under way), or a fresh report giving a descriptor
// epoch newer than the view's (a change applied that the view does not
// show yet). The executor's record of the steps it runs
// (View.InFlightSteps) lives in its memory, so a new placement leader
// starts without the old one's; a step it planned on such a shard would
// race the old one's (both planned at one epoch, one fails; or a learner
// removed while it is being promoted). Those steps end within
// Settings.StepTimeout of their start, and every one began before this
// placement leader's watch (View.ObservedSince): after that, the
// descriptors and reports show all they did. Nil outside the window, or
// when ObservedSince is unknown.
func (p *planner) inheritedShards() map[ids.ShardID]bool {
	since := p.v.ObservedSince
	if since.IsZero() || p.s.StepTimeout <= 0 || p.v.Now.Sub(since) >= p.s.StepTimeout {
		return nil
	}
	out := map[ids.ShardID]bool{}
	epoch := p.reportedEpochs()
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		if epoch[shard] > d.GetEpoch() {
			out[shard] = true
		}
		for _, r := range d.GetReplicas() {
			if !isVoter(r) {
				out[shard] = true
			}
		}
	}
	return out
}

// shardNode is a shard's replica on a node.
type shardNode struct {
	shard ids.ShardID
	node  ids.NodeID
}

// unrecordedReplicas returns, while an earlier placement leader's steps
// may still run (inheritedShards' window), the replicas a fresh report
// shows that the view's descriptor of their shard does not list: a
// learner an old step added whose result the meta shard does not record
// yet (the old leader died in between). Each is a move on its node: the
// old leader counted it against the node's cap, and a new leader that
// did not would send that node more than MaxMovesPerNode at once. Outside
// the window such a replica is a stray awaiting collection, not a move.
func (p *planner) unrecordedReplicas() map[shardNode]bool {
	if p.inherited == nil {
		return nil
	}
	listed := map[ids.ShardID]*concordpb.ShardDescriptor{}
	for _, d := range p.shards {
		listed[ids.ShardID(d.GetShardId())] = d
	}
	out := map[shardNode]bool{}
	for node, rep := range p.v.Reports {
		if !rep.Fresh(p.v.Now, p.s) {
			continue
		}
		for _, rs := range rep.Replicas {
			shard := ids.ShardID(rs.GetShardId())
			if d, ok := listed[shard]; ok && replicaOn(d, node) == nil {
				out[shardNode{shard, node}] = true
			}
		}
	}
	return out
}

// reportedEpochs returns, per shard, the newest descriptor epoch a fresh
// report gives.
func (p *planner) reportedEpochs() map[ids.ShardID]uint64 {
	out := map[ids.ShardID]uint64{}
	for _, rep := range p.v.Reports {
		if !rep.Fresh(p.v.Now, p.s) {
			continue
		}
		for _, rs := range rep.Replicas {
			shard := ids.ShardID(rs.GetShardId())
			out[shard] = max(out[shard], rs.GetDescriptorEpoch())
		}
	}
	return out
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

// noteRepair records whether shard d, with step s planned for it this
// round or in flight (nil: none), is being repaired rather than balanced:
// a repair step (a replacement, the removal of a replica on a node that is
// not good, a leadership moved off a node that is not eligible), or fewer
// good voters than it wants while that repair can go on (repairable). A
// shard without a live quorum can be repaired by nothing and does not
// count; a busy shard whose step is unknown (View.InFlight alone) does.
func (p *planner) noteRepair(d *concordpb.ShardDescriptor, s *Step) {
	c := p.classify(d, p.via(ids.ShardID(d.GetShardId())))
	if c.liveVoters < quorum(c.voters) {
		return
	}
	if s != nil && p.repairStep(*s) {
		p.repairing = true
		return
	}
	if c.want == 0 || c.goodVoters >= c.want {
		return
	}
	if p.repairable(c, s) {
		p.repairing = true
	}
}

// repairable reports whether shard c, short of good voters, has a repair
// that can go on: a learner being added or promoted (s), a learner on an
// eligible node that can be promoted (caught up, or not low on space: a
// low node refuses the snapshot a learner behind needs), or a node the
// add-learner rule would take (canTakeShard, the very test leastLoaded
// makes: fits included).
// A shard that can be repaired nowhere (every node without its replica
// low on space, without room for the shard above its reserve (fits) or
// avoided for it, a stuck learner of it removed from there lately, or at
// a cap that never frees: MaxMovesPerNode zero) waits
// for the cluster to change and holds nothing up meanwhile: were it to
// count, balancing, leader balancing included, would stop in the whole
// cluster for as long as it lasts. A node at its move cap is no target
// either: balancing cannot take a slot from it (replicaMove asks canTake
// of its destination, underCap of its source), and repair plans first in
// the round in which a slot frees.
func (p *planner) repairable(c shardView, s *Step) bool {
	if s != nil && (s.Kind == StepAddLearner || s.Kind == StepPromoteLearner) {
		return true
	}
	for _, r := range c.d.GetReplicas() {
		node := ids.NodeID(r.GetNodeId())
		if !isVoter(r) && p.nodes[node].eligible && (!p.low[node] || p.caughtUp(c.id, r)) {
			return true
		}
	}
	for _, id := range p.order {
		if p.canTakeShard(c.d, id) {
			return true
		}
	}
	return false
}

// repairStep reports whether s repairs rather than balances (noteRepair).
func (p *planner) repairStep(s Step) bool {
	switch s.Kind {
	case StepReplace:
		return true
	case StepRemoveReplica:
		return !p.nodes[s.ReplicaNode].good
	case StepTransferLeader:
		return !p.nodes[s.Via].eligible
	}
	return false
}

// calm reports whether balancing may plan new moves: no node is SUSPECT
// (about to come back or to be declared dead, which would change the
// counts) and no shard is being repaired. Moves already under way go on
// either way: their promotions and removals are repair-rule steps.
func (p *planner) calm() bool {
	for _, j := range p.nodes {
		if j.state == concordpb.NodeState_NODE_SUSPECT {
			return false
		}
	}
	return !p.repairing
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
