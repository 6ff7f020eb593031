package kv

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// t0 is the leader's clock in the tests of this file, Unix ms; commands
// are stamped at ms(…) offsets from it.
const t0 = int64(1_700_000_000_000)

// at is the command stamp (Unix ns) d after t0.
func at(d time.Duration) int64 { return t0*int64(time.Millisecond) + int64(d) }

// op applies one op at time d with a value size limit and returns its result.
func (f *fixture) op(d time.Duration, maxValue int64, op *concordpb.Op) *concordpb.OpResult {
	f.t.Helper()
	return f.one(f.apply(wholeRange, &storepb.Command{UnixNanos: at(d), Kind: &storepb.Command_Kv{
		Kv: &storepb.KVCommand{Ops: []*concordpb.Op{op}, MaxValueBytes: maxValue}}}))
}

func incrOp(k string, d int64) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte(k), IntDelta: d}
}

func incrFloatOp(k string, d float64) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte(k), FloatDelta: d}
}

func appendOp(k, v string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_APPEND, Key: []byte(k), Value: []byte(v)}
}

func setRangeOp(k string, off int64, v string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_SET_RANGE, Key: []byte(k), Offset: off, Value: []byte(v)}
}

func putTTL(k, v string, ttl time.Duration) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), TtlMs: ttl.Milliseconds()}
}

func expireOp(k string, ttl time.Duration, c concordpb.Condition) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: []byte(k), TtlMs: ttl.Milliseconds(), Condition: c}
}

// state asserts k's value and expiry as a read at time d sees them.
func (f *fixture) state(d time.Duration, k string, want []byte, wantExpireAt int64) {
	f.t.Helper()
	now := t0 + d.Milliseconds()
	v, exp, found, err := Get(f.db, shard, []byte(k), now)
	if err != nil || found != (want != nil) || string(v) != string(want) || exp != wantExpireAt {
		f.t.Fatalf("Get(%q) at +%v = %q, expire %d, found %v, %v; want %q expire %d", k, d, v, exp, found, err, want, wantExpireAt)
	}
}

// TestIncr protects INCR: absent is 0, the result's text and number, the
// strict integer syntax of Redis, and overflow, each failure changing
// nothing.
func TestIncr(t *testing.T) {
	f := newFixture(t)
	if r := f.op(0, 0, incrOp("n", 1)); r.GetError() != 0 || r.GetIntValue() != 1 || string(r.GetValue()) != "1" {
		t.Fatalf("INCR of an absent key = %v, want 1", r)
	}
	if r := f.op(0, 0, incrOp("n", -11)); r.GetIntValue() != -10 || string(r.GetValue()) != "-10" {
		t.Fatalf("INCR by -11 = %v, want -10", r)
	}
	f.state(0, "n", []byte("-10"), 0)
	for _, bad := range []string{"abc", " 1", "1 ", "+1", "01", "-0", "1.5", "", "9223372036854775808", "1e3"} {
		f.kv(0, 0, at(0), put("s", bad))
		if r := f.op(0, 0, incrOp("s", 1)); r.GetError() != concordpb.OpError_OP_ERROR_NOT_INTEGER {
			t.Fatalf("INCR of %q = %v, want NOT_INTEGER", bad, r)
		}
		f.state(0, "s", []byte(bad), 0)
	}
	for _, tc := range []struct {
		start string
		delta int64
	}{{"9223372036854775807", 1}, {"-9223372036854775808", -1}, {"1", math.MaxInt64}} {
		f.kv(0, 0, at(0), put("o", tc.start))
		if r := f.op(0, 0, incrOp("o", tc.delta)); r.GetError() != concordpb.OpError_OP_ERROR_OVERFLOW {
			t.Fatalf("INCR %s by %d = %v, want OVERFLOW", tc.start, tc.delta, r)
		}
		f.state(0, "o", []byte(tc.start), 0)
	}
	f.kv(0, 0, at(0), put("o", "9223372036854775806"))
	if r := f.op(0, 0, incrOp("o", 1)); r.GetError() != 0 || r.GetIntValue() != math.MaxInt64 {
		t.Fatalf("INCR to MaxInt64 = %v", r)
	}
}

