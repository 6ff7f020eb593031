package kv

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// corrupt overwrites k in the fixture's database, behind the state
// machine's back, with bytes that fail to decode as any record: applying a
// command that reads k then fails.
func (f *fixture) corrupt(k []byte) {
	f.t.Helper()
	if err := f.db.Set(k, []byte{0x7f, 0xff, 0xff}, nil); err != nil {
		f.t.Fatal(err)
	}
}

// applyErr applies cmd in its own batch and returns Apply's error. The
// batch is dropped: what the command deferred (its session record, the
// clock) is flushed into it first, so the next batch starts clean.
func (f *fixture) applyErr(cmd *storepb.Command) error {
	b := f.db.NewIndexedBatch()
	defer b.Close()
	_, err := f.sm.Apply(b, wholeRange, cmd)
	if ferr := flushApplied(f.sm, b); ferr != nil {
		f.t.Fatalf("Flush: %v", ferr)
	}
	return err
}

// TestBlindPutReadsNothing protects the lean write path: once a session and
// the shard clock are known, a PUT that does not ask for the previous value
// makes no point read at all (neither the key, nor the session record, nor
// the clock): each of those is corrupted here, and reading any would fail
// the apply.
func TestBlindPutReadsNothing(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), put("k", "v0"), put("j", "v0"))
	f.kv(9, 1, at(time.Second), put("other", "x")) // the session and the clock are now known
	f.corrupt(keyOf("k"))
	f.corrupt(keyOf("j"))
	f.corrupt(keys.Session(shard, 9))
	f.corrupt(keys.Applied(shard)) // where the clock lives
	f.corrupt(keys.Clock(shard))   // where it lived
	if err := f.applyErr(kvCmd(0, 0, at(2*time.Second), putPrev("j", "v"))); err == nil {
		t.Fatal("a PUT with return_prev of a corrupted key applied: the corruption proves nothing")
	}
	res := f.kv(9, 2, at(2*time.Second), put("k", "v1"), putTTL("k2", "v", time.Hour))
	if res.GetErrorCode() != 0 || len(res.GetResults()) != 2 {
		t.Fatalf("blind puts: %v", res)
	}
	for _, r := range res.GetResults() {
		if !proto.Equal(r, &concordpb.OpResult{}) {
			t.Fatalf("a blind PUT reported %v, want nothing", r)
		}
	}
	f.value("k", []byte("v1"))
	f.state(2*time.Second, "k2", []byte("v"), t0+2_000+3_600_000) // the cached clock placed the TTL
	if rec := sessionRecord(t, f, 9); rec.GetSeq() != 2 || !proto.Equal(rec.GetResult(), res) {
		t.Fatalf("session record after the blind puts: %v", rec)
	}
}

// TestPutWithoutReturnPrevHidesPrevious protects the API contract: a PUT
// reports the previous value exactly when it asks (return_prev), also when
// its condition or keep_ttl made the state machine read the key anyway.
func TestPutWithoutReturnPrevHidesPrevious(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, 1, put("k", "v1"))
	for _, op := range []*concordpb.Op{
		put("k", "v2"),
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v3"), KeepTtl: true},
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v4"), Condition: concordpb.Condition_CONDITION_XX},
	} {
		if r := f.one(f.kv(0, 0, 1, op)); r.GetExists() || r.GetValue() != nil ||
			r.GetOk() != (op.GetCondition() == concordpb.Condition_CONDITION_XX) {
			t.Fatalf("PUT %v without return_prev over a present key reported %v", op, r)
		}
	}
	f.value("k", []byte("v4"))
	nx := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v5"), Condition: concordpb.Condition_CONDITION_NX}
	if r := f.one(f.kv(0, 0, 1, nx)); r.GetOk() || r.GetExists() || r.GetValue() != nil {
		t.Fatalf("NX without return_prev over a present key reported %v, want only not made", r)
	}
	f.value("k", []byte("v4"))
}

// installState stores a session record, the shard clock and a value
// directly, as a raft snapshot installed under the state machine would: in
// the applied-state record, or, legacy, as a node from before the clock
// moved there sent it (its applied state without a clock, the clock in
// its own record).
func (f *fixture) installState(session uint64, rec *storepb.SessionRecord, clock int64, k, v string, legacy bool) {
	f.t.Helper()
	b := f.db.NewBatch()
	defer b.Close()
	if err := storage.SetProto(b, keys.Session(shard, session), rec); err != nil {
		f.t.Fatal(err)
	}
	as := &storepb.AppliedState{Index: 50, Term: 2, Clock: &storepb.ShardClock{High: clock, Now: clock}}
	if legacy {
		as.Clock = nil
		c := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(clock)), uint64(clock))
		if err := b.Set(keys.Clock(shard), c, nil); err != nil {
			f.t.Fatal(err)
		}
	} else if err := b.Delete(keys.Clock(shard), nil); err != nil {
		f.t.Fatal(err)
	}
	if err := storage.SetProto(b, keys.Applied(shard), as); err != nil {
		f.t.Fatal(err)
	}
	if err := b.Set(keyOf(k), encodeValue([]byte(v), 0), nil); err != nil {
		f.t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		f.t.Fatal(err)
	}
}

