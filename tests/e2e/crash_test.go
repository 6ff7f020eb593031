package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestWholeClusterCrash: all three nodes SIGKILLed at once in the middle of
// a write burst from 8 goroutines, then restarted: every write that was
// acknowledged is there with its value. (Writes that failed may or may not
// be there; each key is written once, so either is fine.)
func TestWholeClusterCrash(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	cl := c.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := seqKeys("crash-", 100000) // far more than get written before the crash
	b := startBurst(ctx, cl, keys, valueOf, 8, 5*time.Second)
	waitAcked(t, b, 1000, 60*time.Second)
	c.KillAll()
	cancel()
	acked := b.wait()
	t.Logf("whole cluster killed: %d writes acknowledged, %d failed", len(acked), b.failed.Load())
	if len(acked) < 1000 {
		t.Fatalf("only %d writes were acknowledged before the crash", len(acked))
	}

	for i := 0; i < c.N(); i++ {
		c.Start(i)
	}
	restarted := time.Now()
	c.WaitReady(t, readyTimeout)
	cl2 := c.Client(t)
	for k, v := range acked {
		got, found, err := cl2.Get(context.Background(), []byte(k))
		if err != nil {
			t.Fatalf("get %q after the restart: %v", k, err)
		}
		if !found || string(got) != v {
			t.Fatalf("acknowledged write %q=%q lost in a whole-cluster crash: found=%v value=%q", k, v, found, got)
		}
	}
	t.Logf("all %d acknowledged writes read back (linearizable) %v after the restart", len(acked),
		time.Since(restarted).Round(time.Millisecond))

	// Every replica, not just the leaders, kept them: the nodes' own
	// replicas (stale scans) hold every acknowledged write.
	for i := 0; i < c.N(); i++ {
		waitStaleHasAll(t, c, i, acked, 30*time.Second)
	}
	// And the cluster still takes writes.
	if _, _, err := cl2.Put(context.Background(), []byte("after-crash"), []byte("ok")); err != nil {
		t.Fatal(fmt.Errorf("put after the restart: %w", err))
	}
}