// TestIncrFloat protects INCRBYFLOAT: Redis's output format (long double
// arithmetic, trailing zeros trimmed, no exponent), its parsing, and
// NOT_FLOAT / TOO_LARGE changing nothing.
func TestIncrFloat(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		start string // "" : absent
		delta float64
		want  string
	}{
		{"10.5", 0.1, "10.6"},
		{"3.0e3", 0, "3000"},
		{"0.1", 0.2, "0.3"},
		{"", 1.5, "1.5"},
		{"5", -5, "0"},
		{"-1", 0.5, "-0.5"},
		{"+1.5", 1, "2.5"},
		{"5.0e3", 2.0e2, "5200"},
		{"10", 1e17, "100000000000000010"},
	} {
		f.kv(0, 0, at(0), del("x"))
		if tc.start != "" {
			f.kv(0, 0, at(0), put("x", tc.start))
		}
		r := f.op(0, 0, incrFloatOp("x", tc.delta))
		if r.GetError() != 0 || string(r.GetValue()) != tc.want {
			t.Fatalf("INCRBYFLOAT %q by %v = %v, want %q", tc.start, tc.delta, r, tc.want)
		}
		f.state(0, "x", []byte(tc.want), 0)
	}
	for _, bad := range []string{"abc", " 1", "1 ", "nan", "inf", "-inf", "1e5000", "", "1_0"} {
		f.kv(0, 0, at(0), put("s", bad))
		if r := f.op(0, 0, incrFloatOp("s", 1)); r.GetError() != concordpb.OpError_OP_ERROR_NOT_FLOAT {
			t.Fatalf("INCRBYFLOAT of %q = %v, want NOT_FLOAT", bad, r)
		}
		f.state(0, "s", []byte(bad), 0)
	}
	f.kv(0, 0, at(0), put("l", "1"))
	if r := f.op(0, 2, incrFloatOp("l", 0.25)); r.GetError() != concordpb.OpError_OP_ERROR_TOO_LARGE {
		t.Fatalf("INCRBYFLOAT to %q under a 2-byte limit = %v, want TOO_LARGE", "1.25", r)
	}
	f.state(0, "l", []byte("1"), 0)
}

// TestAppendAndSetRange protects APPEND and SETRANGE: lengths, zero
// padding, the no-op on an absent key with an empty value, and the value
// size limit holding for the result.
func TestAppendAndSetRange(t *testing.T) {
	f := newFixture(t)
	if r := f.op(0, 0, appendOp("a", "ab")); r.GetIntValue() != 2 {
		t.Fatalf("APPEND to absent = %v, want length 2", r)
	}
	if r := f.op(0, 5, appendOp("a", "cd")); r.GetIntValue() != 4 {
		t.Fatalf("APPEND = %v, want length 4", r)
	}
	if r := f.op(0, 5, appendOp("a", "ef")); r.GetError() != concordpb.OpError_OP_ERROR_TOO_LARGE {
		t.Fatalf("APPEND to 6 bytes under a limit of 5 = %v, want TOO_LARGE", r)
	}
	f.state(0, "a", []byte("abcd"), 0)
	if r := f.op(0, 0, appendOp("e", "")); r.GetIntValue() != 0 {
		t.Fatalf("APPEND of nothing = %v", r)
	}
	f.state(0, "e", []byte{}, 0) // created empty, as Redis does

	if r := f.op(0, 0, setRangeOp("r", 3, "")); r.GetIntValue() != 0 || r.GetError() != 0 {
		t.Fatalf("SETRANGE of nothing on absent = %v, want 0", r)
	}
	f.state(0, "r", nil, 0)
	if r := f.op(0, 0, setRangeOp("r", 3, "ab")); r.GetIntValue() != 5 {
		t.Fatalf("SETRANGE on absent = %v, want length 5", r)
	}
	f.state(0, "r", []byte("\x00\x00\x00ab"), 0)
	f.kv(0, 0, at(0), put("h", "hello"))
	if r := f.op(0, 0, setRangeOp("h", 1, "EY")); r.GetIntValue() != 5 {
		t.Fatalf("SETRANGE inside = %v, want length 5", r)
	}
	f.state(0, "h", []byte("hEYlo"), 0)
	if r := f.op(0, 0, setRangeOp("h", 4, "")); r.GetIntValue() != 5 {
		t.Fatalf("SETRANGE of nothing = %v, want the length, 5", r)
	}
	if r := f.op(0, 0, setRangeOp("h", 5, "!!")); r.GetIntValue() != 7 {
		t.Fatalf("SETRANGE at the end = %v, want 7", r)
	}
	if r := f.op(0, 8, setRangeOp("h", 7, "xx")); r.GetError() != concordpb.OpError_OP_ERROR_TOO_LARGE {
		t.Fatalf("SETRANGE beyond the limit = %v, want TOO_LARGE", r)
	}
	f.state(0, "h", []byte("hEYlo!!"), 0)
}

