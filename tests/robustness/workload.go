package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/concord-kv/concord/client"
)

// workload drives the clients: linearizable Get/Put/Delete/CAS on a small
// key set, and atomic multi-key operations over groups of keys that share
// a shard (multi.go), recorded for the checker, over gRPC and over the
// Redis protocol; and a writer of unique keys whose acknowledged writes
// must all survive.
type workload struct {
	clients []*client.Client
	resp    []*respClient // recorded in the same history, ids from respClientBase
	keys    []string
	// groups are keys sharing a hash tag (groups.go), for multi-key ops.
	groups [][]string
	rec    *recorder
	seed   uint64
	// opTimeout bounds one operation, retries included.
	opTimeout time.Duration
	// members says which nodes are gone for good (nil: none ever is); the
	// RESP clients send nothing to those.
	members *liveSet

	mu    sync.Mutex
	acked []string // guarded by mu: unique keys whose put returned success
}

// run issues operations until ctx ends.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, c := range w.clients {
		wg.Add(2)
		go func() { defer wg.Done(); w.runClient(ctx, i, c) }()
		go func() { defer wg.Done(); w.runUniqueWriter(ctx, i, c) }()
	}
	for _, rc := range w.resp {
		wg.Add(1)
		go func() { defer wg.Done(); rc.run(ctx, w) }()
	}
	wg.Wait()
}

func (w *workload) runClient(ctx context.Context, id int, c *client.Client) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
	seen := map[string]string{} // the last value this client saw per key
	for n := 0; ctx.Err() == nil; n++ {
		k, keys := w.pick(rng)
		var in kvInput
		if keys != nil {
			in = nextGRPCMulti(rng, fmt.Sprintf("c%d.%d", id, n), keys)
		} else {
			in = w.nextOp(rng, id, n, k, seen)
		}
		call := w.rec.begin(&in)
		out, err := w.do(c, in)
		w.rec.record(id, call, in, out, err)
		if err == nil {
			noteSeen(seen, in, out)
		}
		if errors.Is(err, client.ErrNoSpace) {
			// Refused at once, not retried: back off as a client told
			// the cluster is full would, rather than send refused writes
			// as fast as the 2 cores allow while the alarm lasts.
			sleepCtx(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond)
		}
	}
}

// nextOp picks an operation: 37% get, 28% put (some with a TTL: pickTTL;
// some keeping the key's: keepTTL), 9% delete, 18% CAS, 8% an EXPIRE op
// (expire.go).
func (w *workload) nextOp(rng *rand.Rand, id, n int, k string, seen map[string]string) kvInput {
	v := fmt.Sprintf("c%d.%d", id, n)
	switch p := rng.IntN(100); {
	case p < 8:
		return nextGRPCExpire(rng, k)
	case p < 45:
		return kvInput{Kind: opGet, Key: k}
	case p < 73:
		ttl := pickTTL(rng, ttlShare)
		return kvInput{Kind: opPut, Key: k, Value: v, TTLMs: ttl, KeepTTL: keepTTL(rng, ttl)}
	case p < 82:
		return kvInput{Kind: opDelete, Key: k}
	default:
		exp, ok := seen[k]
		return kvInput{Kind: opCAS, Key: k, Value: v, Expected: exp, Absent: !ok || rng.IntN(4) == 0}
	}
}

// observed is the value a successful operation shows the key holds.
func observed(in kvInput, out kvOutput) (string, bool) {
	switch {
	case in.Kind == opGet && out.Ok:
		return out.Value, true
	case in.Kind == opPut, in.Kind == opCAS && out.Ok:
		return in.Value, true
	case in.Kind == opCAS && out.Exists:
		return out.Value, true
	}
	return "", false
}

