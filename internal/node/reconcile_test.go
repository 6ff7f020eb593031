package node

import (
	"testing"
	"time"
)

// TestReconcileBackoff: a failed round waits 1 s, doubling to 30 s; a
// round that succeeds resets it.
func TestReconcileBackoff(t *testing.T) {
	var r reconciler
	var got []time.Duration
	for range 7 {
		r.settle(true)
		got = append(got, r.backoff)
		if until := time.Until(r.retryAt); until <= 0 || until > r.backoff {
			t.Fatalf("retry in %v after a backoff of %v", until, r.backoff)
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", got, want)
		}
	}
	r.settle(false)
	if r.backoff != 0 || !r.retryAt.IsZero() {
		t.Fatalf("after a round that succeeded: backoff %v, retry at %v", r.backoff, r.retryAt)
	}
}