// TestGetDelete protects GETDEL: the value comes back and the key is gone.
func TestGetDelete(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), putTTL("k", "v", time.Minute))
	gd := &concordpb.Op{Type: concordpb.OpType_OP_GET_DELETE, Key: []byte("k")}
	if r := f.op(0, 0, gd); !r.GetOk() || string(r.GetValue()) != "v" || r.GetExpireAtUnixMs() != t0+60_000 {
		t.Fatalf("GETDEL = %v", r)
	}
	f.state(0, "k", nil, 0)
	if n := f.indexEntries(); n != 0 {
		t.Fatalf("GETDEL left %d expiry index entries", n)
	}
	if r := f.op(0, 0, gd); r.GetOk() {
		t.Fatalf("GETDEL of absent = %v", r)
	}
}

// TestPutConditions protects SET NX / XX: the put happens only under its
// condition, the result says whether it did and what was there, and an
// expired key counts as absent.
func TestPutConditions(t *testing.T) {
	f := newFixture(t)
	nx := func(k, v string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), Condition: concordpb.Condition_CONDITION_NX, ReturnPrev: true}
	}
	xx := func(k, v string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), Condition: concordpb.Condition_CONDITION_XX, ReturnPrev: true}
	}
	if r := f.op(0, 0, xx("k", "1")); r.GetOk() || r.GetExists() {
		t.Fatalf("XX on absent = %v, want not made", r)
	}
	f.state(0, "k", nil, 0)
	if r := f.op(0, 0, nx("k", "1")); !r.GetOk() || r.GetExists() {
		t.Fatalf("NX on absent = %v, want made", r)
	}
	if r := f.op(0, 0, nx("k", "2")); r.GetOk() || !r.GetExists() || string(r.GetValue()) != "1" {
		t.Fatalf("NX on present = %v, want not made, previous 1", r)
	}
	f.state(0, "k", []byte("1"), 0)
	if r := f.op(0, 0, xx("k", "3")); !r.GetOk() || !r.GetExists() || string(r.GetValue()) != "1" {
		t.Fatalf("XX on present = %v, want made, previous 1", r)
	}
	f.state(0, "k", []byte("3"), 0)
	f.kv(0, 0, at(0), putTTL("e", "old", time.Second))
	if r := f.op(2*time.Second, 0, nx("e", "new")); !r.GetOk() || r.GetExists() || len(r.GetValue()) != 0 {
		t.Fatalf("NX on an expired key = %v, want made over an absent key", r)
	}
	f.state(2*time.Second, "e", []byte("new"), 0)
	if n := f.indexEntries(); n != 0 {
		t.Fatalf("%d expiry index entries after the expired key was overwritten", n)
	}
}

// TestTTLKeptOrCleared protects which writes keep a key's expiry (INCR,
// INCR_FLOAT, APPEND, SET_RANGE, PUT keep_ttl) and which clear it (a plain
// PUT, a CAS), and that a TTL is measured from the command's stamp.
func TestTTLKeptOrCleared(t *testing.T) {
	f := newFixture(t)
	exp := t0 + 10_000
	f.kv(0, 0, at(0), putTTL("k", "1", 10*time.Second))
	f.state(0, "k", []byte("1"), exp)
	f.op(time.Second, 0, incrOp("k", 1))
	f.state(time.Second, "k", []byte("2"), exp)
	f.op(time.Second, 0, incrFloatOp("k", 0.5))
	f.state(time.Second, "k", []byte("2.5"), exp)
	f.op(time.Second, 0, appendOp("k", "x"))
	f.state(time.Second, "k", []byte("2.5x"), exp)
	f.op(time.Second, 0, setRangeOp("k", 0, "3"))
	f.state(time.Second, "k", []byte("3.5x"), exp)
	f.op(time.Second, 0, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("kept"), KeepTtl: true})
	f.state(time.Second, "k", []byte("kept"), exp)
	f.op(time.Second, 0, put("k", "plain"))
	f.state(time.Second, "k", []byte("plain"), 0)
	f.state(time.Hour, "k", []byte("plain"), 0)

	f.kv(0, 0, at(0), &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("a"), Value: []byte("v"), ExpireAtUnixMs: exp})
	f.state(0, "a", []byte("v"), exp)
	f.op(0, 0, cas("a", []byte("v"), false, "w", false))
	f.state(0, "a", []byte("w"), 0)
	if n := f.indexEntries(); n != 0 {
		t.Fatalf("%d expiry index entries after every expiry was cleared", n)
	}
	// A PUT whose expiry is already past deletes the key.
	f.kv(0, 0, at(0), &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("a"), Value: []byte("v"), ExpireAtUnixMs: t0 - 1})
	f.state(0, "a", nil, 0)
}

