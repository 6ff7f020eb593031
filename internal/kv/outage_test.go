package kv

import (
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// stampedOps applies ops in one command stamped at t0+d, with key expiry
// measured at the highest stamp (expiry_on_stamps) or on the shard's clock.
func (f *fixture) stampedOps(d time.Duration, onStamps bool, ops ...*concordpb.Op) *storepb.CommandResult {
	f.t.Helper()
	return f.apply(wholeRange, &storepb.Command{UnixNanos: at(d), Kind: &storepb.Command_Kv{
		Kv: &storepb.KVCommand{Ops: ops, ExpiryOnStamps: onStamps}}})
}

// TestTTLAfterAnOutage (found by review): a shard without a leader for ten
// minutes, then SET k v EX 60 from a leader whose clock is right. The
// shard's clock moves by at most MaxClockStep per command, so it lags the
// proposers' clocks by the outage less 90 s for good; key expiry measured
// on it made the key read as absent at once, and apply thought live a key
// that every read had seen expire (a SET NX of it refused). With
// expiry_on_stamps, apply measures expiry at the highest stamp: the key
// lives its minute, and apply and reads agree. The session clock keeps its
// cap (a fast leader cannot expire sessions early).
func TestTTLAfterAnOutage(t *testing.T) {
	outage := 10 * time.Minute
	t.Run("on stamps", func(t *testing.T) {
		f := newFixture(t)
		f.stampedOps(0, true, put("x", "1"))
		f.stampedOps(outage, true, putTTL("k", "v", time.Minute))
		f.state(outage+time.Second, "k", []byte("v"), t0+(outage+time.Minute).Milliseconds())

		soon := t0 + (outage + time.Second).Milliseconds()
		f.stampedOps(outage, true, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("p"), Value: []byte("old"), ExpireAtUnixMs: soon})
		f.state(outage+2*time.Second, "p", nil, 0)
		nx := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("p"), Value: []byte("new"), Condition: concordpb.Condition_CONDITION_NX}
		if r := f.one(f.stampedOps(outage+2*time.Second, true, nx)); !r.GetOk() {
			t.Fatalf("SET NX of a key every read sees expired was refused: %v", r)
		}
		capped := at(time.Duration(MaxClockStep) + 2*time.Second) // 90 s for the outage, then 2 s
		if c, err := f.sm.loadClock(f.db); err != nil || c.now != capped || c.high != at(outage+2*time.Second) {
			t.Fatalf("shard clock %+v, %v: want now %d (capped), high %d", c, err, capped, at(outage+2*time.Second))
		}
	})
	t.Run("on the shard's clock", func(t *testing.T) {
		// Without the flag (a cluster below version.ExpiryOnStamps) apply
		// keeps the old rule, as older binaries apply it.
		f := newFixture(t)
		f.stampedOps(0, false, put("x", "1"))
		f.stampedOps(outage, false, putTTL("k", "v", time.Minute))
		want := at(time.Duration(MaxClockStep))/int64(time.Millisecond) + time.Minute.Milliseconds()
		f.state(0, "k", []byte("v"), want)
	})
}
