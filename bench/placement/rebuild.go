package main

import (
	"context"
	"fmt"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// rebuildRow is one disk-loss rebuild, times since the wiped node's
// restart.
type rebuildRow struct {
	valueSize, keys int
	preloadSec      float64
	joined          time.Duration // its new id is UP
	voters          time.Duration // every shard has a voter on it, none on the old id, no learner
	caughtUp        time.Duration // ... and each of those replicas applied the leader's commit index
	snapRecv        float64       // snapshot bytes the node received (its /metrics)
	err             string
}

// rebuildPhase: for each value size, a fresh 3-node cluster (every node
// holds every shard) gets rebuildBytes of data; node 3 is killed, its data
// dir deleted, and it is started again empty.
func (d *driver) rebuildPhase(ctx context.Context) error {
	for _, size := range d.p.rebuildSizes {
		row, err := d.rebuild(ctx, size)
		if err != nil {
			row.err = err.Error()
		}
		d.rep.rebuilds = append(d.rep.rebuilds, row)
		d.logf("rebuild at %d B values: %s", size, row.String())
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (d *driver) rebuild(ctx context.Context, size int) (rebuildRow, error) {
	keys := (d.p.rebuildBytes + size - 1) / size
	row := rebuildRow{valueSize: size, keys: keys}
	c, err := d.startCluster(ctx, fmt.Sprintf("rebuild-%d", size), d.p.replicas)
	if err != nil {
		return row, err
	}
	defer c.stop()
	if _, err := c.waitBalanced(ctx, time.Now(), d.p.replicas, d.p); err != nil {
		return row, err
	}
	t := time.Now()
	cfg := d.benchConfig(c, "put", keys, size, min(16, keys))
	cfg.Preload, cfg.Ops = true, 1
	if _, err := runBench(ctx, cfg); err != nil {
		return row, fmt.Errorf("preload: %w", err)
	}
	row.preloadSec = time.Since(t).Seconds()
	victim := c.lc.N() - 1
	addr := c.lc.Addr(victim)
	v, err := c.status(ctx)
	if err != nil {
		return row, err
	}
	oldID, _, _ := v.nodeByAddr(addr)
	if err := c.lc.Kill(victim); err != nil {
		return row, err
	}
	if err := c.lc.Wipe(victim); err != nil {
		return row, err
	}
	start := time.Now()
	if err := c.lc.Start(victim); err != nil {
		return row, err
	}
	err = c.poll(ctx, d.p.poll, d.p.rebuildTimeout, func(v view) (bool, error) {
		return d.rebuildDone(ctx, c, v, victim, oldID, start, &row), nil
	})
	return row, err
}

// rebuildDone notes the stages the rebuilt node has reached and reports
// whether it has them all.
func (d *driver) rebuildDone(ctx context.Context, c *cluster, v view, victim int, oldID uint64, start time.Time, row *rebuildRow) bool {
	id, state, ok := v.nodeByAddr(c.lc.Addr(victim))
	if !ok || id == oldID || state != concordpb.NodeState_NODE_UP {
		return false
	}
	now := time.Since(start)
	if row.joined == 0 {
		row.joined = now
	}
	for _, s := range v.shards {
		if s.replacedOn(id, oldID) != "" {
			return false
		}
	}
	if row.voters == 0 {
		row.voters = now
	}
	applied, snap, err := c.metrics(ctx, victim)
	if err != nil {
		return false
	}
	row.snapRecv = snap
	for _, s := range v.shards {
		if applied[s.id] < s.commit {
			return false
		}
	}
	row.caughtUp = time.Since(start)
	return true
}

// replacedOn says what keeps the shard from having a voter on node id in
// place of one on oldID, or "" if nothing does.
func (s shardView) replacedOn(id, oldID uint64) string {
	on := false
	for _, r := range s.replicas {
		switch {
		case r.node == oldID:
			return "still has a replica on the old id"
		case r.learner:
			return "has a learner"
		case r.node == id:
			on = true
		}
	}
	if !on {
		return "has no replica on the new id"
	}
	return ""
}

func (r rebuildRow) String() string {
	s := fmt.Sprintf("%d keys (preload %.1fs): joined %.1fs, voters %.1fs, caught up %.1fs, snapshot bytes received %.0f MiB",
		r.keys, r.preloadSec, r.joined.Seconds(), r.voters.Seconds(), r.caughtUp.Seconds(), r.snapRecv/(1<<20))
	if r.err != "" {
		s += ": " + r.err
	}
	return s
}