// TestExpire protects EXPIRE's conditions (NX, XX, GT, LT, no expiry
// counting as infinite), PERSIST, a time not in the future deleting the key,
// an absent or expired key answering not changed, and the value returned
// (GETEX).
func TestExpire(t *testing.T) {
	const (
		none = concordpb.Condition_CONDITION_NONE
		nx   = concordpb.Condition_CONDITION_NX
		xx   = concordpb.Condition_CONDITION_XX
		gt   = concordpb.Condition_CONDITION_GT
		lt   = concordpb.Condition_CONDITION_LT
	)
	for _, tc := range []struct {
		name    string
		current time.Duration // the key's TTL before; 0: none
		ttl     time.Duration
		cond    concordpb.Condition
		ok      bool
	}{
		{"set on none", 0, time.Minute, none, true},
		{"replace", time.Hour, time.Minute, none, true},
		{"NX on none", 0, time.Minute, nx, true},
		{"NX on one", time.Hour, time.Minute, nx, false},
		{"XX on none", 0, time.Minute, xx, false},
		{"XX on one", time.Hour, time.Minute, xx, true},
		{"GT on none (infinite)", 0, time.Minute, gt, false},
		{"GT later", time.Minute, time.Hour, gt, true},
		{"GT earlier", time.Hour, time.Minute, gt, false},
		{"GT equal", time.Minute, time.Minute, gt, false},
		{"LT on none (infinite)", 0, time.Minute, lt, true},
		{"LT earlier", time.Hour, time.Minute, lt, true},
		{"LT later", time.Minute, time.Hour, lt, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			before := int64(0)
			if tc.current != 0 {
				before = t0 + tc.current.Milliseconds()
			}
			f.kv(0, 0, at(0), putTTL("k", "v", tc.current))
			r := f.op(0, 0, expireOp("k", tc.ttl, tc.cond))
			if r.GetOk() != tc.ok || !r.GetExists() || string(r.GetValue()) != "v" {
				t.Fatalf("EXPIRE = %v, want ok %v with the value", r, tc.ok)
			}
			want := before
			if tc.ok {
				want = t0 + tc.ttl.Milliseconds()
			}
			f.state(0, "k", []byte("v"), want)
			if n, wantN := f.indexEntries(), map[bool]int{true: 1, false: 0}[want != 0]; n != wantN {
				t.Fatalf("%d expiry index entries, want %d", n, wantN)
			}
		})
	}
	f := newFixture(t)
	f.kv(0, 0, at(0), putTTL("k", "v", time.Minute))
	persist := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: []byte("k"), Persist: true}
	if r := f.op(0, 0, persist); !r.GetOk() {
		t.Fatalf("PERSIST of a key with an expiry = %v", r)
	}
	f.state(0, "k", []byte("v"), 0)
	if r := f.op(0, 0, persist); r.GetOk() {
		t.Fatalf("PERSIST of a key without one = %v, want not changed", r)
	}
	if r := f.op(0, 0, expireOp("absent", time.Minute, none)); r.GetOk() || r.GetExists() {
		t.Fatalf("EXPIRE of an absent key = %v", r)
	}
	f.state(0, "absent", nil, 0)
	past := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: []byte("k"), ExpireAtUnixMs: t0}
	if r := f.op(0, 0, past); !r.GetOk() {
		t.Fatalf("EXPIRE at now = %v, want done", r)
	}
	if rec, stored, _ := readRecord(f.db, keyOf("k")); stored {
		t.Fatalf("EXPIRE at a time not in the future left %v stored", rec)
	}
	f.kv(0, 0, at(0), putTTL("x", "v", time.Second))
	if r := f.op(2*time.Second, 0, expireOp("x", time.Hour, none)); r.GetOk() || r.GetExists() {
		t.Fatalf("EXPIRE of an expired key = %v, want as absent", r)
	}
	f.state(2*time.Second, "x", nil, 0)
}

