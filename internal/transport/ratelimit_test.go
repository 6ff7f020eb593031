package transport

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSnapshotRateLimit protects the snapshot send rate limit: 2 MiB in
// 256 KiB chunks from two streams at once, limited to 8 MiB/s together,
// take at least the time of all but the first chunk (1.75 MiB at 8 MiB/s,
// about 219 ms), and an unlimited limiter does not wait.
func TestSnapshotRateLimit(t *testing.T) {
	const chunk = 256 << 10
	l := &rateLimit{bytesPerSec: 8 << 20}
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				if err := l.wait(context.Background(), chunk); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if took, want := time.Since(start), 7*chunk*time.Second/(8<<20); took < want {
		t.Fatalf("2 MiB took %v at 8 MiB/s, want at least %v", took, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l = &rateLimit{bytesPerSec: 8 << 20}
	if err := l.wait(ctx, 64<<20); err != nil {
		t.Fatalf("reserving with the limiter idle must not wait: %v", err)
	}
	if err := l.wait(ctx, chunk); err == nil {
		t.Fatal("a reservation behind 8 s of queued bytes did not wait for its canceled context")
	}
	unlimited := &rateLimit{}
	start = time.Now()
	for range 100 {
		_ = unlimited.wait(context.Background(), 64<<20)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("an unlimited limiter waited %v", took)
	}
}
