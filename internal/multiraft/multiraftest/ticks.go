package multiraftest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-kv/concord/internal/multiraft"
)

// ManualTicks is a multiraft.TickSource that ticks only when told to.
type ManualTicks struct {
	c     chan time.Time
	stopC chan struct{}
	once  sync.Once
}

var _ multiraft.TickSource = (*ManualTicks)(nil)

// NewManualTicks returns a tick source for one Host.
func NewManualTicks() *ManualTicks {
	// Unbuffered: Tick returns only once the loop has taken the tick.
	return &ManualTicks{c: make(chan time.Time), stopC: make(chan struct{})}
}

// C implements multiraft.TickSource.
func (m *ManualTicks) C() <-chan time.Time { return m.c }

// Stop implements multiraft.TickSource; the loop calls it when it ends.
func (m *ManualTicks) Stop() { m.once.Do(func() { close(m.stopC) }) }

// Tick hands the loop one tick and returns once the loop has taken it. It
// reports false if the loop has ended.
func (m *ManualTicks) Tick() bool {
	select {
	case m.c <- time.Time{}:
		return true
	case <-m.stopC:
		return false
	}
}

// ManualClock is a Config.Clock that moves only when told to. A Cluster
// shares one among its hosts and moves it one TickInterval with every
// round of ticks (Tick, TickOnly), so that no host's ticks ever run faster
// than the clock, as with real ticks; Advance moves it on its own, as time
// passing while hosts stand still (a paused process, a stopped one).
type ManualClock struct{ ns atomic.Int64 }

// Now implements Config.Clock.
func (m *ManualClock) Now() int64 { return m.ns.Load() }

// Advance moves the clock d forward.
func (m *ManualClock) Advance(d time.Duration) { m.ns.Add(int64(d)) }
