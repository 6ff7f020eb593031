package scheduler

import (
	"cmp"
	"slices"

	"github.com/concord-kv/concord/internal/ids"
)

// Balancing runs on a calm cluster (planner.calm: no node suspect, no
// shard being repaired), among eligible nodes, on the shards no rule gave
// a step this round, and alongside the moves already under way: it
// balances the counts the nodes will have once those are done
// (planner.final: the replicas the descriptors list, learners included,
// less the excess voters their shards will lose), so it neither waits for
// a move to finish before planning the next nor plans one a move under
// way already makes. A count is "within one of the mean" when
// |count - total/N| <= 1, computed as |count*N - total| <= N so no
// rounding enters. Nothing moves while every count is within one: a
// balanced cluster makes no moves, however long it runs. Every move goes
// from a node to one that will hold at least two fewer, so the sum of the
// squared counts falls with each and balancing ends.

// balanceReplicas plans replica moves while some eligible node's final
// count is not within one of the mean: a learner on the low node, which
// the repair rules then promote, after which the shard has one voter too
// many and loses the one predicted (planner.predictVictims: the most
// loaded holder, counting the moves under way). A round plans as many
// moves as the per-node caps allow (Settings.MaxMovesPerNode, counting
// the moves under way and the removal each new move will make at its
// source), each on its own shard.
func (p *planner) balanceReplicas(stepped map[ids.ShardID]bool) []Step {
	if p.s.Replication <= 0 {
		return nil
	}
	elig := p.eligibleNodes()
	var out []Step
	for !withinOne(elig, p.finals(elig)) {
		s, src, ok := p.replicaMove(elig, stepped)
		if !ok {
			break
		}
		stepped[s.Shard] = true
		p.leaving[src]++
		p.moves[src]++
		out = append(out, s)
	}
	return out
}

// finals maps each of nodes to its final count (planner.final).
func (p *planner) finals(nodes []ids.NodeID) map[ids.NodeID]int {
	out := make(map[ids.NodeID]int, len(nodes))
	for _, id := range nodes {
		out[id] = p.final(id)
	}
	return out
}

// replicaMove finds one move: from the node with the highest final count
// to the one with the lowest that will hold at least two fewer, both under
// their caps and the destination not low on space, trying the pairs in
// that order; the shard is the lowest-numbered movable one (movable: it
// fits on the destination, among others), preferring shards the source
// does not lead (their removal then needs no transfer).
func (p *planner) replicaMove(elig []ids.NodeID, stepped map[ids.ShardID]bool) (Step, ids.NodeID, bool) {
	finals := p.finals(elig)
	for _, src := range byCount(elig, finals, true) {
		if !p.underCap(src) {
			continue
		}
		for _, dst := range byCount(elig, finals, false) {
			if !p.canTake(dst) || finals[src]-finals[dst] < 2 {
				continue
			}
			if c, ok := p.movable(src, dst, stepped); ok {
				return p.planAdd(c, dst), src, true
			}
		}
	}
	return Step{}, 0, false
}

// movable is the shard to move from src to dst: healthy (a known leader,
// nothing in flight, no step this round, exactly its count of replicas,
// all voters on eligible nodes), with a replica on src and none on dst,
// room for it on dst above dst's reserve (planner.fits), and not avoided
// on dst (planner.avoided: a stuck learner of it left dst lately).
func (p *planner) movable(src, dst ids.NodeID, stepped map[ids.ShardID]bool) (shardView, bool) {
	var fallback *shardView
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		via := p.via(shard)
		if stepped[shard] || p.busy(shard) || via == 0 || replicaOn(d, src) == nil || replicaOn(d, dst) != nil || !p.fits(shard, dst) || p.avoided(shard, dst) {
			continue
		}
		c := p.classify(d, via)
		if c.want == 0 || len(d.GetReplicas()) != c.want || c.voters != c.want || !p.allEligible(c) {
			continue
		}
		if via != src {
			return c, true
		}
		if fallback == nil {
			fallback = &c
		}
	}
	if fallback != nil {
		return *fallback, true
	}
	return shardView{}, false
}

func (p *planner) allEligible(c shardView) bool {
	for _, r := range c.d.GetReplicas() {
		if !p.nodes[ids.NodeID(r.GetNodeId())].eligible {
			return false
		}
	}
	return true
}

