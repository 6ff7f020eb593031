package scheduler

import (
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// TestScheduleMatchesOracle protects the planner against clever-code bugs:
// on many random views (wiped nodes, successors up or not, stale and
// conflicting leader claims, busy shards), Schedule and Leaders must agree
// with a brute-force planner written as plainly as the rules read.
func TestScheduleMatchesOracle(t *testing.T) {
	for seed := range uint64(2000) {
		v := randomView(rand.New(rand.NewPCG(seed, 1)))
		all := Schedule(v)
		got, want := replaceSteps(all), oracleSchedule(v)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: Schedule differs from the oracle\ngot:\n%s\nwant:\n%s", seed, DescribeSteps(got), DescribeSteps(want))
		}
		if gl, wl := Leaders(v), oracleLeaders(v); !reflect.DeepEqual(gl, wl) {
			t.Fatalf("seed %d: Leaders differs from the oracle\ngot:\n%s\nwant:\n%s", seed, DescribeLeaders(gl, v), DescribeLeaders(wl, v))
		}
		checkSteps(t, v, all)
	}
}

// replaceSteps keeps the replace steps of steps: the oracle plans only
// those. Replacement comes first among a shard's rules and is capped by
// nothing, so Schedule's replace steps are exactly the oracle's.
func replaceSteps(steps []Step) []Step {
	var out []Step
	for _, s := range steps {
		if s.Kind == StepReplace {
			out = append(out, s)
		}
	}
	return out
}

// TestScheduleIgnoresOrder protects determinism: the same view, with its
// slices shuffled and its maps rebuilt, must give the same steps and
// leaders, 50 times over.
func TestScheduleIgnoresOrder(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 2))
		v := randomView(rng)
		want, wantLeaders := Schedule(v), Leaders(v)
		for i := range 50 {
			w := shuffled(rng, v)
			if got := Schedule(w); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, shuffle %d:\ngot:\n%s\nwant:\n%s", seed, i, DescribeSteps(got), DescribeSteps(want))
			}
			if got := Leaders(w); !reflect.DeepEqual(leaderKeys(got), leaderKeys(wantLeaders)) {
				t.Fatalf("seed %d, shuffle %d: leaders\ngot:\n%s\nwant:\n%s", seed, i, DescribeLeaders(got, v), DescribeLeaders(wantLeaders, v))
			}
		}
	}
}

// leaderKeys projects a leader map onto comparable values; the Status
// pointers of a shuffled copy differ.
func leaderKeys(m map[ids.ShardID]Leader) map[ids.ShardID][3]uint64 {
	out := map[ids.ShardID][3]uint64{}
	for s, l := range m {
		out[s] = [3]uint64{uint64(l.Node), l.Status.GetTerm(), uint64(l.At.UnixNano())}
	}
	return out
}

// oracleSchedule is the planner written as a brute-force search over
// (shard, replica, node) triples, with none of Schedule's structure.
func oracleSchedule(v View) []Step {
	leaders := oracleLeaders(v)
	var steps []Step
	for _, d := range v.Shards {
		shard := ids.ShardID(d.GetShardId())
		via := leaders[shard].Node
		if o, ok := v.LeaderOverride[shard]; ok && o != 0 {
			via = o
		}
		if v.InFlight[shard] || via == 0 || goneNode(v, via) {
			continue
		}
		var best *Step
		for _, r := range d.GetReplicas() {
			for _, n := range v.Nodes {
				if n.GetNodeId() != r.GetNodeId() || n.GetState() != concordpb.NodeState_NODE_REPLACED || r.GetRole() != concordpb.ReplicaRole_REPLICA_VOTER {
					continue
				}
				to := ids.NodeID(n.GetReplacedBy())
				if st, ok := nodeState(v, to); !ok || to == 0 || st != concordpb.NodeState_NODE_UP || replicaOn(d, to) != nil {
					continue
				}
				if best == nil || ids.NodeID(n.GetNodeId()) < best.ReplicaNode {
					best = &Step{Kind: StepReplace, Shard: shard, Via: via, Epoch: d.GetEpoch(),
						Replica: ids.ReplicaID(r.GetReplicaId()), ReplicaNode: ids.NodeID(n.GetNodeId()), Target: to}
				}
			}
		}
		if best != nil {
			steps = append(steps, *best)
		}
	}
	slices.SortFunc(steps, func(a, b Step) int { return cmp.Compare(a.Shard, b.Shard) })
	return steps
}

// goneNode: node is in the view and recorded REPLACED or REMOVED, or
// judged DEAD; a step sent there reaches nobody (its successor, for a
// replaced node). The random views have no LEAVING nodes.
func goneNode(v View, node ids.NodeID) bool {
	st, ok := NodeStates(v)[node]
	return ok && (st == concordpb.NodeState_NODE_REPLACED || st == concordpb.NodeState_NODE_REMOVED || st == concordpb.NodeState_NODE_DEAD)
}

