package kv

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

const shard = 3

// wholeRange is a descriptor owning the whole hash space.
var wholeRange = &concordpb.ShardDescriptor{ShardId: shard, StartHash: 0, EndHash: math.MaxUint64}

type fixture struct {
	t  *testing.T
	db *pebble.DB
	sm *StateMachine
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	// The state machine works on Pebble batches; a bare in-memory Pebble
	// is all it needs.
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &fixture{t: t, db: db, sm: New(shard)}
}

// apply applies cmd in its own indexed batch, commits it, and returns the result.
func (f *fixture) apply(desc *concordpb.ShardDescriptor, cmd *storepb.Command) *storepb.CommandResult {
	f.t.Helper()
	return f.applyBatch(desc, cmd)[0]
}

// applyBatch applies cmds in one indexed batch, as one raft loop turn does
// (Flush after the last), commits it, and returns their results.
func (f *fixture) applyBatch(desc *concordpb.ShardDescriptor, cmds ...*storepb.Command) []*storepb.CommandResult {
	f.t.Helper()
	b := f.db.NewIndexedBatch()
	defer b.Close()
	var out []*storepb.CommandResult
	for _, cmd := range cmds {
		res, err := f.sm.Apply(b, desc, cmd)
		if err != nil {
			f.t.Fatalf("Apply: %v", err)
		}
		out = append(out, res)
	}
	if err := flushApplied(f.sm, b); err != nil {
		f.t.Fatalf("Flush: %v", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// flushApplied ends a batch as the replica does: Flush, then the
// applied-state record, with the shard clock Flush put in it, into b.
func flushApplied(sm *StateMachine, b *pebble.Batch) error {
	var as storepb.AppliedState
	if err := sm.Flush(b, &as); err != nil {
		return err
	}
	return storage.SetProto(b, keys.Applied(sm.shard), &as)
}

// kv applies ops as one KV command of session/seq at time now.
func (f *fixture) kv(session, seq uint64, now int64, ops ...*concordpb.Op) *storepb.CommandResult {
	f.t.Helper()
	return f.apply(wholeRange, kvCmd(session, seq, now, ops...))
}

func kvCmd(session, seq uint64, now int64, ops ...*concordpb.Op) *storepb.Command {
	return &storepb.Command{UnixNanos: now, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: session, Seq: seq, Ops: ops,
	}}}
}

// put is a blind PUT: it asks nothing of the previous value.
func put(k, v string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v)}
}

// putPrev is a PUT that returns the previous value (return_prev).
func putPrev(k, v string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), ReturnPrev: true}
}

func del(k string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: []byte(k)}
}

func getOp(k string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte(k)}
}

// one returns the single op result of a successful command.
func (f *fixture) one(res *storepb.CommandResult) *concordpb.OpResult {
	f.t.Helper()
	if res.GetErrorCode() != 0 || len(res.GetResults()) != 1 {
		f.t.Fatalf("want one op result, got %v", res)
	}
	return res.GetResults()[0]
}

// value asserts the stored value of k (absent when want is nil).
func (f *fixture) value(k string, want []byte) {
	f.t.Helper()
	got, _, found, err := Get(f.db, shard, []byte(k), 0)
	if err != nil || found != (want != nil) || !bytes.Equal(got, want) {
		f.t.Fatalf("Get(%q) = %q, %v, %v; want %q (found %v)", k, got, found, err, want, want != nil)
	}
}

// TestPutReturnsPrevious protects Put's result with return_prev: whether a
// value existed and which, and that the new value is stored.
func TestPutReturnsPrevious(t *testing.T) {
	f := newFixture(t)
	if r := f.one(f.kv(0, 0, 1, putPrev("k", "v1"))); r.GetOk() || r.GetExists() || r.GetValue() != nil {
		t.Fatalf("first Put: %v, want no previous value", r)
	}
	if r := f.one(f.kv(0, 0, 2, putPrev("k", "v2"))); !r.GetOk() || !r.GetExists() || string(r.GetValue()) != "v1" {
		t.Fatalf("second Put: %v, want previous v1", r)
	}
	f.value("k", []byte("v2"))
}

// TestDeleteReportsExisted protects Delete's existed flag and its effect.
func TestDeleteReportsExisted(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, 1, put("k", "v"))
	if r := f.one(f.kv(0, 0, 2, del("k"))); !r.GetOk() {
		t.Fatalf("Delete of a present key: %v, want existed", r)
	}
	f.value("k", nil)
	if r := f.one(f.kv(0, 0, 3, del("k"))); r.GetOk() {
		t.Fatalf("Delete of an absent key: %v, want not existed", r)
	}
}

