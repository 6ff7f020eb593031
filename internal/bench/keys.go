package bench

import (
	"math/rand/v2"
	"strconv"
)

// AppendKey appends the name of key i, padded to size bytes: "k" and the
// index zero-padded ("k000000000000042" for size 16). Names are
// deterministic so that preloaded keys are the ones later read. Callers
// ensure size > len(digits of i) (Config.Validate does).
func AppendKey(dst []byte, i, size int) []byte {
	dst = append(dst, 'k')
	digits := strconv.AppendInt(nil, int64(i), 10)
	for pad := size - 1 - len(digits); pad > 0; pad-- {
		dst = append(dst, '0')
	}
	return append(dst, digits...)
}

// KeyName is AppendKey as a string, for tests and tools.
func KeyName(i, size int) string { return string(AppendKey(nil, i, size)) }

// valuePool hands out random printable values of one size, as slices of a
// buffer generated once. Values are only read (gRPC copies them into the
// request), so goroutines may share the buffer.
type valuePool struct {
	buf  []byte
	size int
}

// poolSlack is how many distinct start offsets the pool offers.
const poolSlack = 4096

const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func newValuePool(size int, rng *rand.Rand) *valuePool {
	buf := make([]byte, size+poolSlack)
	for i := range buf {
		buf[i] = printable[rng.IntN(len(printable))]
	}
	return &valuePool{buf: buf, size: size}
}

// next returns a value starting at a random offset, so consecutive writes
// of a key change its value.
func (p *valuePool) next(rng *rand.Rand) []byte {
	off := rng.IntN(poolSlack)
	return p.buf[off : off+p.size : off+p.size]
}
