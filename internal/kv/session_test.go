package kv

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestSessionRetryReturnsFirstResult protects at-most-once: a command with
// the session's last seq is answered with the first result and applies
// nothing, even when its ops differ.
func TestSessionRetryReturnsFirstResult(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, 1, put("k", "v0"))
	first := f.kv(9, 1, 2, putPrev("k", "v1"))
	for _, retry := range []*storepb.CommandResult{
		f.kv(9, 1, 3, putPrev("k", "v1")),
		f.kv(9, 1, 4, put("k", "other"), del("j")),
	} {
		if !proto.Equal(retry, first) {
			t.Fatalf("retry answered %v, first answer was %v", retry, first)
		}
	}
	if r := f.one(first); !r.GetOk() || string(r.GetValue()) != "v0" {
		t.Fatalf("first answer %v, want previous value v0", r)
	}
	f.value("k", []byte("v1"))
}

// TestSessionOlderSeqRefused protects against a delayed duplicate of an
// older request: FailedPrecondition and no write.
func TestSessionOlderSeqRefused(t *testing.T) {
	f := newFixture(t)
	f.kv(9, 5, 1, put("k", "v5"))
	res := f.kv(9, 4, 2, put("k", "v4"))
	if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition || len(res.GetResults()) != 0 {
		t.Fatalf("older seq: %v, want FailedPrecondition", res)
	}
	f.value("k", []byte("v5"))
	if rec := sessionRecord(t, f, 9); rec.GetSeq() != 5 {
		t.Fatalf("session record seq %d after refusing seq 4, want 5", rec.GetSeq())
	}
}

// TestSessionNewerSeqApplies protects progress: a newer seq applies and
// becomes the session's remembered seq and result.
func TestSessionNewerSeqApplies(t *testing.T) {
	f := newFixture(t)
	f.kv(9, 1, 1, put("k", "v1"))
	res := f.kv(9, 7, 2, putPrev("k", "v7"))
	if r := f.one(res); !r.GetOk() || string(r.GetValue()) != "v1" {
		t.Fatalf("newer seq: %v, want applied with previous v1", r)
	}
	f.value("k", []byte("v7"))
	rec := sessionRecord(t, f, 9)
	if rec.GetSeq() != 7 || !proto.Equal(rec.GetResult(), res) || rec.GetLastActiveUnixNanos() != 2 {
		t.Fatalf("session record %v, want seq 7, the result, active at 2", rec)
	}
}

// TestSessionsIndependent protects sessions from each other, and commands
// without a session from dedup.
func TestSessionsIndependent(t *testing.T) {
	f := newFixture(t)
	f.kv(1, 3, 1, put("a", "x"))
	if r := f.one(f.kv(2, 3, 2, putPrev("a", "y"))); !r.GetOk() {
		t.Fatalf("same seq in another session was not applied: %v", r)
	}
	f.kv(0, 0, 3, put("b", "1"))
	if r := f.one(f.kv(0, 0, 4, putPrev("b", "2"))); string(r.GetValue()) != "1" {
		t.Fatalf("sessionless command deduplicated: %v", r)
	}
	f.value("b", []byte("2"))
	lo, hi := keys.SessionSpan(shard)
	if n := count(t, f.db, lo, hi); n != 2 {
		t.Fatalf("%d session records, want 2 (sessionless commands keep none)", n)
	}
}

// expire is the command a leader whose clock reads stamp proposes to forget
// sessions idle since before its clock read before (stamp minus the TTL).
func expire(stamp, before int64) *storepb.Command {
	return &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_ExpireSessions{
		ExpireSessions: &storepb.ExpireSessions{IdleBeforeUnixNanos: before},
	}}
}

// TestExpireSessions protects session expiry: sessions idle since before the
// cutoff are forgotten (a retry then applies again), the others are kept.
func TestExpireSessions(t *testing.T) {
	f := newFixture(t)
	f.kv(1, 1, 100, put("idle", "1"))
	f.kv(2, 1, 200, put("edge", "1"))
	f.kv(3, 1, 150, put("busy", "1"))
	f.kv(3, 2, 300, put("busy", "2")) // activity moves the session forward
	if res := f.apply(wholeRange, expire(300, 200)); res.GetErrorCode() != 0 {
		t.Fatalf("expire: %v", res)
	}
	if sessionRecord(t, f, 1) != nil {
		t.Fatalf("session idle since 100 survived expiry at 200")
	}
	for _, s := range []uint64{2, 3} {
		if sessionRecord(t, f, s) == nil {
			t.Fatalf("session %d, active at or after 200, was expired", s)
		}
	}
	if r := f.one(f.kv(1, 1, 400, putPrev("idle", "again"))); !r.GetOk() {
		t.Fatalf("retry of a forgotten session should apply: %v", r)
	}
	f.value("idle", []byte("again"))
}

// TestSessionExpiryIgnoresClockJump protects at-most-once from a leader whose
// clock is an hour ahead: its commands move the shard's clock by at most
// MaxClockStep, so its expiry forgets no session active a second ago, and a
// retry after the jump is still answered from the session.
func TestSessionExpiryIgnoresClockJump(t *testing.T) {
	const sec, ttl = int64(time.Second), int64(time.Hour)
	t0 := 1_000_000 * sec
	f := newFixture(t)
	first := f.kv(1, 1, t0, put("k", "v1"))
	f.kv(2, 1, t0+sec, put("other", "x"))
	// A new leader whose clock is an hour ahead takes a write, then expires.
	ahead := t0 + sec + time.Hour.Nanoseconds()
	f.kv(2, 2, ahead, put("k", "v2"))
	if res := f.apply(wholeRange, expire(ahead+sec, ahead+sec-ttl)); res.GetErrorCode() != 0 {
		t.Fatalf("expire: %v", res)
	}
	for _, s := range []uint64{1, 2} {
		if sessionRecord(t, f, s) == nil {
			t.Fatalf("session %d, active a second before a leader an hour ahead, was expired", s)
		}
	}
	if retry := f.kv(1, 1, ahead+2*sec, put("k", "v1")); !proto.Equal(retry, first) {
		t.Fatalf("retry of seq 1 after the clock jump answered %v, first answer was %v", retry, first)
	}
	f.value("k", []byte("v2"))
	// Honest time still expires sessions: an hour of steps no larger than
	// the leaders' expiry interval later, session 1 (idle) goes.
	now := ahead + 2*sec
	for i := 0; i < 61; i++ {
		now += int64(time.Minute)
		f.kv(2, uint64(3+i), now, getOp("k"))
	}
	f.apply(wholeRange, expire(now, now-ttl))
	if sessionRecord(t, f, 1) != nil || sessionRecord(t, f, 2) == nil {
		t.Fatal("after an hour of shard time, idle session 1 must be expired and active session 2 kept")
	}
}

// sessionRecord reads a session's record; nil if there is none.
func sessionRecord(t *testing.T, f *fixture, session uint64) *storepb.SessionRecord {
	t.Helper()
	rec := &storepb.SessionRecord{}
	found, err := storage.GetProto(f.db, keys.Session(shard, session), rec)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		return nil
	}
	return rec
}
