package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// maxRecovery is how soon after its leader's kill -9 a shard must accept
// writes again (DESIGN: "recovers leadership within a few seconds").
const maxRecovery = 10 * time.Second

// TestLeaderKillRecovery: kill -9 the leader of a shard; writes to that
// shard's keys succeed again within maxRecovery, on a new leader, and no
// acknowledged write is lost.
func TestLeaderKillRecovery(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	const shard = 5
	key := testcluster.KeyInShard(rt, shard, "failover-")
	if _, _, err := cl.Put(ctx, key, []byte("before")); err != nil {
		t.Fatal(err)
	}
	leader := c.LeaderOf(t, shard, 10*time.Second)
	t.Logf("shard %d is led by node %d; killing it", shard, leader)

	c.Kill(leader)
	killed := time.Now()
	var attempts int
	var last string
	for {
		attempts++
		v := fmt.Sprintf("after-%d", attempts)
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, _, err := cl.Put(pctx, key, []byte(v))
		cancel()
		if err == nil {
			last = v
			break
		}
		if time.Since(killed) > maxRecovery {
			t.Fatalf("shard %d accepted no write within %v of its leader's kill -9; last error: %v", shard, maxRecovery, err)
		}
	}
	recovery := time.Since(killed)
	t.Logf("shard %d accepted writes again %v after its leader was killed (%d attempts)", shard, recovery.Round(time.Millisecond), attempts)

	next := c.LeaderOf(t, shard, 10*time.Second)
	if next == leader {
		t.Fatalf("node %d, which was killed, is reported leading shard %d", leader, shard)
	}
	v, found, err := cl.Get(ctx, key)
	if err != nil || !found || string(v) != last {
		t.Fatalf("Get after failover = %q, %v, %v; want %q", v, found, err, last)
	}
	// The other shards were not disturbed: a write to each succeeds.
	for s := uint64(1); s <= testcluster.DefaultShards; s++ {
		k := testcluster.KeyInShard(rt, s, "other-")
		if _, _, err := cl.Put(ctx, k, []byte("x")); err != nil {
			t.Fatalf("write to shard %d with one node down: %v", s, err)
		}
	}
}
