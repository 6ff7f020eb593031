package scheduler

import (
	"math"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Whether a shard fits on a node. A node whose disk is low on space
// (LowOnSpace) takes no new replica; nor does one that a shard's
// snapshot would take below its reserve: it would refuse the snapshot
// (the transport's NO_ROOM, at the same reserve) and the learner would
// never catch up until removed as stuck (Settings.LearnerTimeout), half
// an hour later. So a new replica of shard S goes to node N only if
//
//	free(N) - size(S) - incoming(N) >= reserve(N) + SpaceMargin(reserve(N))
//
// where free and reserve are N's last report's (Report.DiskFree,
// DiskReserve), size(S) is the largest ApproxBytes any fresh report
// gives for a replica of S, and incoming(N) is the size of the replicas
// on their way to N: learners there not caught up, replicas there that
// N's last report does not list at an applied index above 0 (just
// arrived: N measured its free bytes before them), adds and replacements in flight that the
// descriptors do not show yet, and the learners planned for N earlier in
// the round. The margin is the one a low node
// must regain to be low no more, so that a replica placed by this rule
// does not leave its node low once it has arrived. A shard of unknown
// size (0: a node from before sizes, or data not flushed yet), a node
// with its guard off (reserve 0) and one with no report since the
// planning node began observing keep the rule out: such a target is
// judged as before, by LowOnSpace alone.

// minSpaceMargin is the least margin above the reserve (SpaceMargin),
// unless the reserve is smaller.
const minSpaceMargin = 64 << 20

// SpaceMargin is how far above reserve a node's free space must climb
// before a node low on space is low no more (the node's space guard): a
// tenth of the reserve, at least 64 MiB, so that a disk hovering at the
// line (compactions freeing and taking space) does not turn the alarm on
// and off every second; but never more than the reserve itself, so that
// on a small filesystem the line to clear stays near the line to go low
// (a 128 MiB volume's auto reserve is 6.4 MiB: a 64 MiB margin would hold
// the alarm on until it was 55 % free). Placement keeps the same margin
// above the reserve free on a node it sends a replica to (planner.fits).
func SpaceMargin(reserve uint64) uint64 {
	return min(max(reserve/10, minSpaceMargin), reserve)
}

// ShardSizes returns, per shard, the largest ApproxBytes a fresh report
// gives for a replica of it; a shard no replica gave a size for is
// missing (unknown). Placement checks a new replica's room against it,
// and the status pages show it (ShardStatus.approx_bytes).
func ShardSizes(v View) map[ids.ShardID]uint64 {
	out := map[ids.ShardID]uint64{}
	for _, rep := range v.Reports {
		if !rep.Fresh(v.Now, v.Settings) {
			continue
		}
		for _, rs := range rep.Replicas {
			if b := rs.GetApproxBytes(); b > 0 {
				shard := ids.ShardID(rs.GetShardId())
				out[shard] = max(out[shard], b)
			}
		}
	}
	return out
}

// countIncoming adds, per node, the size of the replicas in the
// descriptors whose data the node's free bytes may not show yet (see
// fits): learners not caught up (their snapshot may still be on its way),
// and any replica the node's last report does not list with data, at an
// applied index above 0 (an add just done, even promoted since: the node
// created the replica empty at the leader's first message and listed it
// at applied 0, and measured its free bytes before the snapshot arrived;
// the executor's kick plans the next round at once). Adds in flight are
// counted by countInFlight, the learners planned this round by planAdd.
func (p *planner) countIncoming() {
	reported := map[replicaKey]bool{}
	for node, rep := range p.v.Reports {
		for _, rs := range rep.Replicas {
			if rs.GetAppliedIndex() > 0 {
				reported[replicaKey{node, ids.ShardID(rs.GetShardId()), ids.ReplicaID(rs.GetReplicaId())}] = true
			}
		}
	}
	for _, d := range p.shards {
		shard := ids.ShardID(d.GetShardId())
		for _, r := range d.GetReplicas() {
			node := ids.NodeID(r.GetNodeId())
			behind := r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER && !p.caughtUp(shard, r)
			if behind || !reported[replicaKey{node, shard, ids.ReplicaID(r.GetReplicaId())}] {
				p.addIncoming(node, shard)
			}
		}
	}
}

// replicaKey names a replica as a node's report lists it.
type replicaKey struct {
	node    ids.NodeID
	shard   ids.ShardID
	replica ids.ReplicaID
}

// addIncoming counts a replica of shard on its way to node.
func (p *planner) addIncoming(node ids.NodeID, shard ids.ShardID) {
	p.incoming[node] = addSat(p.incoming[node], p.size[shard])
}

// fits reports whether a new replica of shard fits on node above its
// reserve plus the margin, counting the replicas already on their way
// there (see the rule above); true when shard's size is unknown, node's
// guard is off, or node has no report since the planning node began
// observing.
func (p *planner) fits(shard ids.ShardID, node ids.NodeID) bool {
	size := p.size[shard]
	r, ok := p.v.Reports[node]
	if size == 0 || !ok || r.DiskReserve == 0 || r.At.Before(p.v.ObservedSince) {
		return true
	}
	return r.DiskFree >= addSat(r.DiskReserve, SpaceMargin(r.DiskReserve), p.incoming[node], size)
}

// addSat is the sum of xs, or the largest uint64 if it overflows.
func addSat(xs ...uint64) uint64 {
	var sum uint64
	for _, x := range xs {
		if sum > math.MaxUint64-x {
			return math.MaxUint64
		}
		sum += x
	}
	return sum
}
