package main

import (
	"context"
	"fmt"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
)

// moveRow is one timed move: a node added (N→N+1) or removed (N+1→N).
type moveRow struct {
	from, to int
	add      bool
	loaded   bool         // YCSB A ran throughout
	times    balanceTimes // since the node's start or the remove command
	exited   time.Duration
	load     *window // throughput during the move, when loaded
	err      string
}

// balancePhase: one cluster grows from the first size to the last; at
// each size N it measures N→N+1 and back unloaded, YCSB A with no move,
// then N→N+1 and back under YCSB A; at the last size it counts keys per
// node.
func (d *driver) balancePhase(ctx context.Context) error {
	n := d.p.sizes[0]
	c, err := d.startCluster(ctx, "balance", n)
	if err != nil {
		return err
	}
	defer c.stop()
	if _, err := c.waitBalanced(ctx, time.Now(), n, d.p); err != nil {
		return err
	}
	d.logf("preloading %d keys of %d bytes", d.p.keys, d.p.valueSize)
	t := time.Now()
	if err := d.preload(ctx, c, d.p.keys, d.p.valueSize); err != nil {
		return err
	}
	d.rep.preload = fmt.Sprintf("%d keys × %d B preloaded in %.1f s (%d clients)", d.p.keys, d.p.valueSize, time.Since(t).Seconds(), d.p.preloadClients)
	d.logf("%s", d.rep.preload)
	for _, size := range d.p.sizes {
		for n < size { // grow, untimed
			i, start, err := c.join()
			if err != nil {
				return err
			}
			if _, err := c.waitBalanced(ctx, start, n+1, d.p); err != nil {
				return err
			}
			n++
			d.logf("grew to %d nodes (node index %d)", n, i)
		}
		if err := d.measureSize(ctx, c, n); err != nil {
			return err
		}
	}
	return d.keysPerNode(ctx, c, n)
}

// measureSize runs the moves at n nodes (N→N+1→N with no load unless
// quick, then YCSB A alone, then N→N+1→N under it); the cluster is back at
// n after.
func (d *driver) measureSize(ctx context.Context, c *cluster, n int) error {
	for _, loaded := range []bool{false, true} {
		if !loaded && !d.p.idleMoves {
			continue
		}
		if loaded {
			w, err := d.ycsbBaseline(ctx, c, n)
			if err != nil {
				return err
			}
			d.rep.baselines = append(d.rep.baselines, w)
		}
		i, err := d.move(ctx, c, n, true, loaded, -1)
		if err != nil {
			return err
		}
		if _, err := d.move(ctx, c, n+1, false, loaded, i); err != nil {
			return err
		}
	}
	return nil
}

// move adds a node (add, from n nodes) or removes node index i (from n
// nodes), optionally under YCSB A, waits for balance and records the row;
// it returns the index of an added node.
func (d *driver) move(ctx context.Context, c *cluster, n int, add, loaded bool, i int) (int, error) {
	row := moveRow{from: n, to: n + 1, add: add, loaded: loaded}
	if !add {
		row.to = n - 1
	}
	var ld *loadRun
	if loaded {
		var err error
		if ld, err = d.startLoad(ctx, c); err != nil {
			return 0, err
		}
		if err := sleepCtx(ctx, d.p.leadIn); err != nil {
			ld.stop()
			return 0, err
		}
	}
	var start time.Time
	var err error
	if add {
		i, start, err = c.join()
	} else {
		start, err = c.remove(ctx, i)
	}
	if err == nil {
		row.times, err = c.waitBalanced(ctx, start, row.to, d.p)
	}
	if !add && err == nil {
		if p := c.lc.Process(i); p != nil {
			<-p.Done() // a removed node stops itself
			row.exited = time.Since(start)
		}
	}
	if ld != nil {
		res := ld.stop()
		w := windowOf(res, start.Sub(ld.start).Seconds(), time.Since(ld.start).Seconds())
		row.load = &w
	}
	if err != nil {
		row.err = err.Error()
	}
	d.rep.moves = append(d.rep.moves, row)
	d.logf("%s", row.String())
	return i, err
}

func (r moveRow) String() string {
	verb := "remove"
	if r.add {
		verb = "add"
	}
	s := fmt.Sprintf("%s %d→%d (load %v): shape %.1fs, replicas %.1fs, replicas+leaders %.1fs",
		verb, r.from, r.to, r.loaded, r.times.shaped.Seconds(), r.times.replicas.Seconds(), r.times.full.Seconds())
	if r.times.leadersMissed != "" {
		s += " (" + r.times.leadersMissed + ")"
	}
	if r.load != nil {
		s += fmt.Sprintf(", YCSB A %.0f ops/s (min %.0f)", r.load.mean, r.load.min)
	}
	if r.err != "" {
		s += ": " + r.err
	}
	return s
}

// keysPerNode counts each user shard's keys (a backup stream per shard,
// which reads the shard at its leader and counts what it sends) and spreads
// them over the nodes by the shard descriptors.
func (d *driver) keysPerNode(ctx context.Context, c *cluster, n int) error {
	v, err := c.status(ctx)
	if err != nil {
		return err
	}
	cl, err := client.New(ctx, c.lc.Addr(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	shardKeys := map[uint64]int64{}
	var total int64
	for _, s := range v.shards {
		if s.meta {
			continue
		}
		var count int64
		err := cl.BackupShard(ctx, s.id, func(ch *concordpb.BackupShardChunk) error {
			count += int64(len(ch.GetRecords()))
			return nil
		})
		if err != nil {
			return fmt.Errorf("counting shard %d: %w", s.id, err)
		}
		shardKeys[s.id] = count
		total += count
	}
	held, led := v.keysPerNode(shardKeys)
	replicas, leaders := v.counts()
	d.rep.keys = &keysResult{nodes: n, total: total, shardKeys: shardKeys, held: held, led: led,
		replicas: replicas, leaders: leaders, up: v.upNodes(), shards: v.shards}
	d.logf("counted %d keys in %d shards over %d nodes", total, len(shardKeys), n)
	return nil
}

type keysResult struct {
	nodes             int
	total             int64
	shardKeys         map[uint64]int64
	held, led         map[uint64]int64
	replicas, leaders map[uint64]int
	up                []uint64
	shards            []shardView
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
