package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// quorumBound is how soon a restarted follower, 100 MiB behind, must form a
// working quorum with its leader. The smoke check allows 60 s; with
// byte-bounded replication and heartbeats on their own stream it takes a few
// seconds here, so 30 s leaves room for a loaded machine.
const quorumBound = 30 * time.Second

// TestQuorumAfterLargeBacklog: with one shard, a follower stopped while 200
// values of 512 KiB (100 MiB) are written, then restarted while the other
// follower is killed, forms a working quorum with the leader within
// quorumBound: a put succeeds. The leader must ship the backlog in pieces
// that fit its transport, and the follower's heartbeat answers must not wait
// behind them, or the leader steps down again and again ("quorum is not
// active") and the two never commit. Before the fix they did not within 60 s.
func TestQuorumAfterLargeBacklog(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Shards: 1})
	ctx := context.Background()
	cl := c.Client(t)
	leader := c.LeaderOf(t, 1, readyTimeout)
	lagging := (leader + 1) % c.N()
	c.Stop(lagging)

	keys := seqKeys("large-", 200)
	large := func(k string) string { return k + strings.Repeat("v", 512<<10-len(k)) }
	start := time.Now()
	if acked := startBurst(ctx, cl, keys, large, 4, 60*time.Second).wait(); len(acked) != len(keys) {
		t.Fatalf("%d of %d writes of 512 KiB failed with one follower stopped", len(keys)-len(acked), len(keys))
	}
	t.Logf("wrote 100 MiB with node %d stopped in %v", lagging, time.Since(start).Round(time.Millisecond))

	// The leader may have moved during the writes; kill whichever node is
	// neither the leader now nor the lagging one.
	leader = c.LeaderOf(t, 1, readyTimeout)
	other := 3 - leader - lagging
	c.Start(lagging)
	c.Kill(other)
	restarted := time.Now()
	t.Logf("restarted node %d, killed node %d; node %d leads", lagging, other, leader)
	took := testcluster.WaitFor(t, 60*time.Second, func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, _, err := cl.Put(pctx, []byte("after-backlog"), []byte("1")); err != nil {
			return fmt.Errorf("put with nodes %d and %d up: %w", leader, lagging, err)
		}
		return nil
	})
	t.Logf("nodes %d and %d committed a put %v after the restart", leader, lagging, time.Since(restarted).Round(time.Millisecond))
	if took > quorumBound {
		t.Fatalf("the restarted follower took %v to form a quorum; the bound is %v", took, quorumBound)
	}
}