// TestGetOp protects the read op inside a command, including an empty value
// (present) versus an absent key.
func TestGetOp(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, 1, put("empty", ""))
	if r := f.one(f.kv(0, 0, 2, getOp("empty"))); !r.GetOk() || len(r.GetValue()) != 0 {
		t.Fatalf("Get of an empty value: %v, want found", r)
	}
	if r := f.one(f.kv(0, 0, 3, getOp("nothing"))); r.GetOk() {
		t.Fatalf("Get of an absent key: %v, want not found", r)
	}
	f.value("empty", []byte{})
}

func cas(k string, expected []byte, expectAbsent bool, value string, isDelete bool) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_CAS, Key: []byte(k), Expected: expected,
		ExpectAbsent: expectAbsent, Value: []byte(value), Delete: isDelete}
}

// TestCompareAndSwap protects every CAS branch: expect-absent, expected value
// match and mismatch, delete on match, and the reported current value.
func TestCompareAndSwap(t *testing.T) {
	f := newFixture(t)
	steps := []struct {
		name          string
		op            *concordpb.Op
		ok, exists    bool
		current, want []byte // value reported before, value stored after (nil: absent)
	}{
		{"absent, expected empty", cas("k", nil, false, "x", false), false, false, nil, nil},
		{"expect absent, absent", cas("k", nil, true, "v1", false), true, false, nil, []byte("v1")},
		{"expect absent, present", cas("k", nil, true, "v2", false), false, true, []byte("v1"), []byte("v1")},
		{"expected mismatch", cas("k", []byte("nope"), false, "v2", false), false, true, []byte("v1"), []byte("v1")},
		{"expected match", cas("k", []byte("v1"), false, "v2", false), true, true, []byte("v1"), []byte("v2")},
		{"delete, mismatch", cas("k", []byte("v1"), false, "", true), false, true, []byte("v2"), []byte("v2")},
		{"delete, match", cas("k", []byte("v2"), false, "", true), true, true, []byte("v2"), nil},
		{"delete, expect absent", cas("k", nil, true, "", true), true, false, nil, nil},
	}
	for i, s := range steps {
		r := f.one(f.kv(0, 0, int64(i), s.op))
		if r.GetOk() != s.ok || r.GetExists() != s.exists || !bytes.Equal(r.GetValue(), s.current) {
			t.Fatalf("%s: got ok=%v exists=%v value=%q; want ok=%v exists=%v value=%q",
				s.name, r.GetOk(), r.GetExists(), r.GetValue(), s.ok, s.exists, s.current)
		}
		f.value("k", s.want)
	}
}

// TestUnknownCommand protects the state machine from commands of other
// shards' kinds: an InvalidArgument result and no write (but the
// applied-state record the replica writes after every batch).
func TestUnknownCommand(t *testing.T) {
	f := newFixture(t)
	res := f.apply(wholeRange, &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{Address: "x"}}})
	if codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("AddNode on a KV shard: %v, want InvalidArgument", res)
	}
	lo, hi := keys.ShardSpan(shard)
	if n := count(t, f.db, lo, hi); n != 1 {
		t.Fatalf("refused command wrote %d keys besides the applied state", n-1)
	}
	var as storepb.AppliedState
	if found, err := storage.GetProto(f.db, keys.Applied(shard), &as); err != nil || !found || as.GetClock() != nil {
		t.Fatalf("applied state %v (found %v, %v), want one without a clock: nothing stamped was applied", &as, found, err)
	}
}

func count(t *testing.T, r pebble.Reader, lo, hi []byte) int {
	t.Helper()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// keyIn returns a key whose hash is inside (in=true) or outside desc's range.
func keyIn(t *testing.T, desc *concordpb.ShardDescriptor, in bool, tag string) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprintf("%s-%d", tag, i)
		h := routing.Hash([]byte(k))
		if (h >= desc.GetStartHash() && h <= desc.GetEndHash()) == in {
			return k
		}
	}
	t.Fatalf("no key found")
	return ""
}

// lowerHalf owns the lower half of the hash space.
var lowerHalf = &concordpb.ShardDescriptor{ShardId: shard, StartHash: 0, EndHash: math.MaxUint64 / 2}

// TestBatchOutsideRangeAppliesNothing protects batch atomicity: one key
// outside the shard's hash range refuses the whole batch, valid ops included.
func TestBatchOutsideRangeAppliesNothing(t *testing.T) {
	f := newFixture(t)
	in1, in2 := keyIn(t, lowerHalf, true, "a"), keyIn(t, lowerHalf, true, "b")
	out := keyIn(t, lowerHalf, false, "c")
	f.apply(lowerHalf, kvCmd(0, 0, 1, put(in2, "old")))
	res := f.apply(lowerHalf, kvCmd(0, 0, 2, put(in1, "v"), del(in2), put(out, "v")))
	if codes.Code(res.GetErrorCode()) != codes.InvalidArgument || len(res.GetResults()) != 0 {
		t.Fatalf("batch with a foreign key: %v, want InvalidArgument and no results", res)
	}
	f.value(in1, nil)
	f.value(in2, []byte("old"))
	f.value(out, nil)
}

