package scheduler

import (
	"cmp"
	"slices"

	"github.com/concord-kv/concord/internal/ids"
)

// Balancing runs only on a settled cluster (planner.settled) and only among
// eligible nodes. A count is "within one of the mean" when
// |count - total/N| <= 1, computed as |count*N - total| <= N so no
// rounding enters. Nothing moves while every count is within one: a
// balanced cluster makes no moves, however long it runs. Every move goes
// from a node to one holding at least two fewer, so the sum of the squared
// counts falls with each and balancing ends.

// balanceReplicas plans replica moves while some eligible node's replica
// count is not within one of the mean: a learner on the low node, which
// the repair rules then promote, after which the shard has one voter too
// many and loses the one on the most loaded node (the high node, or one as
// loaded). A round plans several moves, but each node takes part in at
// most one of them, so that the removals that follow find the counts the
// moves were planned on.
func (p *planner) balanceReplicas() []Step {
	if p.s.Replication <= 0 {
		return nil
	}
	elig := p.eligibleNodes()
	used, stepped := map[ids.NodeID]bool{}, map[ids.ShardID]bool{}
	var out []Step
	for !withinOne(elig, p.replicas) {
		s, src, ok := p.replicaMove(elig, used, stepped)
		if !ok {
			break
		}
		used[src], used[s.Target], stepped[s.Shard] = true, true, true
		p.replicas[src]--
		p.moves[src]++
		out = append(out, s)
	}
	return out
}

// replicaMove finds one move: from the most loaded unused node to the
// least loaded unused node holding at least two fewer, trying the pairs in
// that order; the shard is the lowest-numbered movable one, preferring
// shards the source does not lead (their removal then needs no transfer).
func (p *planner) replicaMove(elig []ids.NodeID, used map[ids.NodeID]bool, stepped map[ids.ShardID]bool) (Step, ids.NodeID, bool) {
	for _, src := range byCount(elig, p.replicas, true) {
		if used[src] || !p.underCap(src) {
			continue
		}
		for _, dst := range byCount(elig, p.replicas, false) {
			if used[dst] || !p.underCap(dst) || p.replicas[src]-p.replicas[dst] < 2 {
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
// nothing in flight, exactly its count of replicas, all voters on eligible
// nodes), with a replica on src and none on dst.
func (p *planner) movable(src, dst ids.NodeID, stepped map[ids.ShardID]bool) (shardView, bool) {
	var fallback *shardView
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		via := p.via(shard)
		if stepped[shard] || p.busy(shard) || via == 0 || replicaOn(d, src) == nil || replicaOn(d, dst) != nil {
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
// running voter of one of its shards; several per round, each on its own
// shard.
func (p *planner) balanceLeaders() []Step {
	elig := p.eligibleNodes()
	stepped := map[ids.ShardID]bool{}
	var out []Step
	for !withinOne(elig, p.leads) {
		s, ok := p.leaderMove(elig, stepped)
		if !ok {
			break
		}
		stepped[s.Shard] = true
		p.leads[s.Via]--
		p.leads[s.ReplicaNode]++
		out = append(out, s)
	}
	return out
}

func (p *planner) leaderMove(elig []ids.NodeID, stepped map[ids.ShardID]bool) (Step, bool) {
	for _, src := range byCount(elig, p.leads, true) {
		for _, dst := range byCount(elig, p.leads, false) {
			if p.leads[src]-p.leads[dst] < 2 {
				continue
			}
			for _, d := range p.shards {
				shard := ids.ShardID(d.GetShardId())
				if stepped[shard] || p.busy(shard) || p.via(shard) != src {
					continue
				}
				r := replicaOn(d, dst)
				if r == nil || !isVoter(r) || p.replicaStatus(shard, r) == nil {
					continue
				}
				return p.classify(d, src).with(StepTransferLeader, r), true
			}
		}
	}
	return Step{}, false
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