// balanceLeaders plans leadership transfers while some eligible node's
// leader count is not within one of the mean: from the node leading the
// most to the one leading the fewest (at least two fewer) that holds a
// caught-up voter of one of its shards; several per round, each on a
// shard that has no step this round. It runs in the same round as replica
// balancing: a transfer is one message, and a shard whose voter a move
// removes hands its leadership on (rule 4) to the node leading the
// fewest, which keeps the counts near the mean while replicas move.
//
// When no direct transfer helps (none of the shards the loaded nodes lead
// has a voter on the node short of leaderships), it plans a chain
// (leaderChain): the loaded node hands a shard to a node in between,
// which hands another to the next, and so on to the short node; only the
// ends' counts change. If no chain exists either, the counts stay as they
// are: leader balance never moves a replica to make a transfer possible
// (replica balancing places replicas by their count alone).
//
// Transfers are not moves (Settings.MaxMovesPerNode counts replicas
// added and removed), so no cap limits them; each goes to a caught-up
// voter on an eligible node, on a shard with nothing in flight and no
// step this round, and moves a leadership from a count to one at least
// two lower, so the sum of the squared counts falls and balancing ends.
func (p *planner) balanceLeaders(stepped map[ids.ShardID]bool) []Step {
	elig := p.eligibleNodes()
	var out []Step
	for !withinOne(elig, p.leads) {
		edges := p.transfers(stepped)
		steps := p.leaderMove(elig, edges)
		if steps == nil {
			steps = p.leaderChain(elig, edges)
		}
		if steps == nil {
			break
		}
		for _, s := range steps {
			stepped[s.Shard] = true
			p.leads[s.Via]--
			p.leads[s.ReplicaNode]++
		}
		out = append(out, steps...)
	}
	return out
}

// leaderMove finds one direct transfer among edges (planner.transfers):
// from the node leading the most to the one leading the fewest that leads
// at least two fewer and holds a caught-up voter of one of its shards,
// trying the pairs in that order; the shard is the lowest-numbered such.
// Nil if there is none.
func (p *planner) leaderMove(elig []ids.NodeID, edges map[ids.NodeID][]Step) []Step {
	for _, src := range byCount(elig, p.leads, true) {
		for _, dst := range byCount(elig, p.leads, false) {
			if p.leads[src]-p.leads[dst] < 2 {
				continue
			}
			for _, e := range edges[src] {
				if e.ReplicaNode == dst {
					return []Step{e}
				}
			}
		}
	}
	return nil
}

// leaderChain finds a chain of transfers for when no direct one helps:
// a shortest path src → n1 → … → dst in the graph edges, where a → b if a
// leads a shard that can hand its leadership to b (planner.transfers), from the
// node leading the most (then the next) to the nearest node leading at
// least two fewer; breadth first, in shard then replica order. Each node
// in between gains one leadership and loses one, so only src and dst
// change, and src - dst >= 2 makes the imbalance strictly smaller. The
// shards are distinct: each is led by its own node of the path. Nil if
// no loaded node reaches such a node.
func (p *planner) leaderChain(elig []ids.NodeID, edges map[ids.NodeID][]Step) []Step {
	for _, src := range byCount(elig, p.leads, true) {
		prev := map[ids.NodeID]Step{src: {}}
		queue := []ids.NodeID{src}
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			for _, e := range edges[a] {
				b := e.ReplicaNode
				if _, seen := prev[b]; seen {
					continue
				}
				prev[b] = e
				if p.leads[src]-p.leads[b] < 2 {
					queue = append(queue, b)
					continue
				}
				var chain []Step
				for n := b; n != src; n = prev[n].Via {
					chain = append(chain, prev[n])
				}
				slices.Reverse(chain)
				return chain
			}
		}
	}
	return nil
}

// transfers lists, per eligible node, the leadership transfers it could
// make: for each shard it leads with nothing in flight and no step this
// round, one to each caught-up voter on another eligible node; in shard
// order, then replica order.
func (p *planner) transfers(stepped map[ids.ShardID]bool) map[ids.NodeID][]Step {
	out := map[ids.NodeID][]Step{}
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		via := p.via(shard)
		if stepped[shard] || p.busy(shard) || via == 0 || !p.nodes[via].eligible {
			continue
		}
		c := p.classify(d, via)
		for _, r := range sortedReplicas(d) {
			node := ids.NodeID(r.GetNodeId())
			if node == via || !isVoter(r) || !p.nodes[node].eligible || !p.caughtUp(shard, r) {
				continue
			}
			out[via] = append(out[via], c.with(StepTransferLeader, r))
		}
	}
	return out
}

// eligibleNodes lists the eligible nodes in id order.
func (p *planner) eligibleNodes() []ids.NodeID {
	var out []ids.NodeID
	for _, id := range p.order {
		if p.nodes[id].eligible {
			out = append(out, id)
		}
	}
	return out
}

// withinOne reports whether every node of nodes has a count within one of
// their mean (trivially so for fewer than two nodes).
func withinOne(nodes []ids.NodeID, count map[ids.NodeID]int) bool {
	n, total := len(nodes), 0
	for _, id := range nodes {
		total += count[id]
	}
	for _, id := range nodes {
		if d := count[id]*n - total; d > n || d < -n {
			return false
		}
	}
	return true
}

// byCount returns nodes ordered by count, descending or ascending, ties to
// the lower id either way.
func byCount(nodes []ids.NodeID, count map[ids.NodeID]int, desc bool) []ids.NodeID {
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b ids.NodeID) int {
		c := cmp.Compare(count[a], count[b])
		if desc {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a, b))
	})
	return out
}
