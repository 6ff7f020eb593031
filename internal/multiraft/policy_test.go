package multiraft

import (
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/storage"
)

// TestDefaultPolicyTicks protects the production cadence, which was
// written in ticks before it was written as durations: at the default
// 100 ms tick, leader preference runs every 50 ticks, log truncation and
// snapshot expiry every 2, unsent snapshots live 600 ticks, and pending
// work times out after 600; strays are checked every 100.
func TestDefaultPolicyTicks(t *testing.T) {
	p := newPolicy(DefaultConfig(1))
	want := policy{leaderPreferenceTicks: 50, logTruncationTicks: 2, snapshotTTLTicks: 600, pendingTimeoutTicks: 600, strayCheckTicks: 100}
	if p != want {
		t.Fatalf("default policy %+v, want %+v", p, want)
	}
}

// TestTicksOf protects the conversion: whole ticks rounded down, never 0
// (a periodic action every 0 ticks would divide by zero in the loop).
func TestTicksOf(t *testing.T) {
	for _, c := range []struct {
		d, tick time.Duration
		want    uint64
	}{
		{5 * time.Second, 100 * time.Millisecond, 50},
		{5 * time.Second, 10 * time.Millisecond, 500},
		{250 * time.Millisecond, 100 * time.Millisecond, 2},
		{50 * time.Millisecond, 100 * time.Millisecond, 1},
		{0, 100 * time.Millisecond, 1},
		{time.Second, 0, 1},
	} {
		if got := ticksOf(c.d, c.tick); got != c.want {
			t.Errorf("ticksOf(%v, %v) = %d, want %d", c.d, c.tick, got, c.want)
		}
	}
}

// TestConfigDefaultsAndValidation protects New's contract: zero fields
// take their defaults (so a partly filled Config works), and Start refuses
// an election timeout that is not longer than the heartbeat.
func TestConfigDefaultsAndValidation(t *testing.T) {
	c := Config{NodeID: 3, TickInterval: 10 * time.Millisecond}.withDefaults()
	if c.ElectionTicks != 10 || c.PendingTimeout != time.Minute || c.Fatal == nil || c.Logger == nil || c.TickInterval != 10*time.Millisecond {
		t.Fatalf("defaults not filled in: %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	c.ElectionTicks = c.HeartbeatTicks
	if err := c.validate(); err == nil {
		t.Fatal("ElectionTicks == HeartbeatTicks validated")
	}
}

// TestSnapshotHandlesExpire protects the bound on outgoing snapshots: a
// handle raft built but never sent is released after its TTL in ticks,
// not before, and its slot is freed.
func TestSnapshotHandlesExpire(t *testing.T) {
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	o := outgoingSnapshots{m: map[uint64]*outSnap{}}
	if !o.reserve(1) {
		t.Fatal("first reservation refused")
	}
	snap, err := eng.NewSnapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	o.put(snap, 100)
	if o.reserve(1) {
		t.Fatal("a second snapshot was allowed past a limit of 1")
	}
	o.expire(110, 10)
	if len(o.m) != 1 {
		t.Fatal("handle expired at its TTL, want only after it")
	}
	o.expire(111, 10)
	if len(o.m) != 0 || !o.reserve(1) {
		t.Fatal("expired handle kept, or its slot not freed")
	}
}
