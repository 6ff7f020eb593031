package multiraft

import (
	"testing"
	"time"
)

// TestLeaseDuration protects the lease's length: ElectionTicks - 2 tick
// periods less 10 % (720 ms at the defaults), none when LeaseReads is off
// or the election timeout leaves no whole tick period to promise.
func TestLeaseDuration(t *testing.T) {
	c := DefaultConfig(1)
	if got := c.LeaseDuration(); got != 720*time.Millisecond {
		t.Fatalf("default lease %v, want 720ms", got)
	}
	c.TickInterval, c.ElectionTicks = 50*time.Millisecond, 20
	if got := c.LeaseDuration(); got != 810*time.Millisecond {
		t.Fatalf("lease at 20 ticks of 50ms %v, want 810ms", got)
	}
	c.ElectionTicks = 2
	if got := c.LeaseDuration(); got != 0 {
		t.Fatalf("lease at 2 election ticks %v, want none", got)
	}
	c = DefaultConfig(1)
	c.LeaseReads = false
	if got := c.LeaseDuration(); got != 0 {
		t.Fatalf("lease with LeaseReads off %v, want none", got)
	}
}

// TestMonotonicClockRuns: the production lease clock moves forward with
// time (a clock that stood still would keep every lease valid).
func TestMonotonicClockRuns(t *testing.T) {
	now := monotonic()
	a := now()
	deadline := time.Now().Add(5 * time.Second)
	for now() <= a {
		if time.Now().After(deadline) {
			t.Fatal("the lease clock did not move in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}
