package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// waitSeen is a context whose Done tells the test, once, that an acquire
// has gone to wait: acquire asks for Done only when it must wait (after
// it has joined the line), so the test knows the order of the waiters
// without sleeping.
type waitSeen struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *waitSeen) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// pendingAcquire is an acquire running on its own goroutine.
type pendingAcquire struct {
	waiting <-chan struct{} // closed once it waits
	done    <-chan error    // its result
}

func startAcquire(ctx context.Context, b *byteBudget, n int64) pendingAcquire {
	c := &waitSeen{Context: ctx, waiting: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- b.acquire(c, n) }()
	return pendingAcquire{waiting: c.waiting, done: done}
}

// waits reports whether p waited, false if it was granted at once; it
// fails the test if p failed or neither happened within 10 s.
func (p pendingAcquire) waits(t *testing.T) bool {
	t.Helper()
	select {
	case <-p.waiting:
		return true
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
		return false
	case <-time.After(10 * time.Second):
		t.Fatal("an acquire neither waited nor returned within 10 s")
	}
	return false
}

// granted fails the test unless p returns without error within 10 s.
func (p pendingAcquire) granted(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an acquire was not granted within 10 s")
	}
}

// TestByteBudgetWaitsInOrder: the budget's waiters are served first come
// first served. A small acquire that would fit waits behind a larger one
// that came first, and is granted only once the larger one is, when the
// two fit together or the large one has been given back. Before, the
// small one took the room at once (and a release woke whichever waiter
// took its token), so a large reply could wait behind any number of small
// ones.
func TestByteBudgetWaitsInOrder(t *testing.T) {
	b := newByteBudget(10)
	if err := b.acquire(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	large := startAcquire(context.Background(), b, 9)
	if !large.waits(t) {
		t.Fatal("9 bytes granted with 8 of 10 in use")
	}
	small := startAcquire(context.Background(), b, 2)
	if !small.waits(t) {
		t.Fatal("2 bytes granted ahead of 9 bytes waiting before them")
	}
	b.release(8)
	large.granted(t)
	// The small one does not fit beside the large one (9+2 > 10): it
	// still waits, and nothing more is in use.
	if got := b.inUse(); got != 9 {
		t.Fatalf("%d bytes in use after the large acquire's grant, want 9", got)
	}
	b.release(9)
	small.granted(t)
	if got := b.inUse(); got != 2 {
		t.Fatalf("%d bytes in use, want 2", got)
	}
}

// TestByteBudgetLargeNotStarved: a request larger than the whole budget
// goes alone once what was taken before it is given back, though a steady
// stream of small ones keeps the budget from ever being empty. Before, it
// waited for the budget to be empty, and each small one, taken before the
// one before it was given back, kept it from ever being.
func TestByteBudgetLargeNotStarved(t *testing.T) {
	const rounds = 100
	b := newByteBudget(10)
	if err := b.acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	large := startAcquire(context.Background(), b, 20)
	if !large.waits(t) {
		t.Fatal("20 bytes granted with 1 of 10 in use")
	}
	// The stream: the next one-byte acquire, then the previous released.
	var next pendingAcquire
	for i := 0; ; i++ {
		if i == rounds {
			t.Fatalf("%d one-byte acquires granted ahead of a 20-byte one waiting before them: it starves", rounds)
		}
		next = startAcquire(context.Background(), b, 1)
		if next.waits(t) {
			break
		}
		b.release(1)
	}
	b.release(1)
	large.granted(t)
	if got := b.inUse(); got != 20 {
		t.Fatalf("%d bytes in use, want the large acquire's 20 alone", got)
	}
	b.release(20)
	next.granted(t)
}

// TestByteBudgetCancelledWaiterLetsTheNextGo: a waiter whose context ends
// leaves the line, and those behind it that fit are granted at once (the
// one it blocked would otherwise wait for the next release).
func TestByteBudgetCancelledWaiterLetsTheNextGo(t *testing.T) {
	b := newByteBudget(10)
	if err := b.acquire(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	large := startAcquire(ctx, b, 9)
	if !large.waits(t) {
		t.Fatal("9 bytes granted with 8 of 10 in use")
	}
	small := startAcquire(context.Background(), b, 2)
	if !small.waits(t) {
		t.Fatal("2 bytes granted ahead of 9 bytes waiting before them")
	}
	cancel()
	if err := <-large.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	small.granted(t)
	if got := b.inUse(); got != 10 {
		t.Fatalf("%d bytes in use, want 10", got)
	}
	// And the line is empty again: an acquire that fits is granted at once.
	b.release(2)
	if err := b.acquire(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
}

// TestByteBudgetRoomCostsNoAllocation: an acquire that fits, and its
// release, allocate nothing (each call's reply and each message take one).
func TestByteBudgetRoomCostsNoAllocation(t *testing.T) {
	b := newByteBudget(10)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_ = b.acquire(ctx, 4)
		b.release(4)
	}); n != 0 {
		t.Fatalf("%v allocations per acquire and release with room", n)
	}
}

// TestByteBudgetUnderContention: goroutines taking and giving back sizes
// on both sides of the limit all finish (no waiter misses the release
// that makes room for it), and what is in use stays under the limit but
// for one acquire larger than it, alone.
func TestByteBudgetUnderContention(t *testing.T) {
	const (
		limit   = 10
		workers = 8
		rounds  = 2000
	)
	b := newByteBudget(limit)
	errs := make(chan error, workers)
	for g := range workers {
		go func() {
			for i := range rounds {
				n := int64((g*7+i*13)%15 + 1) // 1..15
				if err := b.acquire(context.Background(), n); err != nil {
					errs <- err
					return
				}
				if used := b.inUse(); used > limit && used != n {
					errs <- fmt.Errorf("%d bytes in use holding %d: over the limit of %d, and not alone", used, n, limit)
					return
				}
				b.release(n)
			}
			errs <- nil
		}()
	}
	for range workers {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("acquires still waiting after 30 s: a wake-up was lost")
		}
	}
	if got := b.inUse(); got != 0 {
		t.Fatalf("%d bytes in use after every release", got)
	}
}
