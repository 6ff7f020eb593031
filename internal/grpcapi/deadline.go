package grpcapi

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// deadlineGrain bounds how much sooner than its timeout a stream call may
// end: calls whose deadlines fall within it share one context
// (callDeadlines). A sixteenth of the timeout, at most 2 ms.
func deadlineGrain(timeout time.Duration) time.Duration {
	return min(2*time.Millisecond, timeout/16)
}

// callDeadlines gives a stream's calls their contexts. A call ends at its
// timeout (timeout_ms, else defaultCallTimeout). A context with a deadline
// per call (an allocation, a timer, an entry in the stream context's
// children, and their removal) cost about a microsecond, 9 % of a
// linearizable get's server CPU (docs/benchmarks.md, "Fixed costs of a
// read"); so a call shares a context whose deadline falls within the grain
// before its own. A call thus ends at most the grain before its timeout,
// never after it: a forward's deadline stays within its caller's, and the
// caller hears DeadlineExceeded before it gives up itself. A shared
// context is cancelled as soon as its last call is done, as each call's
// own was, so no timer outlives its calls.
//
// The reader keeps the last few contexts it made (a stream may carry calls
// of a few timeouts: a client's own, and the shorter remainders of the
// calls it forwards), replacing the one handed out least recently. Only
// the reader calls forCall and close; the workers release their calls'.
type callDeadlines struct {
	cur  [sharedDeadlines]*sharedDeadline // the contexts the next calls may share
	used [sharedDeadlines]uint64          // when each was last handed out, in calls
	n    uint64                           // calls handed out
}

// sharedDeadlines is how many contexts callDeadlines keeps for sharing.
const sharedDeadlines = 4

// sharedDeadline is a context that calls share, counted.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time // ctx's deadline
	// refs counts the calls holding it, plus one while it is the reader's
	// current one; the release that takes it to zero cancels ctx.
	refs atomic.Int32
}

// callTimeout is how long call may run.
func callTimeout(call *concordpb.StreamCall) time.Duration {
	if ms := call.GetTimeoutMs(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return defaultCallTimeout
}

// forCall returns the context call runs under, started now, derived from
// parent (the stream's); the call releases it once done.
func (d *callDeadlines) forCall(parent context.Context, call *concordpb.StreamCall, now time.Time) *sharedDeadline {
	timeout := callTimeout(call)
	due := now.Add(timeout)
	grain := deadlineGrain(timeout)
	d.n++
	lru := 0
	for i, c := range d.cur {
		if c != nil && !c.at.After(due) && due.Sub(c.at) <= grain {
			c.refs.Add(1)
			d.used[i] = d.n
			return c
		}
		if d.used[i] < d.used[lru] {
			lru = i // an empty slot was never used: 0
		}
	}
	if c := d.cur[lru]; c != nil {
		c.release() // the reader's hold: no call will share it any more
	}
	ctx, cancel := context.WithDeadline(parent, due)
	c := &sharedDeadline{ctx: ctx, cancel: cancel, at: due}
	c.refs.Store(2) // the reader's and this call's
	d.cur[lru], d.used[lru] = c, d.n
	return c
}

// close drops the reader's holds: no call will share them any more.
func (d *callDeadlines) close() {
	for i, c := range d.cur {
		if c != nil {
			c.release()
			d.cur[i] = nil
		}
	}
}

// release ends one hold on c; the last cancels its context.
func (c *sharedDeadline) release() {
	if c.refs.Add(-1) == 0 {
		c.cancel()
	}
}
