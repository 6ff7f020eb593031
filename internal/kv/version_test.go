package kv

import (
	"bytes"
	"hash/fnv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// vcmd is a versioned, sessionless command stamped at stamp.
func vcmd(stamp int64, ops ...*concordpb.Op) *storepb.Command {
	return &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops, Versioned: true}}}
}

func tput(k, v string, tv uint64) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), TentativeVersion: tv}
}

func tdel(k string, tv uint64) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: []byte(k), TentativeVersion: tv}
}

// stored is k's raw record (found false: absent).
func (f *fixture) stored(k string) (record, bool) {
	f.t.Helper()
	rec, found, err := readRecord(f.db, keys.User(shard, []byte(k)))
	if err != nil {
		f.t.Fatal(err)
	}
	return rec, found
}

// version is the version k's stored value carries.
func (f *fixture) version(k string) uint64 {
	f.t.Helper()
	rec, found := f.stored(k)
	if !found {
		f.t.Fatalf("%q is absent", k)
	}
	return rec.version
}

// applied says whether a one-op reconciling command applied.
func (f *fixture) applied(stamp int64, op *concordpb.Op) bool {
	f.t.Helper()
	return f.one(f.apply(wholeRange, vcmd(stamp, op))).GetOk()
}

// TestVersionedWritesTakeIncreasingVersions: a versioned command's writes
// carry its version, the shard's highest stamp, or one above the last
// version when stamps go back; an unversioned command on a shard that has
// never versioned writes the envelope it always wrote (so binaries below
// version.Versions read it).
func TestVersionedWritesTakeIncreasingVersions(t *testing.T) {
	u := newFixture(t)
	u.apply(wholeRange, kvCmd(0, 0, at(0), put("c", "x")))
	raw, closer, err := u.db.Get(keys.User(shard, []byte("c")))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if !bytes.Equal(raw, []byte{tagPlain, 'x'}) {
		t.Fatalf("an unversioned PUT stored %x, want the plain envelope 00 78", raw)
	}

	f := newFixture(t)
	f.apply(wholeRange, vcmd(at(0), put("a", "1")))
	if v := f.version("a"); v != uint64(at(0)) {
		t.Fatalf("version %d, want the stamp %d", v, at(0))
	}
	f.apply(wholeRange, vcmd(at(-time.Second), put("b", "1"), incrOp("n", 1))) // a stamp behind the last
	if vb, vn := f.version("b"), f.version("n"); vb != uint64(at(0))+1 || vn != vb {
		t.Fatalf("versions %d and %d after a stamp that went back, want %d for both", vb, vn, uint64(at(0))+1)
	}
	f.apply(wholeRange, vcmd(at(time.Second), appendOp("n", "0")))
	if v := f.version("n"); v != uint64(at(time.Second)) {
		t.Fatalf("APPEND wrote version %d, want %d", v, at(time.Second))
	}
}

// TestVersionedFromTheFirstVersionedCommand: once a shard has applied a
// versioned command, an unversioned one (a leader that has not learned
// the cluster's version yet, during a rolling upgrade) still writes
// versions and raises delete buckets: otherwise an older tentative write
// would win over its writes.
func TestVersionedFromTheFirstVersionedCommand(t *testing.T) {
	f := newFixture(t)
	f.apply(wholeRange, kvCmd(0, 0, at(0), put("old", "unversioned")))
	f.apply(wholeRange, vcmd(at(time.Second), put("a", "1")))
	f.apply(wholeRange, kvCmd(0, 0, at(2*time.Second), put("k", "later"), del("d")))
	if v := f.version("k"); v != uint64(at(2*time.Second)) {
		t.Fatalf("an unversioned command after a versioned one wrote version %d, want %d", v, at(2*time.Second))
	}
	if f.applied(at(3*time.Second), tput("k", "older", uint64(at(1500*time.Millisecond)))) {
		t.Fatal("an older tentative write won over a later write of an unversioned command")
	}
	if f.applied(at(3*time.Second), tput("d", "older", uint64(at(1500*time.Millisecond)))) {
		t.Fatal("an older tentative write won over a later delete of an unversioned command")
	}
	// A value from before the first versioned command counts as written
	// at the highest stamp before it: newer tentative writes win over it,
	// older ones do not.
	if f.applied(at(4*time.Second), tput("old", "older", uint64(at(-time.Second)))) {
		t.Fatal("a tentative write older than an unversioned value applied")
	}
	if !f.applied(at(4*time.Second), tput("old", "newer", uint64(at(500*time.Millisecond)))) {
		t.Fatal("a tentative write newer than every unversioned write lost")
	}
}

