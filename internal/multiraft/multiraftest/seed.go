package multiraftest

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"strconv"
	"testing"
)

// SeedEnv names the environment variable that fixes a test's seed.
const SeedEnv = "CONCORD_SEED"

// Seed returns the seed of t: CONCORD_SEED if set, else a random one. It
// logs the seed so that any failure can be rerun with the same faults.
func Seed(t testing.TB) int64 {
	t.Helper()
	if s := os.Getenv(SeedEnv); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		t.Logf("seed=%d (from %s)", seed, SeedEnv)
		return seed
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	seed := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	t.Logf("seed=%d rerun with %s=%d", seed, SeedEnv, seed)
	return seed
}
