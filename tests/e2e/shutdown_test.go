package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestSIGTERMUnderLoad protects graceful shutdown under load: while clients
// hammer every node with linearizable gets and puts, a node stopped with
// SIGTERM exits 0 with no panic in its log (before the fix, a read past its
// barrier could touch Pebble after Close and crash the process). Repeated
// on each node to make the race likely.
func TestSIGTERMUnderLoad(t *testing.T) {
	start := time.Now()
	c := startCluster(t, testcluster.Options{Shards: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ops atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		cl := c.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := []byte(fmt.Sprintf("k%d", (w*7+i)%32))
				octx, ocancel := context.WithTimeout(ctx, time.Second)
				var err error
				if i%4 == 0 {
					_, _, err = cl.Put(octx, k, []byte("v"))
				} else {
					_, _, err = cl.Get(octx, k)
				}
				ocancel()
				if err == nil {
					ops.Add(1)
				}
			}
		}()
	}
	for round := range 3 {
		i := round % c.N()
		before := ops.Load()
		deadline := time.Now().Add(readyTimeout)
		for ops.Load() < before+50 { // polls until the load runs (again)
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no load (%d operations)", round, ops.Load()-before)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("round %d: load running (%d operations, %v)", round, ops.Load(), time.Since(start).Round(time.Millisecond))
		mark := c.LogMark(i)
		c.Stop(i) // SIGTERM; fails the test unless the node exits 0
		if log := c.LogSince(i, mark); strings.Contains(log, "panic") {
			t.Fatalf("round %d: node %d's log after SIGTERM has a panic:\n%s", round, i, log)
		}
		c.Start(i)
		c.WaitReady(t, readyTimeout)
	}
	cancel()
	wg.Wait()
	t.Logf("%d operations succeeded (%v)", ops.Load(), time.Since(start).Round(time.Millisecond))
}