// TestBatchSeesItsOwnWrites protects in-batch ordering: later ops of a batch
// see the effects of earlier ones, and every op gets its result in order.
func TestBatchSeesItsOwnWrites(t *testing.T) {
	f := newFixture(t)
	res := f.kv(0, 0, 1, putPrev("a", "1"), getOp("a"), putPrev("a", "2"), del("a"), getOp("a"))
	want := []struct {
		ok    bool
		value string
	}{{false, ""}, {true, "1"}, {true, "1"}, {true, ""}, {false, ""}}
	if res.GetErrorCode() != 0 || len(res.GetResults()) != len(want) {
		t.Fatalf("batch result %v", res)
	}
	for i, w := range want {
		if r := res.GetResults()[i]; r.GetOk() != w.ok || string(r.GetValue()) != w.value {
			t.Fatalf("op %d: %v, want ok=%v value=%q", i, r, w.ok, w.value)
		}
	}
	f.value("a", nil)
}

// TestRangeCheckHashesByTheShardsScheme: the state machine's shard range
// check hashes a key as the shard's descriptor says (key_hash), as the
// nodes route it: under hash tags a key whose tag falls in the range is
// the shard's whatever the rest of the key, and one whose tag falls
// outside is refused; under whole-key hashing the braces mean nothing.
func TestRangeCheckHashesByTheShardsScheme(t *testing.T) {
	tagged := &concordpb.ShardDescriptor{ShardId: shard, StartHash: 0, EndHash: lowerHalf.GetEndHash(), KeyHash: routing.KeyHashTags}
	in, out := keyIn(t, lowerHalf, true, "t"), keyIn(t, lowerHalf, false, "t")
	// Keys whose tag is in the range but whose whole-key hash is not, and
	// the reverse.
	var tagIn, tagOut string
	for i := 0; tagIn == "" || tagOut == ""; i++ {
		k := fmt.Sprintf("x%d{%s}", i, in)
		if h := routing.Hash([]byte(k)); h > lowerHalf.GetEndHash() && tagIn == "" {
			tagIn = k
		}
		k = fmt.Sprintf("x%d{%s}", i, out)
		if h := routing.Hash([]byte(k)); h <= lowerHalf.GetEndHash() && tagOut == "" {
			tagOut = k
		}
	}
	f := newFixture(t)
	if res := f.apply(tagged, kvCmd(0, 0, 1, put(tagIn, "v"))); res.GetErrorCode() != 0 {
		t.Fatalf("put of %q, its tag in the shard's range: %v", tagIn, res)
	}
	f.value(tagIn, []byte("v"))
	if res := f.apply(tagged, kvCmd(0, 0, 2, put(tagOut, "v"))); codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("put of %q, its tag outside the shard's range: %v, want InvalidArgument", tagOut, res)
	}
	if res := f.apply(lowerHalf, kvCmd(0, 0, 3, put(tagIn, "w"))); codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("whole-key scheme, put of %q (its whole-key hash outside): %v, want InvalidArgument", tagIn, res)
	}
	if res := f.apply(lowerHalf, kvCmd(0, 0, 4, put(tagOut, "w"))); res.GetErrorCode() != 0 {
		t.Fatalf("whole-key scheme, put of %q (its whole-key hash inside): %v", tagOut, res)
	}
}

// TestUnknownKeyHashSchemeIsNotGuessed: a replica whose descriptor names a
// key_hash scheme this version does not know must not apply ops by
// guessing whole-key hashing (routing.HashFor's fallback): the versions
// that know the scheme accept and refuse other keys, so the replicas of
// one raft group would diverge, the way a pre-tags binary's replica does
// in a tags cluster. The apply must fail (stopping the replica), not
// return a result.
func TestUnknownKeyHashSchemeIsNotGuessed(t *testing.T) {
	future := &concordpb.ShardDescriptor{ShardId: shard, StartHash: 0, EndHash: lowerHalf.GetEndHash(), KeyHash: 2}
	k := keyIn(t, lowerHalf, true, "u{tag}")
	f := newFixture(t)
	b := f.db.NewIndexedBatch()
	defer b.Close()
	res, err := f.sm.Apply(b, future, kvCmd(0, 0, 1, put(k, "v")))
	if err == nil {
		t.Fatalf("apply under key_hash 2 (unknown to this version) of %q: result %v, no error; want the apply refused", k, res)
	}
}