// TestDeleteExpired protects the sweep's op: it deletes a key only if its
// expiry has passed on the shard's clock, and leaves keys without expiry or
// not yet expired (a key set again after the sweep read the index).
func TestDeleteExpired(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), putTTL("soon", "v", 100*time.Millisecond), putTTL("later", "v", time.Hour), put("never", "v"))
	de := func(k string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: []byte(k)}
	}
	res := f.kv(0, 0, at(time.Second), de("soon"), de("later"), de("never"), de("absent"))
	for i, want := range []bool{true, false, false, false} {
		if got := res.GetResults()[i].GetOk(); got != want {
			t.Fatalf("DELETE_EXPIRED op %d = %v, want %v", i, got, want)
		}
	}
	if _, stored, _ := readRecord(f.db, keyOf("soon")); stored {
		t.Fatal("the expired key is still stored")
	}
	f.state(time.Second, "later", []byte("v"), t0+3_600_000)
	f.state(time.Second, "never", []byte("v"), 0)
	if n := f.indexEntries(); n != 1 {
		t.Fatalf("%d expiry index entries, want 1 (later's)", n)
	}
	// Expired by the reader's clock but not by the shard's: the shard's wins.
	f.kv(0, 0, at(time.Second), putTTL("k", "v", time.Second))
	if r := f.op(1500*time.Millisecond, 0, de("k")); r.GetOk() {
		t.Fatalf("DELETE_EXPIRED before the shard's clock reached the expiry = %v", r)
	}
	f.state(1500*time.Millisecond, "k", []byte("v"), t0+2_000)
}

// TestOpErrorChangesNothingElse: a failed op leaves its key as it was, and
// the other ops of the batch still apply.
func TestOpErrorChangesNothingElse(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), put("s", "text"))
	res := f.kv(0, 0, at(0), incrOp("s", 1), put("p", "v"), incrOp("n", 2))
	if res.GetResults()[0].GetError() != concordpb.OpError_OP_ERROR_NOT_INTEGER || res.GetResults()[2].GetIntValue() != 2 {
		t.Fatalf("results %v", res.GetResults())
	}
	f.state(0, "s", []byte("text"), 0)
	f.state(0, "p", []byte("v"), 0)
}

// TestMalformedOpAppliesNothing: an op the front door should have refused
// (here a negative TTL, or a TTL in a command without a stamp) makes the
// whole command fail, applying nothing.
func TestMalformedOpAppliesNothing(t *testing.T) {
	f := newFixture(t)
	bad := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), TtlMs: -1}
	if res := f.kv(0, 0, at(0), put("a", "1"), bad); codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("negative TTL: %v", res)
	}
	f.state(0, "a", nil, 0)
	// A shard whose clock was never set cannot place a TTL.
	g := newFixture(t)
	if res := g.kv(0, 0, 0, put("a", "1"), putTTL("k", "v", time.Second)); codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("TTL without a stamp: %v", res)
	}
	g.state(0, "a", nil, 0)
}

// TestSessionRetryOfNewOps: a retried INCR is answered from the session
// record and adds nothing.
func TestSessionRetryOfNewOps(t *testing.T) {
	f := newFixture(t)
	first := f.kv(7, 1, at(0), incrOp("n", 5))
	again := f.kv(7, 1, at(time.Second), incrOp("n", 5))
	if again.GetResults()[0].GetIntValue() != 5 || first.GetResults()[0].GetIntValue() != 5 {
		t.Fatalf("first %v, retry %v: want 5 both", first, again)
	}
	f.state(time.Second, "n", []byte("5"), 0)
}

// TestExpiredIsAbsentAtApply: INCR on an expired key starts from 0 and
// drops the old expiry (and its index entry).
func TestExpiredIsAbsentAtApply(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("n"), Value: []byte("41"), TtlMs: 1000})
	if r := f.op(2*time.Second, 0, incrOp("n", 1)); r.GetIntValue() != 1 {
		t.Fatalf("INCR on an expired key = %v, want 1", r)
	}
	f.state(time.Hour, "n", []byte("1"), 0)
	if n := f.indexEntries(); n != 0 {
		t.Fatalf("%d stale expiry index entries", n)
	}
}

func checkAbsent(k string, skip uint32) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: []byte(k), ExpectAbsent: true, Skip: skip}
}