// oracleLeaders collects every fresh claim per shard and picks the best by
// sorting: higher term, then newer report, then lower node id.
func oracleLeaders(v View) map[ids.ShardID]Leader {
	claims := map[ids.ShardID][]Leader{}
	for node, r := range v.Reports {
		for _, rs := range r.Replicas {
			if rs.GetIsLeader() && v.Now.Sub(r.At) <= v.Settings.ReportMaxAge {
				claims[ids.ShardID(rs.GetShardId())] = append(claims[ids.ShardID(rs.GetShardId())], Leader{Node: node, Status: rs, At: r.At})
			}
		}
	}
	out := map[ids.ShardID]Leader{}
	for shard, cs := range claims {
		slices.SortFunc(cs, func(a, b Leader) int {
			return cmp.Or(-cmp.Compare(a.Status.GetTerm(), b.Status.GetTerm()), b.At.Compare(a.At), cmp.Compare(a.Node, b.Node))
		})
		out[shard] = cs[0]
	}
	return out
}

// randomView builds a small cluster in which every rule has a fair chance
// to matter: node ids 1..8 (some missing from Nodes), replicas on distinct
// nodes, report ages on both sides of ReportMaxAge (and exactly on it), and
// few distinct terms so that claims tie.
func randomView(rng *rand.Rand) View {
	v := View{Now: base, Settings: DefaultSettings(time.Second), Reports: map[ids.NodeID]Report{},
		InFlight: map[ids.ShardID]bool{}, LeaderOverride: map[ids.ShardID]ids.NodeID{}}
	for id := range uint64(8) {
		if rng.IntN(5) == 0 {
			continue // a node the view does not know
		}
		n := &concordpb.NodeDescriptor{NodeId: id + 1}
		if rng.IntN(3) == 0 {
			n.State, n.ReplacedBy = concordpb.NodeState_NODE_REPLACED, uint64(rng.IntN(9))
		}
		v.Nodes = append(v.Nodes, n)
	}
	for id := range uint64(rng.IntN(7)) {
		d := &concordpb.ShardDescriptor{ShardId: id, Epoch: uint64(rng.IntN(4) + 1)}
		for i, node := range rng.Perm(8)[:rng.IntN(5)+1] {
			d.Replicas = append(d.Replicas, &concordpb.ReplicaDescriptor{ReplicaId: uint64(i + 1), NodeId: uint64(node + 1)})
		}
		v.Shards = append(v.Shards, d)
		if rng.IntN(6) == 0 {
			v.InFlight[ids.ShardID(id)] = true
		}
		if rng.IntN(8) == 0 {
			v.LeaderOverride[ids.ShardID(id)] = ids.NodeID(rng.IntN(9))
		}
	}
	for _, d := range v.Shards {
		for _, r := range d.GetReplicas() {
			addClaim(rng, v, d, r)
		}
	}
	return v
}

// addClaim adds r's status to its node's report, creating the report with
// a random age the first time.
func addClaim(rng *rand.Rand, v View, d *concordpb.ShardDescriptor, r *concordpb.ReplicaDescriptor) {
	node := ids.NodeID(r.GetNodeId())
	rep, ok := v.Reports[node]
	if !ok {
		if rng.IntN(4) == 0 {
			return // never reported
		}
		ages := []time.Duration{0, time.Second, 3 * time.Second, 3*time.Second + 1, 10 * time.Second}
		rep.At = base.Add(-ages[rng.IntN(len(ages))])
	}
	rep.Replicas = append(rep.Replicas, &concordpb.ReplicaStatus{ShardId: d.GetShardId(), ReplicaId: r.GetReplicaId(),
		NodeId: uint64(node), Term: uint64(rng.IntN(3) + 1), IsLeader: rng.IntN(3) == 0})
	v.Reports[node] = rep
}

// shuffled returns a deep copy of v with every slice permuted and every
// map rebuilt in a random insertion order.
func shuffled(rng *rand.Rand, v View) View {
	w := v
	w.Nodes = shuffledClones(rng, v.Nodes)
	w.Shards = shuffledClones(rng, v.Shards)
	for _, d := range w.Shards {
		rng.Shuffle(len(d.Replicas), func(i, j int) { d.Replicas[i], d.Replicas[j] = d.Replicas[j], d.Replicas[i] })
	}
	w.Reports = map[ids.NodeID]Report{}
	for _, k := range shuffledKeys(rng, v.Reports) {
		r := v.Reports[k]
		r.Replicas = shuffledClones(rng, r.Replicas)
		w.Reports[k] = r
	}
	w.InFlight = map[ids.ShardID]bool{}
	for _, k := range shuffledKeys(rng, v.InFlight) {
		w.InFlight[k] = v.InFlight[k]
	}
	w.LeaderOverride = map[ids.ShardID]ids.NodeID{}
	for _, k := range shuffledKeys(rng, v.LeaderOverride) {
		w.LeaderOverride[k] = v.LeaderOverride[k]
	}
	return w
}

