package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestKilledNodeCatchesUp: a node SIGKILLed in the middle of 5,000 writes
// from 8 goroutines, and restarted while they continue, ends up holding
// every value in its own replicas. Every write succeeds: one node of three
// down never makes the cluster refuse writes.
func TestKilledNodeCatchesUp(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	const victim = 1
	keys := seqKeys("catchup-", 5000)
	start := time.Now()
	b := startBurst(ctx, cl, keys, valueOf, 8, 30*time.Second)

	waitAcked(t, b, 1500, 60*time.Second)
	c.Kill(victim)
	t.Logf("killed node %d after %d acknowledged writes", victim, b.acked.Load())
	waitAcked(t, b, 3500, 60*time.Second)
	c.Start(victim)
	restarted := time.Now()
	t.Logf("restarted node %d after %d acknowledged writes", victim, b.acked.Load())

	acked := b.wait()
	wrote := time.Now()
	if len(acked) != len(keys) {
		t.Fatalf("%d of %d writes failed with one node down; first error: %v", len(keys)-len(acked), len(keys), b.err())
	}
	t.Logf("5000 writes in %v (%.0f/s)", wrote.Sub(start).Round(time.Millisecond), 5000/wrote.Sub(start).Seconds())

	want := map[string]string{}
	for _, k := range keys {
		want[k] = valueOf(k)
	}
	waitStart := time.Now()
	caught := waitStart.Add(waitStaleHasAll(t, c, victim, want, 60*time.Second))
	t.Logf("node %d holds all 5000 values %v after its restart, %v after the last write", victim,
		caught.Sub(restarted).Round(time.Millisecond), caught.Sub(wrote).Round(time.Millisecond))
}

var installedSnapshot = regexp.MustCompile(`installed snapshot.* shard=(\d+)`)

// TestSnapshotCatchUp: with a tiny raft log (keep 20 entries, truncate after
// 20 more), a node stopped while 3,000 writes land on 16 shards finds every
// shard's log truncated past its position; once restarted it catches up by
// installing snapshots (it says so in its log) and holds every value.
func TestSnapshotCatchUp(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Shards: 16,
		ExtraArgs: []string{"--raft-log-keep-entries", "20", "--raft-log-truncate-entries", "20"}})
	ctx := context.Background()
	cl := c.Client(t)
	const victim = 2
	before := seqKeys("snap-before-", 100)
	if b := startBurst(ctx, cl, before, valueOf, 4, 30*time.Second); len(b.wait()) != len(before) {
		t.Fatalf("writes failed on a healthy cluster: %v", b.err())
	}
	c.Stop(victim)

	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied := map[uint64]uint64{}
	for _, s := range st.GetShards() {
		applied[s.GetShard().GetShardId()] = s.GetAppliedIndex()
	}
	during := seqKeys("snap-during-", 3000)
	start := time.Now()
	b := startBurst(ctx, cl, during, valueOf, 8, 30*time.Second)
	if len(b.wait()) != len(during) {
		t.Fatalf("writes failed with one node stopped: %v", b.err())
	}
	t.Logf("3000 writes with node %d stopped in %v", victim, time.Since(start).Round(time.Millisecond))
	// Every user shard's log must have moved well past the truncation
	// threshold (keep 20 + truncate 20) while the node was away.
	testcluster.WaitFor(t, 10*time.Second, func() error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range st.GetShards() {
			id := s.GetShard().GetShardId()
			if s.GetIsMeta() {
				continue
			}
			if grew := s.GetAppliedIndex() - applied[id]; s.GetAppliedIndex() < applied[id] || grew < 80 {
				return fmt.Errorf("shard %d applied only %d entries (%d -> %d) while node %d was stopped",
					id, grew, applied[id], s.GetAppliedIndex(), victim)
			}
		}
		return nil
	})

	mark := c.LogMark(victim)
	c.Start(victim)
	restarted := time.Now()
	want := map[string]string{}
	for _, k := range append(before, during...) {
		want[k] = valueOf(k)
	}
	caught := time.Now().Add(waitStaleHasAll(t, c, victim, want, 60*time.Second))
	t.Logf("node %d holds all %d values %v after its restart", victim, len(want), caught.Sub(restarted).Round(time.Millisecond))

	shards := map[string]bool{}
	testcluster.WaitFor(t, 10*time.Second, func() error {
		for _, m := range installedSnapshot.FindAllStringSubmatch(c.LogSince(victim, mark), -1) {
			shards[m[1]] = true
		}
		if len(shards) == 0 {
			return fmt.Errorf("node %d logged no \"installed snapshot\" after its restart", victim)
		}
		return nil
	})
	t.Logf("node %d installed snapshots of %d shards", victim, len(shards))
}
