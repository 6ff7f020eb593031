package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/concord-kv/concord/client"
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

// TestPausedLeaderKeepalive: with per-attempt timeouts off (one attempt may
// take the whole deadline), a write to a SIGSTOPped leader over the
// client's default wire, the framed TCP one, is freed by the connection's
// keepalive (a ping unanswered within 3 s after 10 s of silence), not by
// the call's 40 s deadline: it fails over and succeeds within that one
// call. After the node resumes, the client's calls through it (stale reads
// go to the endpoint given) redial and are served.
func TestPausedLeaderKeepalive(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	const shard = 2
	key := testcluster.KeyInShard(rt, shard, "keepalive-")
	leader := c.LeaderOf(t, shard, 10*time.Second)
	opts := c.ClientOptions(c.Addr(leader))
	opts.AttemptTimeout = -1
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.NewWithOptions(octx, opts)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, _, err := cl.Put(ctx, key, []byte("before")); err != nil { // the client learns the leader
		t.Fatal(err)
	}
	if now := c.LeaderOf(t, shard, 10*time.Second); now != leader {
		t.Skipf("shard %d's leadership moved from node %d to %d before the pause", shard, leader, now)
	}

	c.Pause(leader)
	pctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	start := time.Now()
	_, _, err = cl.Put(pctx, key, []byte("during"))
	cancel()
	if err != nil {
		c.Resume(leader)
		t.Fatalf("write with node %d (the leader) paused failed after %v: %v", leader, time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("write with the leader paused took %v", time.Since(start).Round(time.Millisecond))

	c.Resume(leader)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		v, found, err := cl.Get(rctx, key, client.Stale())
		if err == nil && found && string(v) == "during" {
			break
		}
		if rctx.Err() != nil {
			t.Fatalf("stale read through node %d after it resumed: %q %v %v", leader, v, found, err)
		}
		time.Sleep(50 * time.Millisecond) // the pace of the polling
	}
}
