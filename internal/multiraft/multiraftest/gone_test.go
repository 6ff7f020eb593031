package multiraftest_test

import (
	"testing"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// electionTicks is the hosts' default election timeout: without a
// LeaderGone event no follower can campaign before it has passed.
var electionTicks = multiraft.DefaultConfig(1).ElectionTicks

// leaderWatch fails the test if two nodes ever lead shard in the same term
// (checked after every tick and settle it is called from).
type leaderWatch struct {
	t      *testing.T
	c      *multiraftest.Cluster
	shard  ids.ShardID
	byTerm map[uint64]ids.NodeID
}

func (w *leaderWatch) check() {
	w.t.Helper()
	for _, n := range w.c.Nodes() {
		if n.Host == nil {
			continue
		}
		i, ok := n.Host.Info(w.shard)
		if !ok || !i.IsLeader {
			continue
		}
		if other, seen := w.byTerm[i.Term]; seen && other != n.ID {
			w.t.Fatalf("shard %d: nodes %d and %d both led term %d", w.shard, other, n.ID, i.Term)
		}
		w.byTerm[i.Term] = n.ID
	}
}

// electedWithin ticks (one at a time) until shard has a leader other than
// old that every running replica follows, checking for two leaders in a
// term after each tick, and returns the ticks it took; it fails after max.
func electedWithin(t *testing.T, c *multiraftest.Cluster, w *leaderWatch, shard ids.ShardID, old ids.NodeID, max int) int {
	t.Helper()
	for tick := 0; tick <= max; tick++ {
		w.check()
		if l := c.Leader(shard); l != 0 && l != old && following(c, shard, l) {
			return tick
		}
		c.Tick(1)
	}
	t.Fatalf("shard %d: no new leader within %d ticks (election timeout %d)", shard, max, electionTicks)
	return 0
}

// following reports whether every running replica of shard knows leader.
func following(c *multiraftest.Cluster, shard ids.ShardID, leader ids.NodeID) bool {
	for _, n := range c.Nodes() {
		if n.Host == nil {
			continue
		}
		if i, ok := n.Host.Info(shard); !ok || i.LeaderNode != leader {
			return false
		}
	}
	return true
}

// TestLeaderGoneElectsAtOnce: when the survivors are told the leader's node
// is gone, they elect a new leader within a couple of ticks, where raft
// alone waits at least an election timeout of silence; and never two
// leaders in one term. The survivors hear of it one after the other, the
// higher replica id first, so the first campaign cannot win alone (the
// lower one still believes in the old leader and ignores pre-votes): the
// staggered turns must recover from that within the stagger.
func TestLeaderGoneElectsAtOnce(t *testing.T) {
	for _, order := range []string{"together", "higher-first", "lower-first"} {
		t.Run(order, func(t *testing.T) {
			c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1})
			const shard = ids.ShardID(1)
			old := c.WaitLeader(shard)
			c.Put("k", "v")
			w := &leaderWatch{t: t, c: c, shard: shard, byTerm: map[uint64]ids.NodeID{}}
			w.check()
			c.Stop(old)
			// The leader died a while before the event (a node is declared
			// dead after seconds of silence): its followers forget it at
			// once. TestLeaderGoneWaitsOutTheLease covers a recent leader.
			c.Clock.Advance(multiraft.DefaultConfig(1).LeaseDuration())
			var survivors []ids.NodeID
			for _, n := range c.Nodes() {
				if n.Host != nil {
					survivors = append(survivors, n.ID) // ascending: replica id = node id
				}
			}
			switch order {
			case "together":
				for _, s := range survivors {
					c.Node(s).Host.LeaderGone(old)
				}
			case "higher-first", "lower-first":
				first, second := survivors[1], survivors[0]
				if order == "lower-first" {
					first, second = second, first
				}
				c.Node(first).Host.LeaderGone(old)
				c.Tick(1)
				w.check()
				c.Node(second).Host.LeaderGone(old)
			}
			took := electedWithin(t, c, w, shard, old, 2*electionTicks)
			t.Logf("new leader node %d after %d ticks (election timeout %d ticks)", c.Leader(shard), took, electionTicks)
			if took > 3*campaignStaggerTicks {
				t.Fatalf("elected after %d ticks; a known-gone leader should be replaced within a few (timeout %d)", took, electionTicks)
			}
			c.Put("k", "v2") // the new leader commits
			c.WaitValue("k", "v2", survivors...)
		})
	}
}

// TestLeaderGoneWithoutEventWaitsForTimeout is the baseline the test above
// beats: with no event, the survivors elect only after an election timeout.
// (If this ever fails, the test above no longer proves anything.)
func TestLeaderGoneWithoutEventWaitsForTimeout(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1})
	const shard = ids.ShardID(1)
	old := c.WaitLeader(shard)
	w := &leaderWatch{t: t, c: c, shard: shard, byTerm: map[uint64]ids.NodeID{}}
	c.Stop(old)
	took := electedWithin(t, c, w, shard, old, 30*electionTicks) // split votes may repeat
	if took < electionTicks-1 {
		t.Fatalf("elected after %d ticks without any event; election timeout is %d", took, electionTicks)
	}
}

// TestLeaderGoneOfNonLeaderChangesNothing: an event about a node that
// leads nothing (a follower's node, or a node already replaced as leader, as
// a join retried every 100 ms repeats) makes no replica forget its leader
// or campaign: the leader and term stay as they were.
func TestLeaderGoneOfNonLeaderChangesNothing(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1})
	const shard = ids.ShardID(1)
	old := c.WaitLeader(shard)
	w := &leaderWatch{t: t, c: c, shard: shard, byTerm: map[uint64]ids.NodeID{}}
	c.Stop(old)
	for _, n := range c.Nodes() {
		if n.Host != nil {
			n.Host.LeaderGone(old)
		}
	}
	electedWithin(t, c, w, shard, old, 2*electionTicks)
	leader := c.Leader(shard)
	i, _ := c.Node(leader).Host.Info(shard)
	term := i.Term
	var follower ids.NodeID
	for _, n := range c.Nodes() {
		if n.Host != nil && n.ID != leader {
			follower = n.ID
		}
	}
	for range 3 {
		for _, n := range c.Nodes() {
			if n.Host != nil {
				n.Host.LeaderGone(old)      // already replaced
				n.Host.LeaderGone(follower) // leads nothing
			}
		}
		c.Tick(campaignStaggerTicks + 1)
		w.check()
	}
	i, _ = c.Node(leader).Host.Info(shard)
	if l := c.Leader(shard); l != leader || i.Term != term {
		t.Fatalf("leader %d term %d became leader %d term %d after events about nodes leading nothing", leader, term, l, i.Term)
	}
}

// campaignStaggerTicks mirrors multiraft's turn length.
const campaignStaggerTicks = 2
