package client

import (
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestTTLOption protects the TTL a Put sends: whole milliseconds, a
// positive fraction rounded up (0 would mean "no expiry"), and anything not
// positive sent as negative, which the server refuses.
func TestTTLOption(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{
		{10 * time.Second, 10_000},
		{1500 * time.Microsecond, 2},
		{time.Microsecond, 1},
		{time.Millisecond, 1},
		{0, -1},
		{-time.Second, -1000},
	} {
		req := &concordpb.PutRequest{}
		TTL(tc.ttl)(req)
		if req.GetTtlMs() != tc.want {
			t.Errorf("TTL(%v) sends ttl_ms %d, want %d", tc.ttl, req.GetTtlMs(), tc.want)
		}
	}
}
