package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestPausedLeaderFailover: SIGSTOP the leader of a shard that the client
// knows leads it. Each write to that shard, with a deadline of 5 s, must
// succeed within that one call: its attempt to the stalled leader times out
// and the client fails over to the other nodes (and, once they have elected
// a new leader, writes there) instead of spending the whole deadline on the
// stalled node and reporting the write ambiguous.
func TestPausedLeaderFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	const shard = 3
	key := testcluster.KeyInShard(rt, shard, "pause-")
	leader := c.LeaderOf(t, shard, 10*time.Second)
	if _, _, err := cl.Put(ctx, key, []byte("before")); err != nil { // the client learns the leader
		t.Fatal(err)
	}
	if now := c.LeaderOf(t, shard, 10*time.Second); now != leader {
		t.Skipf("shard %d's leadership moved from node %d to %d before the pause", shard, leader, now)
	}

	c.Pause(leader)
	defer c.Resume(leader)
	paused := time.Now()
	const perWrite = 5 * time.Second
	var last string
	for i := range 5 {
		last = fmt.Sprintf("during-%d", i)
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, perWrite)
		_, _, err := cl.Put(pctx, key, []byte(last))
		cancel()
		if err != nil {
			t.Fatalf("write %d, %v after node %d (shard %d's leader) was paused, failed after %v: %v",
				i, time.Since(paused).Round(time.Millisecond), leader, shard, time.Since(start).Round(time.Millisecond), err)
		}
		t.Logf("write %d took %v", i, time.Since(start).Round(time.Millisecond))
	}
	v, found, err := cl.Get(ctx, key)
	if err != nil || !found || string(v) != last {
		t.Fatalf("Get with the old leader paused = %q, %v, %v; want %q", v, found, err, last)
	}
}
