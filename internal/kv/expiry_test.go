package kv

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

func keyOf(k string) []byte { return keys.User(shard, []byte(k)) }

// indexEntries counts the shard's expiry index entries, and checks each
// names a stored key with exactly that expiry.
func (f *fixture) indexEntries() int {
	f.t.Helper()
	lo, hi := keys.ExpiredSpan(shard, 1<<62)
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		f.t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		atMs, key := keys.ExpiryEntry(shard, it.Key())
		rec, stored, err := readRecord(f.db, keys.User(shard, key))
		if err != nil || !stored || rec.expireAt != atMs {
			f.t.Fatalf("index entry %q at %d: stored %v %v, %v", key, atMs, stored, rec, err)
		}
		n++
	}
	return n
}

// TestReadsAtNow protects reads outside apply: Get and Scan treat a key as
// absent from the moment its expiry is reached on the reader's clock, and a
// Scan still returns limit live keys past expired ones.
func TestReadsAtNow(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), put("a", "v-a"), putTTL("b", "v-b", time.Second), putTTL("c", "v-c", time.Second),
		putTTL("d", "v-d", time.Second), putTTL("e", "v-e", time.Hour), put("f", "v-f"))
	exp := t0 + 1000
	if v, at, found, _ := Get(f.db, shard, []byte("b"), exp-1); !found || string(v) != "v-b" || at != exp {
		t.Fatalf("Get just before expiry = %q, %d, %v", v, at, found)
	}
	if _, _, found, _ := Get(f.db, shard, []byte("b"), exp); found {
		t.Fatal("Get at the expiry instant found the key")
	}
	scan := func(now int64, start string, limit int) []string {
		kvs, err := Scan(f.db, shard, []byte(start), nil, limit, now)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range kvs {
			if string(kv.GetValue()) != "v-"+string(kv.GetKey()) {
				t.Fatalf("Scan pairs %q with %q", kv.GetKey(), kv.GetValue())
			}
			out = append(out, string(kv.GetKey()))
		}
		return out
	}
	for _, tc := range []struct {
		now   int64
		start string
		limit int
		want  []string
	}{
		{exp - 1, "", 2, []string{"a", "b"}},
		{exp, "", 2, []string{"a", "e"}},
		{exp, "b", 1, []string{"e"}},
		{exp, "", 10, []string{"a", "e", "f"}},
		{t0 + 3_600_000, "", 10, []string{"a", "f"}},
	} {
		if got := scan(tc.now, tc.start, tc.limit); !equal(got, tc.want) {
			t.Fatalf("Scan(%q, limit %d) at %d = %q, want %q", tc.start, tc.limit, tc.now, got, tc.want)
		}
	}
}

// TestExpiredFromIndex protects what the sweep reads: keys whose expiry is
// at or before now, earliest first, at most limit.
func TestExpiredFromIndex(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), putTTL("late", "v", 3*time.Second), putTTL("early", "v", time.Second),
		putTTL("mid", "v", 2*time.Second), put("never", "v"))
	for _, tc := range []struct {
		now   int64
		limit int
		want  []string
	}{
		{t0 + 999, 10, nil},
		{t0 + 1000, 10, []string{"early"}},
		{t0 + 5000, 10, []string{"early", "mid", "late"}},
		{t0 + 5000, 2, []string{"early", "mid"}},
	} {
		ks, err := Expired(f.db, shard, tc.now, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range ks {
			got = append(got, string(k))
		}
		if !equal(got, tc.want) {
			t.Fatalf("Expired(%d, %d) = %q, want %q", tc.now, tc.limit, got, tc.want)
		}
	}
}

// randomOp is one op of every kind over a few keys, with TTLs short enough
// to expire within the run.
func randomOp(rng *rand.Rand) *concordpb.Op {
	k := []byte(fmt.Sprintf("k%d", rng.Intn(6)))
	v := []byte(fmt.Sprintf("%d", rng.Intn(100)))
	ttl := int64(rng.Intn(3)) * 500
	switch rng.Intn(12) {
	case 0:
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v, TtlMs: ttl,
			Condition: concordpb.Condition(rng.Intn(3)), KeepTtl: ttl == 0 && rng.Intn(2) == 0}
	case 1:
		return &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: k}
	case 2:
		return &concordpb.Op{Type: concordpb.OpType_OP_CAS, Key: k, Expected: v, Value: v, ExpectAbsent: rng.Intn(2) == 0}
	case 3:
		return &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: k, IntDelta: int64(rng.Intn(10))}
	case 4:
		return &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: k, FloatDelta: float64(rng.Intn(10)) / 10}
	case 5:
		return &concordpb.Op{Type: concordpb.OpType_OP_APPEND, Key: k, Value: v}
	case 6:
		return &concordpb.Op{Type: concordpb.OpType_OP_SET_RANGE, Key: k, Value: v, Offset: int64(rng.Intn(4))}
	case 7:
		return &concordpb.Op{Type: concordpb.OpType_OP_GET_DELETE, Key: k}
	case 8:
		return &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: k, TtlMs: ttl + 1, Condition: concordpb.Condition(rng.Intn(5))}
	case 9:
		return &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: k, Persist: true}
	case 10:
		return &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: k}
	default:
		return &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: k}
	}
}

// contents is every key and value in db.
func contents(t *testing.T, db *pebble.DB) [][2][]byte {
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out [][2][]byte
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, [2][]byte{append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)})
	}
	return out
}

// TestDeterminism: two state machines applying the same commands (every op
// kind, expiries passing between them, stamps that jump back and forth)
// end with identical Pebble contents and give identical results.
func TestDeterminism(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	rng := rand.New(rand.NewSource(1))
	stamp := at(0)
	for i := range 2000 {
		stamp += int64(rng.Intn(400)-100) * int64(time.Millisecond)
		ops := []*concordpb.Op{randomOp(rng)}
		for rng.Intn(3) == 0 {
			ops = append(ops, randomOp(rng))
		}
		cmd := &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
			SessionId: uint64(rng.Intn(3)), Seq: uint64(i + 1), Ops: ops, MaxValueBytes: 16}}}
		ra, rb := a.apply(wholeRange, cmd), b.apply(wholeRange, cmd)
		if fmt.Sprint(ra) != fmt.Sprint(rb) {
			t.Fatalf("command %d: results differ: %v vs %v", i, ra, rb)
		}
	}
	ca, cb := contents(t, a.db), contents(t, b.db)
	if len(ca) != len(cb) {
		t.Fatalf("%d keys vs %d", len(ca), len(cb))
	}
	for i := range ca {
		if !bytes.Equal(ca[i][0], cb[i][0]) || !bytes.Equal(ca[i][1], cb[i][1]) {
			t.Fatalf("entry %d differs: %q=%q vs %q=%q", i, ca[i][0], ca[i][1], cb[i][0], cb[i][1])
		}
	}
	a.indexEntries() // and the index matches the values
	if n := a.indexEntries(); n == 0 {
		t.Log("no key with an expiry at the end")
	}
}
