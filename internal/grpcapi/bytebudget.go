package grpcapi

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// byteBudget bounds the bytes a stream holds: the request bytes of its
// calls in flight (the reader takes, the calls give back) or its replies
// ready and not yet sent (the calls take, the sender gives back).
//
// Waiters are served first come first served: while one waits, a later
// acquire waits behind it even if it would fit, and the first is granted
// once it fits or nothing is in use (so that anything larger than the
// whole budget goes, alone). Before, whoever looked when room was made
// took it, so under a steady stream of small replies a large one (or one
// larger than the budget, which needs the budget empty) could wait for
// ever.
//
// state packs the bytes in use (state >> 1) and whether anyone waits
// (state & budgetWaiting), so that with room and nobody waiting an
// acquire is one compare-and-swap and a release one add, as before: the
// lock and the line are for waiters only.
type byteBudget struct {
	limit int64
	state atomic.Int64

	mu   sync.Mutex
	line []*budgetWaiter // guarded by mu; first come first; not empty iff budgetWaiting is set
}

// budgetWaiting is the bit of byteBudget.state set while the line is not
// empty: it turns acquire and release off their lock-free paths.
const budgetWaiting = 1

// budgetWaiter is one acquire waiting in the line.
type budgetWaiter struct {
	n       int64
	granted bool          // guarded by mu
	ready   chan struct{} // closed once granted
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit}
}

// fits reports whether n more bytes may be taken with used in use: under
// the limit, or anything at all when nothing is in use.
func (b *byteBudget) fits(used, n int64) bool {
	return used == 0 || used+n <= b.limit
}

// acquire takes n, waiting behind those that wait already until it fits
// under the limit or nothing is in use. An error (ctx's) means nothing
// was taken.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	for {
		s := b.state.Load()
		if s&budgetWaiting != 0 || !b.fits(s>>1, n) {
			return b.wait(ctx, n)
		}
		if b.state.CompareAndSwap(s, s+n<<1) {
			return nil
		}
	}
}

// wait joins the line for n and waits for its turn, or for ctx to end.
func (b *byteBudget) wait(ctx context.Context, n int64) error {
	w := b.join(n)
	if w == nil {
		return nil // room was made while it joined
	}
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		return b.leave(w, ctx.Err())
	}
}

// join puts a waiter for n at the end of the line, or takes n at once and
// returns nil if it fits and nobody waits. The waiting bit is set by the
// compare-and-swap that saw no room, so a release that made room before
// it fails the swap (and join looks again) and one after it sees the bit
// and grants under the lock.
func (b *byteBudget) join(n int64) *budgetWaiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		s := b.state.Load()
		if s&budgetWaiting == 0 {
			if b.fits(s>>1, n) {
				if b.state.CompareAndSwap(s, s+n<<1) {
					return nil
				}
				continue
			}
			if !b.state.CompareAndSwap(s, s|budgetWaiting) {
				continue
			}
		}
		w := &budgetWaiter{n: n, ready: make(chan struct{})}
		b.line = append(b.line, w)
		return w
	}
}

// leave takes w out of the line after its context ended and returns err;
// nil if it was granted meanwhile (it holds its bytes then). Those behind
// it may fit now that it no longer blocks them.
func (b *byteBudget) leave(w *budgetWaiter, err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.granted {
		return nil
	}
	i := slices.Index(b.line, w)
	b.line = slices.Delete(b.line, i, i+1)
	b.grant()
	return err
}

// grant, under mu, grants the waiters at the head of the line in order
// while each fits, and clears the waiting bit once the line is empty.
func (b *byteBudget) grant() {
	for len(b.line) > 0 {
		w := b.line[0]
		s := b.state.Load()
		if !b.fits(s>>1, w.n) {
			return
		}
		if !b.state.CompareAndSwap(s, s+w.n<<1) {
			continue // a release or take moved it: look again
		}
		w.granted = true
		close(w.ready)
		b.line[0] = nil
		b.line = b.line[1:]
	}
	b.state.And(^int64(budgetWaiting))
}

// release gives back n (nil-safe; 0 is nothing), and grants the waiters
// it makes room for.
func (b *byteBudget) release(n int64) {
	if b == nil || n == 0 {
		return
	}
	if b.state.Add(-n<<1)&budgetWaiting == 0 {
		return
	}
	b.mu.Lock()
	b.grant()
	b.mu.Unlock()
}

// take counts n as in use without waiting: a reply queued after its
// stream ended, which the sender still drains and gives back.
func (b *byteBudget) take(n int64) {
	b.state.Add(n << 1)
}

// inUse returns the bytes in use.
func (b *byteBudget) inUse() int64 {
	return b.state.Load() >> 1
}