// TestCheckSkipsGuardedOps protects OP_CHECK, MSETNX's guard: checks that
// all match let the ops after them apply; one that fails skips exactly its
// skip ops (marked skipped, nothing written) and the ops after those still
// apply; checks see the state before the guarded writes, expired keys as
// absent, and a value check compares the value.
func TestCheckSkipsGuardedOps(t *testing.T) {
	f := newFixture(t)
	res := f.kv(0, 0, at(0), checkAbsent("a", 3), checkAbsent("b", 2), put("a", "1"), put("b", "2"))
	if r := res.GetResults(); !r[0].GetOk() || !r[1].GetOk() || r[2].GetSkipped() || r[3].GetSkipped() {
		t.Fatalf("all absent: results %v", r)
	}
	f.state(0, "a", []byte("1"), 0)
	f.state(0, "b", []byte("2"), 0)

	// "b" exists: the check of "c" passes, that of "b" fails and skips the
	// two puts; the put after the guarded ops applies.
	res = f.kv(0, 0, at(0), checkAbsent("c", 3), checkAbsent("b", 2), put("c", "3"), put("b", "9"), put("d", "4"))
	r := res.GetResults()
	if !r[0].GetOk() || r[1].GetOk() || !r[1].GetExists() || string(r[1].GetValue()) != "2" {
		t.Fatalf("checks: %v", r)
	}
	if !r[2].GetSkipped() || !r[3].GetSkipped() || r[4].GetSkipped() {
		t.Fatalf("skips: %v", r)
	}
	f.state(0, "c", nil, 0)
	f.state(0, "b", []byte("2"), 0)
	f.state(0, "d", []byte("4"), 0)

	// A failed first check skips the second check too.
	r = f.kv(0, 0, at(0), checkAbsent("a", 2), checkAbsent("x", 1), put("x", "1")).GetResults()
	if r[0].GetOk() || !r[1].GetSkipped() || r[1].GetOk() || !r[2].GetSkipped() {
		t.Fatalf("first check failing: %v", r)
	}
	f.state(0, "x", nil, 0)

	// An expired key counts as absent; a value check compares the value.
	f.kv(0, 0, at(0), putTTL("e", "old", time.Second))
	r = f.kv(0, 0, at(2*time.Second), checkAbsent("e", 1), put("e", "new")).GetResults()
	if !r[0].GetOk() || r[1].GetSkipped() {
		t.Fatalf("expired key: %v", r)
	}
	eq := &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: []byte("e"), Expected: []byte("other"), Skip: 1}
	if r = f.kv(0, 0, at(2*time.Second), eq, del("e")).GetResults(); r[0].GetOk() || !r[1].GetSkipped() {
		t.Fatalf("value check: %v", r)
	}
	f.state(2*time.Second, "e", []byte("new"), 0)
}

// TestMalformedCheckAppliesNothing: a skip past the end of the batch, a
// skip on another op type, or a CHECK carrying a value fails the whole
// command.
func TestMalformedCheckAppliesNothing(t *testing.T) {
	f := newFixture(t)
	withSkip := put("k", "v")
	withSkip.Skip = 1
	withValue := checkAbsent("k", 0)
	withValue.Value = []byte("v")
	for name, ops := range map[string][]*concordpb.Op{
		"skip past the end":  {put("a", "1"), checkAbsent("k", 2), put("k", "v")},
		"skip on a put":      {put("a", "1"), withSkip, put("k", "v")},
		"check with a value": {put("a", "1"), withValue},
	} {
		if res := f.kv(0, 0, at(0), ops...); codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, res)
		}
		f.state(0, "a", nil, 0)
	}
}

// TestCheckOpKnowsTheEnums: CheckOp calls a type or condition unknown
// exactly when concordpb does not define it (its flags are built from the
// generated name maps).
func TestCheckOpKnowsTheEnums(t *testing.T) {
	for v := int32(-3); v < 300; v++ {
		_, typeOK := concordpb.OpType_name[v]
		err := CheckOp(&concordpb.Op{Type: concordpb.OpType(v)})
		if unknown := err != nil && strings.HasPrefix(err.Error(), "unknown type"); unknown == typeOK {
			t.Errorf("type %d: CheckOp says %v; defined: %v", v, err, typeOK)
		}
		_, condOK := concordpb.Condition_name[v]
		err = CheckOp(&concordpb.Op{Type: concordpb.OpType_OP_PUT, Condition: concordpb.Condition(v)})
		if unknown := err != nil && strings.HasPrefix(err.Error(), "unknown condition"); unknown == condOK {
			t.Errorf("condition %d: CheckOp says %v; defined: %v", v, err, condOK)
		}
	}
	for _, v := range []int32{math.MinInt32, math.MaxInt32} {
		if CheckOp(&concordpb.Op{Type: concordpb.OpType(v)}) == nil || CheckOp(&concordpb.Op{Condition: concordpb.Condition(v)}) == nil {
			t.Errorf("enum value %d passed CheckOp", v)
		}
	}
}
