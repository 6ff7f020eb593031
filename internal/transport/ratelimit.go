package transport

import (
	"context"
	"sync"
	"time"
)

// rateLimit paces the bytes of every snapshot this node sends, together, to
// a rate (Config.SnapshotRateBytes), so that catching a replica up does not
// starve the raft lane and client traffic of bandwidth and disk. Each
// sender reserves its chunk's bytes before sending it: the reservations
// queue up one after another at the rate, so concurrent streams share it.
type rateLimit struct {
	bytesPerSec float64 // <= 0: unlimited
	mu          sync.Mutex
	next        time.Time // guarded by mu: when the bytes reserved so far are paid
}

// wait returns once n more bytes may go, or ctx ends.
func (l *rateLimit) wait(ctx context.Context, n int) error {
	if l == nil || l.bytesPerSec <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next
	l.next = l.next.Add(time.Duration(float64(n) / l.bytesPerSec * float64(time.Second)))
	l.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
