package scheduler

import (
	"github.com/concord-kv/concord/internal/ids"
)

// ShardHealth is one shard's replication as the scheduler judges it, for
// status pages (`concord status`, `shard list`).
type ShardHealth struct {
	Shard ids.ShardID
	// Want is the number of replicas the shard should have.
	Want int
	// Voters and Learners count the descriptor's replicas by role.
	Voters, Learners int
	// LiveVoters are the voters on live nodes (not dead, replaced or
	// removed): a quorum of the voters must be among them.
	LiveVoters int
	// GoodVoters are the voters on nodes that are UP or SUSPECT: the
	// copies the shard can count on keeping.
	GoodVoters int
	// UnderReplicated: fewer good voters than Want. A learner catching up
	// does not count yet. With no node to put a replica on (three nodes,
	// three replicas, one dead), a shard stays so until a node comes.
	UnderReplicated bool
	// QuorumLost: fewer live voters than a quorum of the voters. No
	// change can commit; the scheduler plans none for it.
	QuorumLost bool
}

// Health returns every shard's health, in shard order.
func Health(v View) []ShardHealth {
	p := newPlanner(v)
	out := make([]ShardHealth, 0, len(p.shards))
	for _, d := range p.shards {
		c := p.classify(d, 0)
		h := ShardHealth{Shard: c.id, Want: c.want, Voters: c.voters, Learners: len(d.GetReplicas()) - c.voters,
			LiveVoters: c.liveVoters, GoodVoters: c.goodVoters}
		h.UnderReplicated = c.goodVoters < c.want
		h.QuorumLost = c.liveVoters < quorum(c.voters)
		out = append(out, h)
	}
	return out
}

// UnderReplicated returns the shards with fewer good voters than they
// should have (see ShardHealth), in shard order.
func UnderReplicated(v View) []ids.ShardID {
	var out []ids.ShardID
	for _, h := range Health(v) {
		if h.UnderReplicated {
			out = append(out, h.Shard)
		}
	}
	return out
}
