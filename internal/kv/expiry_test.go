package kv

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

func keyOf(k string) []byte { return keys.User(shard, []byte(k)) }

// indexEntries counts the shard's expiry index entries that name a stored
// key with exactly that expiry, after checking that every stored key with
// an expiry has its entry. Entries left stale by blind PUTs (the key absent,
// or with another expiry) are allowed: staleEntries counts them.
func (f *fixture) indexEntries() int {
	exact, _ := f.index()
	return exact
}

func (f *fixture) staleEntries() int {
	_, stale := f.index()
	return stale
}

func (f *fixture) index() (exact, stale int) {
	f.t.Helper()
	lo, hi := keys.ExpiredSpan(shard, 1<<62)
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		f.t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		atMs, key := keys.ExpiryEntry(shard, it.Key())
		rec, stored, err := readRecord(f.db, keys.User(shard, key))
		switch {
		case err != nil:
			f.t.Fatalf("index entry %q at %d: %v", key, atMs, err)
		case stored && rec.expireAt == atMs:
			exact++
		default:
			stale++
		}
	}
	ulo, uhi := keys.UserSpan(shard, nil, nil)
	ut, err := f.db.NewIter(&pebble.IterOptions{LowerBound: ulo, UpperBound: uhi})
	if err != nil {
		f.t.Fatal(err)
	}
	defer ut.Close()
	for ok := ut.First(); ok; ok = ut.Next() {
		_, at, _, err := decodeValue(ut.Value())
		if err != nil {
			f.t.Fatal(err)
		}
		key := keys.UserKey(shard, ut.Key())
		if _, found, _ := get(f.db, keys.Expiry(shard, at, key)); at != 0 && !found {
			f.t.Fatalf("key %q expires at %d but has no index entry", key, at)
		}
	}
	return exact, stale
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
		kvs, _, err := Scan(f.db, shard, []byte(start), nil, Page{Limit: limit}, now)
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
		if got := scan(tc.now, tc.start, tc.limit); !slices.Equal(got, tc.want) {
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
			if rec, _, _ := readRecord(f.db, keyOf(string(k.Key))); rec.expireAt != k.AtMs {
				t.Fatalf("Expired gives %q at %d, its expiry is %d", k.Key, k.AtMs, rec.expireAt)
			}
			got = append(got, string(k.Key))
		}
		if !slices.Equal(got, tc.want) {
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
	switch rng.Intn(13) {
	case 0:
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v, TtlMs: ttl,
			Condition: concordpb.Condition(rng.Intn(3)), KeepTtl: ttl == 0 && rng.Intn(2) == 0, ReturnPrev: rng.Intn(2) == 0}
	case 11:
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v, TtlMs: ttl} // blind
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
		// The sweep's op names an index entry's time; here any time, as a
		// sweep that read an entry since replaced might.
		return &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: k, ExpireAtUnixMs: t0 + int64(rng.Intn(4000))}
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
	var pending []*storepb.Command
	var want []string
	for i := range 2000 {
		stamp += int64(rng.Intn(400)-100) * int64(time.Millisecond)
		ops := []*concordpb.Op{randomOp(rng)}
		for rng.Intn(3) == 0 {
			ops = append(ops, randomOp(rng))
		}
		// Versioned commands and reconciled tentative writes (available
		// mode) too, with versions around the stamp.
		versioned := rng.Intn(2) == 0
		if rng.Intn(5) == 0 {
			k := fmt.Sprintf("k%d", rng.Intn(6))
			tv := uint64(stamp + int64(rng.Intn(4000)-2000)*int64(time.Millisecond))
			op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte("t"), TentativeVersion: tv}
			if rng.Intn(3) == 0 {
				op = &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: []byte(k), TentativeVersion: tv}
			}
			ops = append(ops, op)
		}
		cmd := &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
			SessionId: uint64(rng.Intn(3)), Seq: uint64(i + 1), Ops: ops, MaxValueBytes: 16, Versioned: versioned}}}
		// a applies one command per batch; b applies them in batches of
		// up to 5 (as a loop turn does) and restarts between some, so
		// state that lives in caches and deferred records until Flush
		// must come out as a's.
		ra := a.apply(wholeRange, cmd)
		pending = append(pending, cmd)
		want = append(want, fmt.Sprint(ra))
		if rng.Intn(5) == 0 || i == 1999 {
			for j, rb := range b.applyBatch(wholeRange, pending...) {
				if got := fmt.Sprint(rb); got != want[j] {
					t.Fatalf("command %d of a batch ending at %d: results differ: %v vs %v", j, i, want[j], got)
				}
			}
			pending, want = pending[:0], want[:0]
			if rng.Intn(4) == 0 {
				b.sm = New(shard) // a restart
			}
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
	if n := a.indexEntries(); n == 0 { // and every key's expiry is indexed
		t.Log("no key with an expiry at the end")
	}
	// A sweep once every TTL has passed leaves no index entry, stale or not.
	later := stamp + int64(time.Minute)
	xs, err := Expired(a.db, shard, later/int64(time.Millisecond), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d index entries (%d stale) before the final sweep", len(xs), a.staleEntries())
	var ops []*concordpb.Op
	for _, x := range xs {
		ops = append(ops, &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: x.Key, ExpireAtUnixMs: x.AtMs})
	}
	a.apply(wholeRange, &storepb.Command{UnixNanos: later, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops}}})
	if exact, stale := a.index(); exact+stale != 0 {
		t.Fatalf("after the final sweep: %d index entries, %d of them stale", exact+stale, stale)
	}
}

// TestSweepRemovesStaleIndexEntries protects the expiry index from blind
// PUTs, which replace a key without reading the expiry it had and so leave
// that expiry's index entry behind: the sweep's DELETE_EXPIRED, carrying the
// entry's time, removes such an entry when its time comes, and keeps the
// key; the key's own entry stays until the key expires.
func TestSweepRemovesStaleIndexEntries(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), putTTL("plain", "old", time.Second), putTTL("later", "old", time.Second))
	f.kv(0, 0, at(0), put("plain", "new"), putTTL("later", "new", 3*time.Second))
	if exact, stale := f.index(); exact != 1 || stale != 2 {
		t.Fatalf("after the blind puts: %d exact, %d stale index entries; want 1 (later's), 2", exact, stale)
	}
	sweep := func(d time.Duration) []bool {
		xs, err := Expired(f.db, shard, t0+d.Milliseconds(), 100)
		if err != nil {
			t.Fatal(err)
		}
		var ops []*concordpb.Op
		for _, x := range xs {
			ops = append(ops, &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: x.Key, ExpireAtUnixMs: x.AtMs})
		}
		var deleted []bool
		for _, r := range f.kv(0, 0, at(d), ops...).GetResults() {
			deleted = append(deleted, r.GetOk())
		}
		return deleted
	}
	if got := sweep(2 * time.Second); len(got) != 2 || got[0] || got[1] {
		t.Fatalf("sweep at 2s deleted %v, want two stale entries and no key", got)
	}
	f.state(2*time.Second, "plain", []byte("new"), 0)
	f.state(2*time.Second, "later", []byte("new"), t0+3_000)
	if exact, stale := f.index(); exact != 1 || stale != 0 {
		t.Fatalf("after the sweep at 2s: %d exact, %d stale index entries; want 1, 0", exact, stale)
	}
	if got := sweep(4 * time.Second); len(got) != 1 || !got[0] {
		t.Fatalf("sweep at 4s deleted %v, want later", got)
	}
	if exact, stale := f.index(); exact+stale != 0 {
		t.Fatalf("%d index entries left", exact+stale)
	}
}
