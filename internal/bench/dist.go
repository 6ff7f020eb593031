package bench

import (
	"fmt"
	"math/rand/v2"
)

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

func newChooser(dist string, keys int) (chooser, error) {
	switch dist {
	case "uniform":
		return uniform{n: keys}, nil
	case "zipfian":
		return zipfian{n: keys}, nil
	case "hotkey":
		hot := max(1, int(float64(keys)*HotKeysFraction))
		return hotkey{n: keys, hot: hot}, nil
	}
	return nil, fmt.Errorf("--distribution must be uniform, zipfian or hotkey, not %q", dist)
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

// isRead decides one operation of the mix.
func isRead(rng *rand.Rand, readRatio float64) bool {
	return rng.Float64() < readRatio
}
