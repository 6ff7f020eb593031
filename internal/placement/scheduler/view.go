package scheduler

import (
	"cmp"
	"slices"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Settings are the scheduler's tunables. Every field is a limit with a unit;
// the node derives them from its configuration.
type Settings struct {
	// ReportMaxAge is how old a heartbeat report may be and still count
	// (inclusive: a report exactly this old counts). A node that stopped
	// reporting still has a last report claiming its old leaderships, so
	// older reports are ignored. A few heartbeat intervals, so one lost
	// heartbeat does not hide a leader.
	ReportMaxAge time.Duration
}

// DefaultSettings returns the settings the node uses for a heartbeat
// interval of heartbeat: reports count for three intervals.
func DefaultSettings(heartbeat time.Duration) Settings {
	return Settings{ReportMaxAge: 3 * heartbeat}
}

// Report is the last heartbeat a node sent to the placement leader.
type Report struct {
	// At is when the placement leader received the report (its own clock).
	At time.Time
	// Replicas are the node's replicas as it reported them; a leader says
	// so with IsLeader and its Term.
	Replicas []*concordpb.ReplicaStatus
}

// Fresh reports whether r is recent enough to count at now.
func (r Report) Fresh(now time.Time, s Settings) bool {
	return now.Sub(r.At) <= s.ReportMaxAge
}

// View is everything the scheduler knows about the cluster. The placement
// leader assembles it from the meta shard's state (Nodes, Shards) and from
// what it holds in memory (Reports, InFlight). Slices may come in any order;
// each id must appear at most once in Nodes and in Shards.
type View struct {
	// Now is the time at which the view is evaluated, on the same clock as
	// Report.At.
	Now      time.Time
	Settings Settings

	// Nodes are the placement service's node descriptors.
	Nodes []*concordpb.NodeDescriptor
	// Reports holds the last heartbeat report per node; a node that never
	// reported to this placement leader has none.
	Reports map[ids.NodeID]Report
	// Shards are the placement service's shard descriptors. They may lag a
	// shard's own descriptor by a heartbeat; a step planned on a stale one
	// fails at the leader and is planned again from a fresher view.
	Shards []*concordpb.ShardDescriptor
	// InFlight holds the shards whose previous step is still executing;
	// they get no step.
	InFlight map[ids.ShardID]bool

	// LeaderOverride names leaders the planning node knows first-hand and
	// that win over the reports: the node puts here the shards its own
	// replica host leads (mapped to its own id), as the node's repair loop
	// did when it preferred itself over the heartbeat-derived leader. Only
	// Schedule consults it; Leaders reports what heartbeats say.
	LeaderOverride map[ids.ShardID]ids.NodeID
}

// Leader is a shard's leader according to the heartbeat reports.
type Leader struct {
	Node ids.NodeID
	// Status is the winning claim: its term, commit and applied indexes and
	// descriptor epoch, for status pages.
	Status *concordpb.ReplicaStatus
	// At is when the report holding the claim was received.
	At time.Time
}

// Leaders returns the node leading each shard according to the reports that
// are fresh at v.Now. A node that died keeps a last report claiming its old
// leaderships, so stale reports are skipped; of two fresh claims the higher
// term wins (the newer leader has the higher term, by Raft's election
// rule). Two claims in one term cannot both be true; should reports
// disagree anyway, the more recent report wins, then the lower node id, so
// the answer never depends on map order.
//
// The node uses it for the routing hints in heartbeat answers and for the
// cluster status, as well as for planning.
func Leaders(v View) map[ids.ShardID]Leader {
	out := map[ids.ShardID]Leader{}
	for _, node := range sortedKeys(v.Reports) {
		r := v.Reports[node]
		if !r.Fresh(v.Now, v.Settings) {
			continue
		}
		for _, rs := range r.Replicas {
			if !rs.GetIsLeader() {
				continue
			}
			c := Leader{Node: node, Status: rs, At: r.At}
			shard := ids.ShardID(rs.GetShardId())
			if cur, ok := out[shard]; !ok || beats(c, cur) {
				out[shard] = c
			}
		}
	}
	return out
}

// beats reports whether claim a wins over claim b for the same shard.
func beats(a, b Leader) bool {
	if a.Status.GetTerm() != b.Status.GetTerm() {
		return a.Status.GetTerm() > b.Status.GetTerm()
	}
	if !a.At.Equal(b.At) {
		return a.At.After(b.At)
	}
	return a.Node < b.Node
}

// sortedNodes returns v.Nodes ordered by node id, leaving v untouched.
func sortedNodes(v View) []*concordpb.NodeDescriptor {
	return slices.SortedFunc(slices.Values(v.Nodes), func(a, b *concordpb.NodeDescriptor) int {
		return cmp.Compare(a.GetNodeId(), b.GetNodeId())
	})
}

// sortedShards returns v.Shards ordered by shard id, leaving v untouched.
func sortedShards(v View) []*concordpb.ShardDescriptor {
	return slices.SortedFunc(slices.Values(v.Shards), func(a, b *concordpb.ShardDescriptor) int {
		return cmp.Compare(a.GetShardId(), b.GetShardId())
	})
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
