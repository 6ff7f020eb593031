package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
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

// TestCleanStopHandsOffLeaderships protects docs/operations.md's promise
// for rolling restarts: on a settled cluster, a node stopped with SIGTERM
// hands off every leadership it holds and takes none back, so it exits
// well before its handoff deadline (4 s), logs no leadership left behind,
// and every shard is led by a running node right after it exited, not an
// election timeout later. Before the fix, the placement leader's leader
// balancing moved leaderships back onto the stopping node as soon as it
// had handed them off: its handoff always ran into the deadline, and it
// exited leading shards. Two rounds, the node restarted in between.
func TestCleanStopHandsOffLeaderships(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 6})
	const shards = 6
	for round, i := range []int{0, 1} {
		var st *concordpb.StatusResponse
		testcluster.WaitFor(t, readyTimeout, func() error {
			var err error
			if st, err = placementStatus(c); err != nil {
				return err
			}
			return balanced(st)
		})
		id, err := c.NodeID(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		led := 0
		for _, ns := range st.GetNodes() {
			if ns.GetNode().GetNodeId() == id {
				led = int(ns.GetLeaders())
			}
		}
		if led == 0 {
			t.Fatalf("round %d: node %d (id %d) leads nothing on a settled cluster; the test proves nothing", round, i, id)
		}
		marks := make([]int64, c.N())
		for j := range marks {
			marks[j] = c.LogMark(j)
		}
		start := time.Now()
		c.Stop(i) // SIGTERM; fails the test unless the node exits 0
		took := time.Since(start)
		if log := c.LogSince(i, marks[i]); strings.Contains(log, "not handed off") || !strings.Contains(log, "leaderships handed off") {
			t.Fatalf("round %d: node %d (led %d shards) did not hand off its leaderships (stop took %v):\n%s", round, i, led, took, log)
		}
		if took > 3*time.Second {
			t.Fatalf("round %d: node %d took %v to stop; the handoff should not wait for its deadline", round, i, took)
		}
		// Led at exit by running nodes: far less than an election timeout
		// (1-2 s) after it.
		waited := testcluster.WaitFor(t, time.Second, func() error {
			for shard := uint64(1); shard <= shards; shard++ {
				if _, err := c.Leader(context.Background(), shard); err != nil {
					return err
				}
			}
			return nil
		})
		// The placement leader planned no leadership onto the stopping node.
		onto := fmt.Sprintf("@n%d (via", id)
		for j := range c.N() {
			for _, line := range strings.Split(c.LogSince(j, marks[j]), "\n") {
				if strings.Contains(line, "transfer-leader") && strings.Contains(line, onto) {
					t.Errorf("round %d: node %d moved a leadership onto stopping node %d: %s", round, j, id, line)
				}
			}
		}
		t.Logf("round %d: node %d led %d shards, stopped in %v; every shard led elsewhere %v later", round, i, led, took.Round(time.Millisecond), waited.Round(time.Millisecond))
		c.Start(i)
	}
}
