package multiraftest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// Leader-aware log truncation (replica/logtrunc.go), on one shard of three
// real hosts. The cap (LogKeepEntries) is what a replica keeps at most; the
// tail (LogTailEntries) what a leader keeps below its slowest follower.
const truncTail = 2

func truncConfig(keep uint64) multiraftest.Options {
	return multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTailEntries, cfg.LogTruncateEntries = keep, truncTail, 1
	}}
}

func applied(t *testing.T, c *multiraftest.Cluster, node ids.NodeID) uint64 {
	t.Helper()
	info, ok := c.Node(node).Host.Info(1)
	if !ok {
		t.Fatalf("node %d holds no replica of shard 1", node)
	}
	return info.Applied
}

// truncatedToTail reports whether every node in nodes truncated its log to
// exactly truncTail entries below its applied index.
func truncatedToTail(t *testing.T, c *multiraftest.Cluster, nodes ...ids.NodeID) bool {
	t.Helper()
	for _, n := range nodes {
		if a := applied(t, c, n); a <= truncTail || truncated(t, c, n) != a-truncTail {
			return false
		}
	}
	return true
}

// countSnapshots counts the snapshot streams the network starts.
func countSnapshots(c *multiraftest.Cluster) *atomic.Int64 {
	var n atomic.Int64
	c.Net.OnSnapshotStream(func(from, to ids.NodeID, shard ids.ShardID) { n.Add(1) })
	return &n
}

// TestLogTruncatedToCaughtUpFollowers protects the point of leader-aware
// truncation: with every follower caught up, the leader truncates to its
// applied index less the tail, though the cap would let it keep 1,000
// entries, and its followers truncate where it did (which they learn from
// its heartbeats: on their own they would keep the cap).
func TestLogTruncatedToCaughtUpFollowers(t *testing.T) {
	c := multiraftest.New(t, truncConfig(1000))
	c.WaitLeader(1)
	all := []ids.NodeID{1, 2, 3}
	for i := range 30 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.WaitValue("k29", "v", all...)
	c.RunUntil("every replica to truncate its log to the tail", 100, func() bool {
		return truncatedToTail(t, c, all...)
	})
}

// TestDownFollowerHoldsLogOnlyToCap protects the bound on what a follower
// that stopped answering costs: the leader keeps the entries it lacks, but
// never more than the cap (10), exactly as many, and the follower, healed,
// catches up by snapshot.
func TestDownFollowerHoldsLogOnlyToCap(t *testing.T) {
	const keep = 10
	c := multiraftest.New(t, truncConfig(keep))
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	all := []ids.NodeID{1, 2, 3}
	c.Put("first", "v")
	c.WaitValue("first", "v", all...)
	c.Cut(lagging)
	frozen := applied(t, c, lagging)
	for i := range 40 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.Tick(30) // many truncation rounds
	a := applied(t, c, leader)
	if got := truncated(t, c, leader); got != a-keep {
		t.Fatalf("leader log truncated to %d with applied %d and a follower stuck at %d: want the cap, %d", got, a, frozen, a-keep)
	}
	snaps := countSnapshots(c)
	c.Heal(lagging)
	c.Put("after", "x")
	c.WaitValue("after", "x", all...)
	if snaps.Load() == 0 {
		t.Fatal("the follower caught up past the cap without a snapshot: the leader kept more than the cap")
	}
}

// TestLaggingFollowerCatchesUpFromLog protects catch-up within the cap:
// the leader keeps the entries a cut-off follower lacks (the other
// follower, truncating where the leader does, keeps them too), the
// follower catches up from the log with no snapshot once healed, and then
// every log is truncated to the tail again.
func TestLaggingFollowerCatchesUpFromLog(t *testing.T) {
	c := multiraftest.New(t, truncConfig(1000))
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	all := []ids.NodeID{1, 2, 3}
	c.Put("first", "v")
	c.WaitValue("first", "v", all...)
	c.RunUntil("every replica to truncate its log to the tail", 100, func() bool {
		return truncatedToTail(t, c, all...)
	})
	c.Cut(lagging)
	frozen := applied(t, c, lagging)
	for i := range 50 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.Tick(30) // many truncation rounds
	for _, n := range all {
		if got := truncated(t, c, n); got > frozen {
			t.Fatalf("node %d truncated its log to %d, past %d, which a cut-off follower still lacks", n, got, frozen)
		}
	}
	snaps := countSnapshots(c)
	c.Heal(lagging)
	c.WaitValue("k49", "v", all...)
	if n := snaps.Load(); n != 0 {
		t.Fatalf("%d snapshot(s) sent to a follower %d entries behind, within the cap of 1000", n, applied(t, c, leader)-frozen)
	}
	c.RunUntil("every replica to truncate its log to the tail after the catch-up", 100, func() bool {
		return truncatedToTail(t, c, all...)
	})
}

// TestNewLeaderCatchesUpLaggingFollowerFromLog protects the followers'
// half: a follower truncates only where its leader did, so when it becomes
// leader while another follower lags (within the cap), it still holds the
// entries that follower lacks and catches it up from its log, with no
// snapshot. A follower that truncated to its own applied index, as a
// leader with every follower caught up does, would have to send one.
func TestNewLeaderCatchesUpLaggingFollowerFromLog(t *testing.T) {
	opts := truncConfig(1000)
	configure := opts.Configure
	opts.Configure = func(cfg *multiraft.Config) { configure(cfg); cfg.NoLeaderPreference = true }
	c := multiraftest.New(t, opts)
	leader := c.WaitLeader(1)
	lagging, next := others(leader, 3)[0], others(leader, 3)[1]
	all := []ids.NodeID{1, 2, 3}
	c.Put("first", "v")
	c.WaitValue("first", "v", all...)
	c.RunUntil("every replica to truncate its log to the tail", 100, func() bool {
		return truncatedToTail(t, c, all...)
	})
	c.Cut(lagging)
	for i := range 50 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.Tick(30) // many truncation rounds
	if _, err := run(t, c, c.Node(leader).Host, "the transfer", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return nil, h.TransferLeader(ctx, 1, 0, ids.ReplicaID(next))
	}); err != nil {
		t.Fatalf("TransferLeader: %v", err)
	}
	if got := c.WaitLeader(1); got != next {
		t.Fatalf("leader is node %d, want %d", got, next)
	}
	snaps := countSnapshots(c)
	c.Heal(lagging)
	c.WaitValue("k49", "v", all...)
	if n := snaps.Load(); n != 0 {
		t.Fatalf("the new leader sent %d snapshot(s) to a follower within the cap: it had truncated past it as a follower", n)
	}
}
