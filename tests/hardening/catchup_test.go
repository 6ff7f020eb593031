// Package hardening holds long end-to-end checks of replication under load
// that are too slow for `make test`; run them with `make test-hardening`.
package hardening

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

// Generous bounds for a loaded 2-core machine; the figures measured are
// logged (and recorded in docs/testing.md).
const (
	backlogBytes  = 200 << 20
	catchUpBound  = 3 * time.Minute
	rssBound      = 2 << 30 // VmHWM of any node, bytes
	otherPutBound = 10 * time.Second
)

// TestLargeCatchUpWhileOtherShardsCommit: a follower stopped while 200 MiB
// of values of 100 KiB–1 MiB are written to shard 1 catches up by log after
// its restart, within catchUpBound, while writes to the other shards (whose
// traffic shares its links) keep committing, each within otherPutBound; no
// node's peak resident memory exceeds rssBound.
func TestLargeCatchUpWhileOtherShardsCommit(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Shards: 4})
	c.WaitReady(t, time.Minute)
	ctx := context.Background()
	cl := c.Client(t)
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.LeaderOf(t, 1, time.Minute)
	lagging := (leader + 1) % c.N()
	laggingID, err := c.NodeID(ctx, lagging)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(lagging)

	// Write the backlog to shard 1 with 4 writers.
	rng := rand.New(rand.NewSource(1))
	var keys [][]byte
	var sizes []int
	for total := 0; total < backlogBytes; {
		n := 100<<10 + rng.Intn(924<<10)
		keys, sizes = append(keys, testcluster.KeyInShard(rt, 1, fmt.Sprintf("backlog-%d-", len(keys)))), append(sizes, n)
		total += n
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	next := make(chan int, len(keys))
	for i := range keys {
		next <- i
	}
	close(next)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, _, err := cl.Put(pctx, keys[i], []byte(strings.Repeat("v", sizes[i])))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("put %d (%d bytes): %w", i, sizes[i], err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writing the backlog with node %d stopped: %v", lagging, err)
	}
	t.Logf("wrote %d values, %d MiB, to shard 1 with node %d stopped in %v", len(keys), backlogBytes>>20, lagging,
		time.Since(start).Round(time.Millisecond))
	// The marker is written after every backlog write was acknowledged, so
	// it follows them all in shard 1's log: a replica that applied it holds
	// the whole backlog.
	marker := testcluster.KeyInShard(rt, 1, "marker-")
	if _, _, err := cl.Put(ctx, marker, []byte("after-backlog")); err != nil {
		t.Fatal(err)
	}

	// Small writes to shards 2..4 run throughout the catch-up.
	stop := make(chan struct{})
	var other struct {
		sync.Mutex
		n       int
		slowest time.Duration
		err     error
	}
	var owg sync.WaitGroup
	owg.Add(1)
	go func() {
		defer owg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := testcluster.KeyInShard(rt, uint64(2+i%3), fmt.Sprintf("other-%d-", i))
			pctx, cancel := context.WithTimeout(ctx, 2*otherPutBound)
			began := time.Now()
			_, _, err := cl.Put(pctx, k, []byte("small"))
			took := time.Since(began)
			cancel()
			other.Lock()
			other.n++
			other.slowest = max(other.slowest, took)
			if err != nil && other.err == nil {
				other.err = fmt.Errorf("put to shard %d: %w", 2+i%3, err)
			}
			other.Unlock()
		}
	}()

	c.Start(lagging)
	took := testcluster.WaitFor(t, catchUpBound, func() error {
		resp, err := c.StaleGet(ctx, lagging, marker)
		switch {
		case err != nil:
			return fmt.Errorf("stale get on node %d: %w", lagging, err)
		case resp.GetHeader().GetServedByNodeId() != laggingID:
			return fmt.Errorf("node %d (id %d) has no replica of shard 1 yet", lagging, laggingID)
		case string(resp.GetValue()) != "after-backlog":
			return fmt.Errorf("node %d has not applied the marker written after the backlog", lagging)
		}
		return nil
	})
	close(stop)
	owg.Wait()
	t.Logf("node %d caught up %d MiB of shard 1 in %v after its restart", lagging, backlogBytes>>20, took.Round(time.Millisecond))
	for _, i := range []int{0, len(keys) / 2, len(keys) - 1} {
		resp, err := c.StaleGet(ctx, lagging, keys[i])
		if err != nil || len(resp.GetValue()) != sizes[i] {
			t.Errorf("backlog value %d on node %d: %d bytes, %v; want %d bytes", i, lagging, len(resp.GetValue()), err, sizes[i])
		}
	}
	other.Lock()
	t.Logf("meanwhile %d writes to shards 2-4 committed, the slowest in %v", other.n, other.slowest.Round(time.Millisecond))
	if other.err != nil {
		t.Errorf("a write to another shard failed during the catch-up: %v", other.err)
	}
	if other.slowest > otherPutBound || other.n == 0 {
		t.Errorf("writes to other shards stalled during the catch-up: %d writes, slowest %v (bound %v)", other.n, other.slowest, otherPutBound)
	}
	other.Unlock()
	for i := range c.N() {
		hwm, err := peakRSS(c.PID(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %d peak RSS (VmHWM) %d MiB", i, hwm>>20)
		if hwm > rssBound {
			t.Errorf("node %d peaked at %d MiB resident; the bound is %d MiB", i, hwm>>20, rssBound>>20)
		}
	}
}

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