func shuffledClones[T proto.Message](rng *rand.Rand, in []T) []T {
	out := make([]T, len(in))
	for i, m := range in {
		out[i] = proto.Clone(m).(T)
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func shuffledKeys[K cmp.Ordered, V any](rng *rand.Rand, m map[K]V) []K {
	keys := sortedKeys(m)
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

// TestScheduleSafeOnWildViews runs checkSteps on views that randomView and
// the simulator do not make: every node state (LEAVING and REMOVED too),
// learners, shards with no replica or no leader, no nodes at all, a
// replication factor from 0 to 4, move caps from 0 to 3, with and without
// ObservedSince (within StepTimeout of now, sometimes: a new placement
// leader), reports of a newer descriptor epoch than the view's, reports of a
// disk low on space, of free bytes, reserves and shard sizes. Whatever the
// view, no plan may break the invariants.
func TestScheduleSafeOnWildViews(t *testing.T) {
	states := []concordpb.NodeState{concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD,
		concordpb.NodeState_NODE_LEAVING, concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED}
	ages := []time.Duration{0, time.Second, 4 * time.Second, 10 * time.Second, 2 * time.Minute}
	for seed := range uint64(5000) {
		rng := rand.New(rand.NewPCG(seed, 9))
		v := View{Now: base, Settings: DefaultSettings(time.Second), Reports: map[ids.NodeID]Report{},
			InFlight: map[ids.ShardID]bool{}, InFlightSteps: map[ids.ShardID]Step{}, LeaderOverride: map[ids.ShardID]ids.NodeID{}}
		if rng.IntN(2) == 0 {
			v.ObservedSince = base.Add(-time.Duration(rng.IntN(120)) * time.Second)
		}
		v.Settings.Replication, v.Settings.MaxMovesPerNode = rng.IntN(5), rng.IntN(4)
		nodes := rng.IntN(7)
		for id := range uint64(nodes) {
			n := &concordpb.NodeDescriptor{NodeId: id + 1, State: states[rng.IntN(len(states))]}
			if n.State == concordpb.NodeState_NODE_REPLACED {
				n.ReplacedBy = uint64(rng.IntN(nodes + 1))
			}
			v.Nodes = append(v.Nodes, n)
			if rng.IntN(4) != 0 {
				v.Reports[ids.NodeID(id+1)] = Report{At: base.Add(-ages[rng.IntN(len(ages))]), DiskLow: rng.IntN(4) == 0,
					DiskFree: uint64(rng.IntN(8)) << 30, DiskReserve: uint64(rng.IntN(3)) << 29}
			}
		}
		for id := range uint64(rng.IntN(6)) {
			d := &concordpb.ShardDescriptor{ShardId: id, Epoch: 1}
			if nodes > 0 {
				for i, node := range rng.Perm(nodes)[:rng.IntN(min(nodes, 5)+1)] {
					r := &concordpb.ReplicaDescriptor{ReplicaId: uint64(i + 1), NodeId: uint64(node + 1)}
					if rng.IntN(4) == 0 {
						r.Role = concordpb.ReplicaRole_REPLICA_LEARNER
					}
					d.Replicas = append(d.Replicas, r)
				}
			}
			v.Shards = append(v.Shards, d)
			lead := -1 // the index of the voter leading, if any
			if len(d.Replicas) > 0 && rng.IntN(5) != 0 {
				if i := rng.IntN(len(d.Replicas)); isVoter(d.Replicas[i]) {
					lead = i
				}
			}
			for i, r := range d.Replicas {
				rep, ok := v.Reports[ids.NodeID(r.GetNodeId())]
				if !ok {
					continue
				}
				rs := &concordpb.ReplicaStatus{ShardId: id, ReplicaId: r.GetReplicaId(), NodeId: r.GetNodeId(), Term: 1,
					CommitIndex: 100, AppliedIndex: uint64(rng.IntN(2) * 100), IsLeader: i == lead,
					DescriptorEpoch: uint64(rng.IntN(3)),       // 2: a change the view does not show
					ApproxBytes:     uint64(rng.IntN(4)) << 30} // 0: unknown
				if lead >= 0 {
					rs.LeaderReplicaId = d.Replicas[lead].GetReplicaId()
				}
				rep.Replicas = append(rep.Replicas, rs)
				v.Reports[ids.NodeID(r.GetNodeId())] = rep
			}
		}
		checkSteps(t, v, Schedule(v))
		_ = Health(v)
	}
}