// TestReconcileLastWriterWins: a tentative write applies only over an
// older version, and a write after it always takes a higher version than
// it, even from a leader whose clock is behind.
func TestReconcileLastWriterWins(t *testing.T) {
	f := newFixture(t)
	f.apply(wholeRange, vcmd(at(0), put("k", "committed")))
	if f.applied(at(time.Second), tput("k", "older", uint64(at(-time.Second)))) {
		t.Fatal("a tentative write older than the stored value applied")
	}
	f.value("k", []byte("committed"))
	tv := uint64(at(10 * time.Second))
	if !f.applied(at(10*time.Second), tput("k", "tentative", tv)) {
		t.Fatal("a tentative write newer than the stored value did not apply")
	}
	f.value("k", []byte("tentative"))
	if v := f.version("k"); v != tv {
		t.Fatalf("reconciled value at version %d, want the tentative version %d", v, tv)
	}
	// A later write, stamped by a leader whose clock is behind the
	// tentative version, still wins over it...
	f.apply(wholeRange, vcmd(at(5*time.Second), put("k", "later")))
	if v := f.version("k"); v <= tv {
		t.Fatalf("a later write took version %d, not above the reconciled %d", v, tv)
	}
	// ...and over any tentative write reconciled after it that is older.
	if f.applied(at(11*time.Second), tput("k", "stale", tv+1)) {
		t.Fatal("a tentative write older than a later acknowledged write applied over it")
	}
	f.value("k", []byte("later"))
}

// TestReconcileAbsentKeyAgainstItsDeleteBucket: a tentative write of an
// absent key loses to a later delete (of that key, existing or not, or of
// another key of its bucket), and wins over an earlier one; the sweep's
// delete of an expired key raises nothing.
func TestReconcileAbsentKeyAgainstItsDeleteBucket(t *testing.T) {
	f := newFixture(t)
	f.apply(wholeRange, vcmd(at(0), put("k", "v")))
	f.apply(wholeRange, vcmd(at(time.Second), del("k")))
	if f.applied(at(2*time.Second), tput("k", "before the delete", uint64(at(500*time.Millisecond)))) {
		t.Fatal("a tentative write older than the delete brought the key back")
	}
	f.value("k", nil)
	if !f.applied(at(3*time.Second), tput("k", "after the delete", uint64(at(1500*time.Millisecond)))) {
		t.Fatal("a tentative write newer than the delete did not apply")
	}
	f.value("k", []byte("after the delete"))

	// A delete of an absent key is a write too: a tentative PUT older
	// than it must not make the key exist after it.
	f.apply(wholeRange, vcmd(at(5*time.Second), del("never")))
	if f.applied(at(6*time.Second), tput("never", "x", uint64(at(4*time.Second)))) {
		t.Fatal("a tentative write older than a delete of the absent key applied")
	}

	// The sweep's delete of an expired key is no writer's.
	f.apply(wholeRange, vcmd(at(7*time.Second), &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("ttl"), Value: []byte("v"), TtlMs: 10}))
	f.apply(wholeRange, vcmd(at(8*time.Second), &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: []byte("ttl"),
		ExpireAtUnixMs: at(7*time.Second)/int64(time.Millisecond) + 10}))
	if _, found := f.stored("ttl"); found {
		t.Fatal("the sweep did not delete the expired key")
	}
	if f.applied(at(9*time.Second), tput("ttl", "older", uint64(at(6500*time.Millisecond)))) {
		t.Fatal("a tentative write older than the swept value applied after the sweep (it lost before it)")
	}
	if !f.applied(at(9*time.Second), tput("ttl", "tentative", uint64(at(7500*time.Millisecond)))) {
		t.Fatal("a tentative write newer than the swept value lost to the sweep's delete")
	}
}

// TestReconcileDelete: a tentative delete newer than the value removes it
// and raises the bucket to its own version, so an older tentative PUT of
// the key reconciled after it loses.
func TestReconcileDelete(t *testing.T) {
	f := newFixture(t)
	f.apply(wholeRange, vcmd(at(0), put("k", "v")))
	if !f.applied(at(time.Second), tdel("k", uint64(at(500*time.Millisecond)))) {
		t.Fatal("a newer tentative delete did not apply")
	}
	f.value("k", nil)
	if f.applied(at(2*time.Second), tput("k", "older", uint64(at(250*time.Millisecond)))) {
		t.Fatal("a tentative PUT older than a reconciled tentative delete applied")
	}
	if f.applied(at(3*time.Second), tdel("k", uint64(at(100*time.Millisecond)))) {
		t.Fatal("an older tentative delete of an absent key reported applied")
	}
}

// TestTentativeVersionCapped: a tentative version past the shard's
// highest stamp (a node's clock ahead, or a forged version) counts as that
// stamp, so it cannot push the shard's versions past the proposers'
// clocks: a write after it, stamped a little later, is newer.
func TestTentativeVersionCapped(t *testing.T) {
	f := newFixture(t)
	f.apply(wholeRange, vcmd(at(-time.Second), put("j", "v")))
	if !f.applied(at(0), tput("k", "v", uint64(at(24*365*time.Hour)))) {
		t.Fatal("did not apply")
	}
	if v, want := f.version("k"), uint64(at(0)); v != want {
		t.Fatalf("version %d, want the cap %d", v, want)
	}
	f.apply(wholeRange, vcmd(at(time.Second), put("i", "v")))
	if v, want := f.version("i"), uint64(at(time.Second)); v != want {
		t.Fatalf("a write a second later took version %d, want its stamp %d", v, want)
	}
}

