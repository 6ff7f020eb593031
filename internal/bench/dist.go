package bench

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
)

// keyspace is the set of keys a run uses: the loaded keys [0, loaded) and
// the keys inserts have added after them, numbered on from loaded.
type keyspace struct {
	loaded int
	next   atomic.Int64 // the index the next insert takes
}

func newKeyspace(loaded int) *keyspace {
	ks := &keyspace{loaded: loaded}
	ks.next.Store(int64(loaded))
	return ks
}

// insert reserves the index of a new key.
func (ks *keyspace) insert() int { return int(ks.next.Add(1) - 1) }

// size is the number of keys loaded or inserted (or being inserted).
func (ks *keyspace) size() int { return int(ks.next.Load()) }

// chooser picks key indexes. bind returns a picker that draws from rng;
// each goroutine binds its own rng, so pickers need no locking.
type chooser interface {
	bind(rng *rand.Rand) func() int
}

// ZipfS is the zipfian skew. YCSB's default constant is 0.99, but
// math/rand/v2's Zipf needs s > 1; 1.1 is the closest common choice.
const ZipfS = 1.1

// Hot-key distribution: HotOpsFraction of requests go to the first
// HotKeysFraction of the keys. Keys are hash-partitioned, so the hot set
// spreads over the shards without scrambling the indexes.
const (
	HotKeysFraction = 0.10
	HotOpsFraction  = 0.90
)

// newChooser returns the key chooser for dist. uniform, zipfian and
// hotkey draw from the loaded keys; latest (YCSB D) favours the newest
// keys, inserted ones included.
func newChooser(dist string, ks *keyspace) (chooser, error) {
	keys := ks.loaded
	switch dist {
	case "latest":
		return latest{ks: ks}, nil
	case "uniform":
		return uniform{n: keys}, nil
	case "zipfian":
		return zipfian{n: keys}, nil
	case "hotkey":
		hot := max(1, int(float64(keys)*HotKeysFraction))
		return hotkey{n: keys, hot: hot}, nil
	}
	return nil, fmt.Errorf("--distribution must be uniform, zipfian, hotkey or latest, not %q", dist)
}

// latest is YCSB's "latest" distribution: zipfian over recency, so the
// newest key is the most popular. The zipfian rank is drawn over the
// loaded key count and clamped to the keys that exist.
type latest struct{ ks *keyspace }

func (l latest) bind(rng *rand.Rand) func() int {
	zf := rand.NewZipf(rng, ZipfS, 1, uint64(max(l.ks.loaded-1, 1)))
	return func() int {
		n := l.ks.size()
		return max(0, n-1-int(zf.Uint64()))
	}
}

type uniform struct{ n int }

func (u uniform) bind(rng *rand.Rand) func() int {
	return func() int { return rng.IntN(u.n) }
}

// zipfian ranks keys by index: key 0 is the most popular.
type zipfian struct{ n int }

func (z zipfian) bind(rng *rand.Rand) func() int {
	zf := rand.NewZipf(rng, ZipfS, 1, uint64(z.n-1))
	return func() int { return int(zf.Uint64()) }
}

type hotkey struct{ n, hot int }

func (h hotkey) bind(rng *rand.Rand) func() int {
	return func() int {
		if h.hot == h.n || rng.Float64() < HotOpsFraction {
			return rng.IntN(h.hot)
		}
		return h.hot + rng.IntN(h.n-h.hot)
	}
}
