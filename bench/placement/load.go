package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/concord-kv/concord/internal/bench"
)

// benchConfig is `concord bench --workload W --keys K --value-size V
// --clients C --endpoints E` as internal/bench takes it. The endpoints are
// the first three nodes, which no move removes; the client learns the
// others from the routing table.
func (d *driver) benchConfig(c *cluster, workload string, keys, valueSize, clients int) bench.Config {
	addrs := c.lc.Addrs()
	return bench.Config{Target: "concord", Endpoints: addrs[:min(3, len(addrs))], Workload: workload,
		Keys: keys, KeySize: 16, ValueSize: valueSize, Clients: clients, Conns: 1,
		Consistency: "linearizable", Seed: 1}
}

// preload puts keys keys of valueSize bytes once (`concord bench
// --workload put --preload`), the keys later YCSB runs address.
func (d *driver) preload(ctx context.Context, c *cluster, keys, valueSize int) error {
	cfg := d.benchConfig(c, "put", keys, valueSize, min(d.p.preloadClients, keys))
	cfg.Preload, cfg.Ops = true, 1
	_, err := runBench(ctx, cfg)
	return err
}

func runBench(ctx context.Context, cfg bench.Config) (*bench.Result, error) {
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	t, err := bench.Dial(dctx, cfg, cfg.Clients)
	cancel()
	if err != nil {
		return nil, err
	}
	defer t.Close()
	return bench.Run(ctx, cfg, []bench.Target{t}, nil)
}

// loadRun is a YCSB A run in the background, ended by stop.
type loadRun struct {
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	res    *bench.Result
	err    error
}

// startLoad starts YCSB A over the preloaded keys, to run until stop.
func (d *driver) startLoad(ctx context.Context, c *cluster) (*loadRun, error) {
	cfg := d.benchConfig(c, "a", d.p.keys, d.p.valueSize, d.p.clients)
	cfg.Duration = time.Hour // ended by stop
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	t, err := bench.Dial(dctx, cfg, cfg.Clients)
	cancel()
	if err != nil {
		return nil, err
	}
	lctx, lcancel := context.WithCancel(ctx)
	l := &loadRun{start: time.Now(), cancel: lcancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer t.Close()
		l.res, l.err = bench.Run(lctx, cfg, []bench.Target{t}, nil)
	}()
	return l, nil
}

func (l *loadRun) stop() *bench.Result {
	l.cancel()
	<-l.done
	return l.res
}

// window is YCSB A throughput over part of a run, from the run's 0.5 s
// samples: mean over the window, the lowest sample, and errors.
type window struct {
	nodes   int
	seconds float64
	mean    float64
	min     float64
	errors  int64
	p99ms   float64 // whole run (baseline only)
}

// windowOf averages the samples of res that end in (from, to] seconds
// after the run's start, weighting each by its length.
func windowOf(res *bench.Result, from, to float64) window {
	w := window{min: -1}
	if res == nil {
		return w
	}
	var ops, secs, prev float64
	for _, s := range res.Timeline {
		dt := s.T - prev
		end := s.T
		prev = s.T
		if end <= from || end > to+bench.SampleInterval.Seconds() {
			continue
		}
		ops += s.OpsPerSec * dt
		secs += dt
		w.errors += s.Errors
		if w.min < 0 || s.OpsPerSec < w.min {
			w.min = s.OpsPerSec
		}
	}
	if secs > 0 {
		w.mean = ops / secs
	}
	w.seconds = secs
	return w
}

// ycsbBaseline runs YCSB A for the configured duration with no move.
func (d *driver) ycsbBaseline(ctx context.Context, c *cluster, n int) (window, error) {
	cfg := d.benchConfig(c, "a", d.p.keys, d.p.valueSize, d.p.clients)
	cfg.Duration = d.p.ycsbDuration
	res, err := runBench(ctx, cfg)
	if err != nil {
		return window{}, err
	}
	if res.Interrupted {
		return window{}, errors.New("YCSB A baseline interrupted")
	}
	w := windowOf(res, 0, res.DurationSec)
	w.nodes, w.mean, w.errors, w.p99ms = n, res.Throughput, res.Errors, res.Latency.P99
	d.logf("YCSB A at %d nodes, no move: %.0f ops/s (p99 %.1f ms, %d errors)", n, w.mean, w.p99ms, w.errors)
	return w, nil
}

func (w window) String() string {
	return fmt.Sprintf("%.0f ops/s (lowest 0.5 s sample %.0f, %d errors, %.1f s)", w.mean, w.min, w.errors, w.seconds)
}
