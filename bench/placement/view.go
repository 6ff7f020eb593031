package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/concord-kv/concord/api/concordpb"
)

// view is the part of a StatusResponse (what `concord status`, `node list`
// and `shard list` print) the balance check reads.
type view struct {
	nodes  []nodeView
	shards []shardView
}

type nodeView struct {
	id    uint64
	addr  string
	state concordpb.NodeState
	// reportedLeaders is node list's LEADERS: the shards the node leads by
	// its own last report (the shard rows' leader comes from elsewhere).
	reportedLeaders int
}

type shardView struct {
	id              uint64
	meta            bool
	replicas        []replicaView
	leader          uint64
	underReplicated bool
	commit          uint64
}

type replicaView struct {
	node    uint64
	learner bool
}

func viewOf(st *concordpb.StatusResponse) view {
	var v view
	for _, n := range st.GetNodes() {
		v.nodes = append(v.nodes, nodeView{id: n.GetNode().GetNodeId(), addr: n.GetNode().GetAddress(),
			state: n.GetNode().GetState(), reportedLeaders: int(n.GetLeaders())})
	}
	for _, s := range st.GetShards() {
		sv := shardView{id: s.GetShard().GetShardId(), meta: s.GetIsMeta(), leader: s.GetLeaderNodeId(),
			underReplicated: s.GetUnderReplicated(), commit: s.GetCommitIndex()}
		for _, r := range s.GetShard().GetReplicas() {
			sv.replicas = append(sv.replicas, replicaView{node: r.GetNodeId(), learner: r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER})
		}
		v.shards = append(v.shards, sv)
	}
	return v
}

// upNodes lists the ids of the nodes in state UP, in id order.
func (v view) upNodes() []uint64 {
	var out []uint64
	for _, n := range v.nodes {
		if n.state == concordpb.NodeState_NODE_UP {
			out = append(out, n.id)
		}
	}
	slices.Sort(out)
	return out
}

// nodeByAddr returns the id and state of the newest node (highest id) at
// addr: a wiped node that joined again has a new id at its old address.
func (v view) nodeByAddr(addr string) (uint64, concordpb.NodeState, bool) {
	var best nodeView
	for _, n := range v.nodes {
		if n.addr == addr && n.id > best.id {
			best = n
		}
	}
	return best.id, best.state, best.id != 0
}

// counts returns the replicas (every role, every shard, the meta shard
// included, as the scheduler counts them) and the leaderships per node.
func (v view) counts() (replicas, leaders map[uint64]int) {
	replicas, leaders = map[uint64]int{}, map[uint64]int{}
	for _, s := range v.shards {
		for _, r := range s.replicas {
			replicas[r.node]++
		}
		if s.leader != 0 {
			leaders[s.leader]++
		}
	}
	return replicas, leaders
}

// reportedLeaders is node list's LEADERS column per node.
func (v view) reportedLeaders() map[uint64]int {
	out := map[uint64]int{}
	for _, n := range v.nodes {
		out[n.id] = n.reportedLeaders
	}
	return out
}

// verdict is what check found: shaped means every shard has its R voters
// on UP nodes, no learner, a leader and no under-replication flag, with
// exactly the nodes wanted UP and no node suspect, dead or leaving;
// replicas and leaders say whether the per-node counts are within one of
// the mean. why names the first thing that is not so.
type verdict struct {
	shaped, replicas, leaders bool
	why                       string
}

// balanced is the whole goal: shape, replica and leader counts.
func (d verdict) balanced() bool { return d.shaped && d.replicas && d.leaders }

// check judges v against a cluster of want UP nodes and r replicas per
// shard; the meta shard wants metaR once five nodes are up (the
// scheduler's MetaReplication), else r.
func (v view) check(want, r, metaR int) verdict {
	up := v.upNodes()
	var d verdict
	if why := v.shapeProblem(up, want, r, metaR); why != "" {
		d.why = why
	} else {
		d.shaped = true
	}
	replicas, leaders := v.counts()
	d.replicas = withinOne(up, replicas)
	d.leaders = withinOne(up, leaders)
	if d.why == "" && !d.replicas {
		d.why = "replica counts " + countsString(up, replicas) + " not within one of the mean"
	}
	if d.why == "" && !d.leaders {
		d.why = "leader counts " + countsString(up, leaders) + " not within one of the mean (node list's LEADERS: " +
			countsString(up, v.reportedLeaders()) + ")"
	}
	return d
}

