package grpcapi

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// checkDeadline fails t unless d's context ends no later than the call's
// timeout after now, and at most its grain sooner.
func checkDeadline(t *testing.T, d *sharedDeadline, now time.Time, timeoutMs uint32) {
	t.Helper()
	dl, ok := d.ctx.Deadline()
	timeout := time.Duration(timeoutMs) * time.Millisecond
	due := now.Add(timeout)
	if !ok || dl.After(due) || due.Sub(dl) > deadlineGrain(timeout) {
		t.Fatalf("deadline %v for a call due %v: want within [due-%v, due]", dl, due, deadlineGrain(timeout))
	}
}

func timedCall(ms uint32) *concordpb.StreamCall { return &concordpb.StreamCall{TimeoutMs: ms} }

// TestCallDeadlinesShareAndRelease protects the stream's shared call
// deadlines: a call shares a context whose deadline falls within its grain
// before its own, never a later one nor one too early, so no call's
// context ends after its timeout or more than the grain before it; and a
// context is cancelled once its last call released it and the reader let
// it go (evicted as the one handed out least recently, or at the stream's
// end), not before. It fails if sharing stretched a deadline or cut it
// short past the grain, or if a context outlived its calls (a timer per
// call left running) or ended under one.
func TestCallDeadlinesShareAndRelease(t *testing.T) {
	var d callDeadlines
	bg := context.Background()
	t0 := time.Now()
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	a := d.forCall(bg, timedCall(1000), t0)
	b := d.forCall(bg, timedCall(1000), at(1))
	if a != b {
		t.Fatal("two calls due 1 ms apart got two contexts")
	}
	checkDeadline(t, a, t0, 1000)
	checkDeadline(t, b, at(1), 1000)
	c := d.forCall(bg, timedCall(1000), at(3))
	if c == a {
		t.Fatal("a call due 3 ms after the first shares its context: past the grain")
	}
	checkDeadline(t, c, at(3), 1000)
	short := d.forCall(bg, timedCall(10), at(3))
	if short == c || short == a {
		t.Fatal("a call due far sooner shares a later context")
	}
	checkDeadline(t, short, at(3), 10)
	a.release()
	b.release()
	if a.ctx.Err() != nil {
		t.Fatal("context cancelled while the reader may still share it")
	}
	again := d.forCall(bg, timedCall(1000), at(1.5))
	if again != a {
		t.Fatal("a call due within a kept context's grain got another")
	}
	again.release()
	// Three more timeouts: the second and third evict the contexts handed
	// out least recently, c's and short's, each still held by its call.
	x := d.forCall(bg, timedCall(2000), at(4))
	y := d.forCall(bg, timedCall(3000), at(4))
	z := d.forCall(bg, timedCall(4000), at(4))
	for _, h := range []*sharedDeadline{c, short} {
		if h.ctx.Err() != nil {
			t.Fatal("an evicted context cancelled under its call")
		}
		h.release()
		if h.ctx.Err() != context.Canceled {
			t.Fatalf("evicted context after its call: err %v, want Canceled", h.ctx.Err())
		}
	}
	for _, h := range []*sharedDeadline{x, y, z} {
		h.release()
	}
	for _, h := range []*sharedDeadline{a, x, y, z} {
		if h.ctx.Err() != nil {
			t.Fatal("a kept context cancelled before the stream ended")
		}
	}
	d.close()
	for _, h := range []*sharedDeadline{a, x, y, z} {
		if h.ctx.Err() != context.Canceled {
			t.Fatalf("after close: err %v, want Canceled", h.ctx.Err())
		}
	}
}

// TestCallDeadlinesRandom drives the deadlines with random arrival times
// and timeouts: every call's context ends within the grain before its due
// time, every context ends once all calls released it and the reader
// closed, and a steady stream of equal timeouts shares contexts (a few per
// grain of arrivals, not one per call).
func TestCallDeadlinesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d callDeadlines
	now := time.Now()
	var held []*sharedDeadline
	contexts := map[*sharedDeadline]bool{}
	for range 5000 {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Microsecond)
		ms := []uint32{1000, 1000, 1000, 1000, 20, 0}[rng.IntN(6)]
		c := d.forCall(context.Background(), timedCall(ms), now)
		if ms == 0 {
			ms = uint32(defaultCallTimeout / time.Millisecond)
		}
		checkDeadline(t, c, now, ms)
		contexts[c] = true
		held = append(held, c)
		if rng.IntN(3) == 0 { // calls end out of order
			i := rng.IntN(len(held))
			held[i].release()
			held = append(held[:i], held[i+1:]...)
		}
	}
	for _, c := range held {
		c.release()
	}
	d.close()
	for c := range contexts {
		if n := c.refs.Load(); n != 0 {
			t.Fatalf("a context holds %d references after every call released it and the reader closed", n)
		}
		// Cancelled by its last release; or, on a box slow enough that real
		// time passed a 20 ms deadline during the loop (now above is
		// simulated), expired by its own timer first.
		err := c.ctx.Err()
		if err != context.Canceled && !(err == context.DeadlineExceeded && !time.Now().Before(c.at)) {
			t.Fatalf("a context outlived its calls: err %v", err)
		}
	}
	// Three timeouts over ~50 ms of arrivals: about 25 grains each.
	if len(contexts) > 200 {
		t.Fatalf("%d contexts for 5000 calls of three timeouts", len(contexts))
	}
}
