package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// TestPutRefusesATTLNotPositive: Put with TTL(0) or a negative TTL is
// refused by the client, InvalidArgument, saying the TTL must be positive,
// and sends nothing. It went to the node, whose refusal read "operation 0:
// ttl_ms and expire_at_unix_ms must not be negative": TTL(0) is not
// negative, and a Put has no operation 0.
func TestPutRefusesATTLNotPositive(t *testing.T) {
	f, c := scriptedNode(t, Options{}, func(int, *concordpb.RequestHeader) error { return nil })
	for _, ttl := range []time.Duration{0, -time.Second} {
		for _, opts := range [][]PutOption{{TTL(ttl)}, {TTL(ttl), ReturnPrev()}} {
			_, _, err := c.Put(context.Background(), []byte("k"), []byte("v"), opts...)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "TTL must be positive") ||
				strings.Contains(err.Error(), "operation 0") || errors.Is(err, ErrAmbiguous) {
				t.Errorf("Put with TTL(%v): %v (code %v); want InvalidArgument saying the TTL must be positive", ttl, err, status.Code(err))
			}
		}
	}
	if n := len(f.received()); n != 0 {
		t.Errorf("the node received %d puts with a TTL not positive", n)
	}
}