func (v view) shapeProblem(up []uint64, want, r, metaR int) string {
	for _, n := range v.nodes {
		switch n.state {
		case concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD, concordpb.NodeState_NODE_LEAVING:
			return fmt.Sprintf("node %d is %s", n.id, stateName(n.state))
		}
	}
	if len(up) != want {
		return fmt.Sprintf("%d nodes up, want %d", len(up), want)
	}
	if len(v.shards) == 0 {
		return "no shards"
	}
	for _, s := range v.shards {
		wantR := r
		if s.meta && len(up) >= 5 {
			wantR = max(r, metaR)
		}
		if why := s.problem(up, min(wantR, len(up))); why != "" {
			return fmt.Sprintf("shard %d: %s", s.id, why)
		}
	}
	return ""
}

func (s shardView) problem(up []uint64, wantR int) string {
	switch {
	case s.underReplicated:
		return "under-replicated"
	case s.leader == 0:
		return "no leader"
	case len(s.replicas) != wantR:
		return fmt.Sprintf("%d replicas, want %d", len(s.replicas), wantR)
	}
	for _, r := range s.replicas {
		if r.learner {
			return fmt.Sprintf("learner on node %d", r.node)
		}
		if !slices.Contains(up, r.node) {
			return fmt.Sprintf("replica on node %d, which is not up", r.node)
		}
	}
	return ""
}

// withinOne: every node's count c satisfies |c - total/N| <= 1 (the
// scheduler's rule, computed without division).
func withinOne(nodes []uint64, count map[uint64]int) bool {
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

func countsString(nodes []uint64, count map[uint64]int) string {
	parts := make([]string, len(nodes))
	for i, id := range nodes {
		parts[i] = fmt.Sprintf("n%d:%d", id, count[id])
	}
	return strings.Join(parts, " ")
}

func stateName(s concordpb.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_"))
}

// keysPerNode spreads per-shard key counts over the nodes: held counts
// every replica of a shard, led only the shard's leader. Nodes not UP are
// left out.
func (v view) keysPerNode(shardKeys map[uint64]int64) (held, led map[uint64]int64) {
	held, led = map[uint64]int64{}, map[uint64]int64{}
	for _, id := range v.upNodes() {
		held[id], led[id] = 0, 0
	}
	for _, s := range v.shards {
		k := shardKeys[s.id]
		for _, r := range s.replicas {
			if _, ok := held[r.node]; ok {
				held[r.node] += k
			}
		}
		if _, ok := led[s.leader]; ok {
			led[s.leader] += k
		}
	}
	return held, led
}

// spread summarises a set of counts: min, max, mean and the population
// standard deviation.
type spread struct {
	min, max, mean, stddev float64
}

func spreadOf(vals []float64) spread {
	if len(vals) == 0 {
		return spread{}
	}
	s := spread{min: vals[0], max: vals[0]}
	var sum float64
	for _, x := range vals {
		s.min, s.max = min(s.min, x), max(s.max, x)
		sum += x
	}
	s.mean = sum / float64(len(vals))
	var sq float64
	for _, x := range vals {
		sq += (x - s.mean) * (x - s.mean)
	}
	s.stddev = math.Sqrt(sq / float64(len(vals)))
	return s
}

// transferOptions explains a leader imbalance: for each node leading the
// most shards, the shards it leads and, per shard, the other voters' nodes
// that lead at least two fewer (where a transfer would help). A shard with
// no such voter can only be fixed by moving a replica first.
func (v view) transferOptions() string {
	up := v.upNodes()
	_, leaders := v.counts()
	most := 0
	for _, id := range up {
		most = max(most, leaders[id])
	}
	var parts []string
	for _, id := range up {
		if leaders[id] != most {
			continue
		}
		for _, s := range v.shards {
			if s.leader != id {
				continue
			}
			var targets []string
			for _, r := range s.replicas {
				if r.node != id && !r.learner && slices.Contains(up, r.node) && leaders[r.node] <= most-2 {
					targets = append(targets, fmt.Sprintf("n%d", r.node))
				}
			}
			parts = append(parts, fmt.Sprintf("s%d led by n%d: transfer targets [%s]", s.id, id, strings.Join(targets, " ")))
		}
	}
	return strings.Join(parts, "; ")
}
