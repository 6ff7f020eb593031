package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 µs to 60 s (past any client timeout) at 3
// significant digits, i.e. 0.1 % resolution.
const (
	histMinUs  = 1
	histMaxUs  = 60_000_000
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMinUs, histMaxUs, histDigits) }

// Run preloads the key space if cfg.Preload, then measures until the
// duration or the operation count is reached. Goroutine i uses
// targets[i%len(targets)]. progress, if not nil, gets a live status line
// twice a second. If ctx ends early the result covers what completed.
func Run(ctx context.Context, cfg Config, targets []Target, progress io.Writer) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no targets")
	}
	vals := newValuePool(cfg.ValueSize, rand.New(rand.NewPCG(cfg.Seed, 0)))
	if cfg.Preload {
		if progress != nil {
			fmt.Fprintf(progress, "preloading %d keys...\n", cfg.Keys)
		}
		if err := preload(ctx, cfg, targets, vals); err != nil {
			return nil, fmt.Errorf("preload: %w", err)
		}
	}
	return measure(ctx, cfg, targets, vals, progress)
}

// preload puts every key once, spread over cfg.Clients goroutines, so
// that reads find values. It is not measured.
func preload(ctx context.Context, cfg Config, targets []Target, vals *valuePool) error {
	var wg sync.WaitGroup
	errs := make([]error, cfg.Clients)
	for g := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(g)+(1<<32)))
			t := targets[g%len(targets)]
			key := make([]byte, 0, cfg.KeySize)
			for i := g; i < cfg.Keys && ctx.Err() == nil; i += cfg.Clients {
				key = AppendKey(key[:0], i, cfg.KeySize)
				if err := t.Put(ctx, key, vals.next(rng)); err != nil {
					errs[g] = fmt.Errorf("key %s: %w", keyText(key), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// keyText is a key as an error shows it: whole up to 32 bytes, else its
// start and length (a --key-size of 100000 put the whole key in the
// preload's error, 100 KB of one line around the node's refusal).
func keyText(key []byte) string {
	if len(key) <= 32 {
		return string(key)
	}
	return fmt.Sprintf("%s... (%d bytes)", key[:32], len(key))
}

// measure runs the timed phase.
func measure(ctx context.Context, cfg Config, targets []Target, vals *valuePool, progress io.Writer) (*Result, error) {
	ks := newKeyspace(cfg.Keys)
	ch, err := newChooser(cfg.Distribution, ks)
	if err != nil {
		return nil, err
	}
	workers := make([]*worker, cfg.Clients)
	for i := range workers {
		workers[i] = newWorker(cfg, ks, ch, vals, uint64(i))
	}
	start := time.Now()
	lim := newLimits(cfg, start)
	smp := startSampler(workers, start, progress)
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, targets[i%len(targets)], lim)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	timeline := smp.stop()
	res := buildResult(cfg, workers, elapsed, timeline)
	res.Interrupted = ctx.Err() != nil
	return res, nil
}

// limits ends the run at a deadline, after a number of operations, or
// both (whichever comes first).
type limits struct {
	deadline time.Time    // zero: no deadline
	counted  bool         // whether budget applies
	budget   atomic.Int64 // operations not yet started
}

func newLimits(cfg Config, start time.Time) *limits {
	l := &limits{counted: cfg.Ops > 0}
	if cfg.Duration > 0 {
		l.deadline = start.Add(cfg.Duration)
	}
	l.budget.Store(cfg.Ops)
	return l
}

// take reports whether one more operation may start. The budget is one
// shared atomic: a single add per request is negligible next to a
// network round trip, and it keeps every goroutine busy to the end.
func (l *limits) take() bool {
	if !l.deadline.IsZero() && !time.Now().Before(l.deadline) {
		return false
	}
	return !l.counted || l.budget.Add(-1) >= 0
}

// worker is one client goroutine with its own rng and histograms.
type worker struct {
	// done and errs are read live by the sampler.
	done, errs atomic.Int64

	rng     *rand.Rand
	pick    func() int
	ks      *keyspace
	vals    *valuePool
	mix     Mix
	keySize int

	hist     [numOps]*hdrhistogram.Histogram
	opErrs   [numOps]int64
	kinds    map[string]int64
	notFound [numOps]int64
}

func newWorker(cfg Config, ks *keyspace, ch chooser, vals *valuePool, id uint64) *worker {
	rng := rand.New(rand.NewPCG(cfg.Seed, id+1))
	w := &worker{rng: rng, pick: ch.bind(rng), ks: ks, vals: vals, mix: cfg.Mix,
		keySize: cfg.KeySize, kinds: map[string]int64{}}
	for i := range w.hist {
		w.hist[i] = newHist()
	}
	return w
}

func (w *worker) run(ctx context.Context, t Target, lim *limits) {
	key := make([]byte, 0, w.keySize)
	for ctx.Err() == nil && lim.take() {
		op := w.mix.pick(w.rng)
		idx := 0
		if op == opInsert {
			idx = w.ks.insert()
		} else {
			idx = w.pick()
		}
		key = AppendKey(key[:0], idx, w.keySize)
		w.do(ctx, t, op, key)
	}
}

// do runs and records one operation. Only successful operations enter the
// latency histograms; failures are counted by kind.
func (w *worker) do(ctx context.Context, t Target, op int, key []byte) {
	start := time.Now()
	found, err := w.exec(ctx, t, op, key)
	us := time.Since(start).Microseconds()
	if err == nil && !found {
		w.notFound[op]++
	}
	switch {
	case err == nil:
		_ = w.hist[op].RecordValue(min(max(us, histMinUs), histMaxUs))
		w.done.Add(1)
	case ctx.Err() != nil:
		// Cut short by the caller (Ctrl-C): not the cluster's failure.
	default:
		w.opErrs[op]++
		w.kinds[ErrorKind(err)]++
		w.errs.Add(1)
	}
}

// exec issues one operation. found is false for a read, scan or
// read-modify-write that found nothing; mutations report true.
func (w *worker) exec(ctx context.Context, t Target, op int, key []byte) (found bool, err error) {
	switch op {
	case opRead:
		return t.Get(ctx, key)
	case opScan:
		n, err := t.Scan(ctx, key, 1+w.rng.IntN(MaxScanLength))
		return n > 0, err
	case opRMW:
		// YCSB's read-modify-write reads the record, then writes it back
		// changed; the value written does not depend on what was read
		// (records here are opaque), but the read must finish first.
		if found, err = t.Get(ctx, key); err != nil {
			return found, err
		}
		return found, t.Put(ctx, key, w.vals.next(w.rng))
	default: // opUpdate, opInsert
		return true, t.Put(ctx, key, w.vals.next(w.rng))
	}
}