func (w *workload) do(c *client.Client, in kvInput) (kvOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
	defer cancel()
	key := []byte(in.Key)
	switch in.Kind {
	case opMGet, opMSet, opMDel:
		return doBatch(ctx, c, in)
	case opExpire:
		return doGRPCSingle(ctx, c, in)
	case opGet:
		v, found, err := c.Get(ctx, key)
		return kvOutput{Ok: found, Value: string(v)}, err
	case opPut:
		if in.KeepTTL {
			return doGRPCSingle(ctx, c, in)
		}
		// The model checks the previous value: ask for it.
		opts := []client.PutOption{client.ReturnPrev()}
		if in.TTLMs > 0 {
			opts = append(opts, client.TTL(time.Duration(in.TTLMs)*time.Millisecond))
		}
		prev, existed, err := c.Put(ctx, key, []byte(in.Value), opts...)
		return kvOutput{Ok: existed, Value: string(prev)}, err
	case opDelete:
		existed, err := c.Delete(ctx, key)
		return kvOutput{Ok: existed}, err
	default:
		res, err := c.CompareAndSwap(ctx, key, client.CAS{Expected: []byte(in.Expected), ExpectAbsent: in.Absent, Value: []byte(in.Value)})
		return kvOutput{Ok: res.Swapped, Exists: res.CurrentExists, Value: string(res.CurrentValue)}, err
	}
}

// runUniqueWriter writes keys no one else writes; each acknowledged one must
// be readable once the cluster has healed.
func (w *workload) runUniqueWriter(ctx context.Context, id int, c *client.Client) {
	for n := 0; ctx.Err() == nil; n++ {
		k := fmt.Sprintf("u-%d-%d", id, n)
		octx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
		_, _, err := c.Put(octx, []byte(k), []byte(k))
		cancel()
		if err == nil {
			w.mu.Lock()
			w.acked = append(w.acked, k)
			w.mu.Unlock()
		}
		if errors.Is(err, client.ErrNoSpace) {
			sleepCtx(ctx, 50*time.Millisecond) // as runClient does
		}
	}
}

// finalReads reads every key once more, linearizably, into the history:
// one Get each, also of the groups' keys (so that they are no multi-key
// read the coverage could count).
func (w *workload) finalReads(c *client.Client) {
	keys := slices.Clone(w.keys)
	for _, g := range w.groups {
		keys = append(keys, g...)
	}
	for _, k := range keys {
		in := kvInput{Kind: opGet, Key: k}
		call := w.rec.begin(&in)
		out, err := w.do(c, in)
		w.rec.record(len(w.clients), call, in, out, err)
	}
}

// lostWrites returns the acknowledged unique keys that cannot be read back.
func (w *workload) lostWrites(c *client.Client) (lost []string, checked int, err error) {
	w.mu.Lock()
	acked := append([]string(nil), w.acked...)
	w.mu.Unlock()
	for _, k := range acked {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, found, gerr := c.Get(ctx, []byte(k))
		cancel()
		if gerr != nil {
			return lost, checked, fmt.Errorf("read back %s: %w", k, gerr)
		}
		checked++
		if !found || string(v) != k {
			lost = append(lost, k)
		}
	}
	return lost, checked, nil
}

// ttlShare is the percentage of single-key puts that carry a TTL;
// multiTTLShare, of multi-key writes of puts that can (a gRPC Batch of
// PUTs, a MULTI/EXEC of SET ... GETs): more, since those are rarer (a
// RESP client's MULTI/EXEC of SETs is 1 % of its operations).
const (
	ttlShare      = 10
	multiTTLShare = 50
)

// pickTTL is the TTL in milliseconds of a put, share percent of the time,
// else none (ttlMs says which), so that reads see many run out: a key is
// written every 10-20 ms, a group's member every 50 or so.
func pickTTL(rng *rand.Rand, share int) int64 {
	if rng.IntN(100) >= share {
		return 0
	}
	return ttlMs(rng)
}

// ttlMs is a TTL in milliseconds, for a put or an expire command: half the
// time 1-9 ms, which run out before the key's next write more often than
// not, a quarter 10-49 ms, a quarter 50-799 ms, mostly overwritten before
// they run out.
func ttlMs(rng *rand.Rand) int64 {
	switch rng.IntN(4) {
	case 0, 1:
		return 1 + rng.Int64N(9)
	case 2:
		return 10 + rng.Int64N(40)
	}
	return 50 + rng.Int64N(750)
}