// TestCommandVersionAboveItsTentativeOps: in one command (a node may merge
// a reconciling batch with clients' writes), a client's write of a key
// wins over a tentative write of it, before or after it.
func TestCommandVersionAboveItsTentativeOps(t *testing.T) {
	f := newFixture(t)
	f.apply(wholeRange, vcmd(at(0), tput("a", "tentative", uint64(at(0))), put("a", "client")))
	f.apply(wholeRange, vcmd(at(time.Second), put("b", "client"), tput("b", "tentative", uint64(at(time.Second)))))
	f.value("a", []byte("client"))
	f.value("b", []byte("client"))
	if v := f.version("b"); v <= uint64(at(time.Second)) {
		t.Fatalf("the client's write took version %d, not above the command's tentative %d", v, at(time.Second))
	}
}

// TestVersionHighSurvivesRestart: the shard's highest version is state
// (in the applied-state record), not a cache: a state machine started over
// the same data still stamps above it.
func TestVersionHighSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	ahead := uint64(at(time.Minute)) // a leader whose clock is ahead
	f.apply(wholeRange, vcmd(at(time.Minute), put("k", "v")))
	f.sm = New(shard)
	f.apply(wholeRange, vcmd(at(time.Second), put("j", "v")))
	if v := f.version("j"); v <= ahead {
		t.Fatalf("after a restart a write took version %d, not above %d", v, ahead)
	}
	f.sm.SnapshotInstalled()                                           // drops the cached clock: read again from the record
	f.apply(wholeRange, kvCmd(0, 0, at(2*time.Second), put("i", "v"))) // versioned from the first on
	if v := f.version("i"); v <= ahead {
		t.Fatalf("after the caches were dropped a write took version %d, not above %d", v, ahead)
	}
}

// TestTentativeRefusals: reconciling ops only in a versioned command, and
// only plain PUTs and DELETEs.
func TestTentativeRefusals(t *testing.T) {
	f := newFixture(t)
	res := f.apply(wholeRange, kvCmd(0, 0, at(0), tput("k", "v", 5)))
	if codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("unversioned command with a tentative op: %v, want InvalidArgument", res)
	}
	f.value("k", nil)
	for _, op := range []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), TtlMs: 5, TentativeVersion: 5},
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), ReturnPrev: true, TentativeVersion: 5},
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), Condition: concordpb.Condition_CONDITION_NX, TentativeVersion: 5},
		{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1, TentativeVersion: 5},
		{Type: concordpb.OpType_OP_GET, Key: []byte("k"), TentativeVersion: 5},
	} {
		if CheckOp(op) == nil {
			t.Errorf("CheckOp accepted %v", op)
		}
	}
	if err := CheckOp(tput("k", "v", 5)); err != nil {
		t.Fatal(err)
	}
	if err := CheckOp(tdel("k", 5)); err != nil {
		t.Fatal(err)
	}
}

// TestEnvelopes: every envelope form reads back as written, and a tag
// past the known ones is refused.
func TestEnvelopes(t *testing.T) {
	for _, c := range []struct {
		at int64
		v  uint64
	}{{0, 0}, {7, 0}, {0, 9}, {7, 9}} {
		n := envelopeLen(c.at, c.v)
		buf := make([]byte, n, n+3)
		putEnvelope(buf, c.at, c.v)
		buf = append(buf, "val"...)
		value, at, v, err := decodeValue(buf)
		if err != nil || string(value) != "val" || at != c.at || v != c.v {
			t.Fatalf("%+v: decoded %q %d %d %v", c, value, at, v, err)
		}
		if _, _, _, err := decodeValue(buf[:n-1]); n > 1 && err == nil {
			t.Fatalf("%+v: a truncated envelope decoded", c)
		}
	}
	if _, _, _, err := decodeValue([]byte{4, 'x'}); err == nil {
		t.Fatal("tag 4 decoded")
	}
}

// TestDeleteBucketIsFNV1a: the bucket function is fixed for ever (a change
// would misplace every bucket a shard holds): FNV-1a folded to 16 bits.
func TestDeleteBucketIsFNV1a(t *testing.T) {
	for _, k := range []string{"", "a", "key:__rand_int__", "\x00\xff"} {
		h := fnv.New32a()
		h.Write([]byte(k))
		s := h.Sum32()
		if got, want := deleteBucket([]byte(k)), uint16(s^s>>16); got != want {
			t.Errorf("deleteBucket(%q) = %d, want %d", k, got, want)
		}
	}
}