// TestSnapshotInstallDropsCaches protects at-most-once and the shard clock
// across a raft snapshot: the snapshot brings a newer session record (seq 7)
// and a later clock than the state machine cached (seq 5, the clock at 0).
// After SnapshotInstalled, a retry of seq 7 is answered from the snapshot's
// record and applies nothing, and a TTL is placed on the snapshot's clock.
// With the caches kept, seq 7 would look new (7 > 5) and apply a second
// time, and the TTL would be placed an hour early. Both for a snapshot with
// the clock in its applied state and for one from an older node, with the
// clock in its legacy record.
func TestSnapshotInstallDropsCaches(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			f := newFixture(t)
			f.kv(9, 5, at(0), put("k", "v5"))
			fromSnap := &storepb.CommandResult{Results: []*concordpb.OpResult{{Ok: true, Value: []byte("as first answered")}}}
			f.installState(9, &storepb.SessionRecord{Seq: 7, Result: fromSnap, LastActiveUnixNanos: at(time.Hour)}, at(time.Hour), "k", "v7", legacy)
			f.sm.SnapshotInstalled()
			if res := f.kv(9, 7, at(time.Second), putPrev("k", "applied twice")); !proto.Equal(res, fromSnap) {
				t.Fatalf("retry of seq 7 after the snapshot answered %v, want the snapshot's record %v", res, fromSnap)
			}
			f.value("k", []byte("v7"))
			f.kv(9, 8, at(time.Second), putTTL("t", "v", time.Second))
			f.state(time.Hour, "t", []byte("v"), t0+3_600_000+1_000)
		})
	}
}

// TestLegacyClockMovesIntoAppliedState protects data written before the
// clock moved into the applied-state record (a data dir of an older
// version, or a snapshot from an older node): the state machine reads the
// legacy clock record, and the first batch after it writes the clock into
// the applied state and deletes the legacy record, so the clock lives in
// one place from then on; a state machine started on the result (a
// restart) has the same clock. Without the fallback the clock would
// restart at the next stamp, an hour later here, and the TTL would end an
// hour late.
func TestLegacyClockMovesIntoAppliedState(t *testing.T) {
	f := newFixture(t)
	f.installState(1, &storepb.SessionRecord{Seq: 1}, at(time.Hour), "k", "v", true)
	// A stamp far ahead of the clock's highest one moves it one step only.
	f.kv(0, 0, at(3*time.Hour), putTTL("t", "v", time.Second))
	want := t0 + 3_600_000 + MaxClockStep/int64(time.Millisecond) + 1_000
	f.state(time.Hour+time.Duration(MaxClockStep), "t", []byte("v"), want)
	if _, found, err := get(f.db, keys.Clock(shard)); err != nil || found {
		t.Fatalf("legacy clock record after the first batch: found %v, %v; want it deleted", found, err)
	}
	var as storepb.AppliedState
	if _, err := storage.GetProto(f.db, keys.Applied(shard), &as); err != nil {
		t.Fatal(err)
	}
	if c := as.GetClock(); c.GetHigh() != at(3*time.Hour) || c.GetNow() != at(time.Hour)+MaxClockStep {
		t.Fatalf("applied state's clock %v, want high %d now %d", c, at(3*time.Hour), at(time.Hour)+MaxClockStep)
	}
	restarted := &fixture{t: t, db: f.db, sm: New(shard)}
	restarted.kv(0, 0, at(3*time.Hour), putTTL("t2", "v", time.Second)) // not later than high: the clock stays
	restarted.state(time.Hour+time.Duration(MaxClockStep), "t2", []byte("v"), want)
}

// TestEvictedSessionStillDeduplicates protects the cache bound: a session
// whose entry was evicted is looked up in Pebble again, so a retry is still
// answered from its record; and the cache never holds more than
// MaxCachedSessions entries.
func TestEvictedSessionStillDeduplicates(t *testing.T) {
	f := newFixture(t)
	first := f.kv(9, 1, 1, putPrev("k", "v1"))
	delete(f.sm.sessions, 9) // as eviction does
	if retry := f.kv(9, 1, 2, putPrev("k", "v2")); !proto.Equal(retry, first) {
		t.Fatalf("retry after eviction answered %v, first answer was %v", retry, first)
	}
	f.value("k", []byte("v1"))
	for s := uint64(1); s <= MaxCachedSessions+100; s++ {
		f.sm.cacheSession(s, s)
	}
	if n := len(f.sm.sessions); n != MaxCachedSessions {
		t.Fatalf("%d cached sessions, want the bound %d", n, MaxCachedSessions)
	}
}

// TestExpiredSessionLeavesCache protects the cache's bound in time: expiring
// a session drops its cache entry with its record.
func TestExpiredSessionLeavesCache(t *testing.T) {
	f := newFixture(t)
	f.kv(1, 1, 100, put("a", "1"))
	f.kv(2, 1, 300, put("b", "1"))
	f.apply(wholeRange, expire(300, 200))
	if _, ok := f.sm.sessions[1]; ok || len(f.sm.sessions) != 1 {
		t.Fatalf("cache after expiring session 1: %v", f.sm.sessions)
	}
}
