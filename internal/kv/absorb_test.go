package kv

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestAbsorbRules protects the exact rule of which writes a command may
// drop: a blind PUT without ttl_ms, later overwritten by a blind PUT of the
// same key with nothing in between touching the key, in a command without
// CHECK. Each case lists the ops and the indexes that must be dropped.
func TestAbsorbRules(t *testing.T) {
	pAt := func(k, v string, at int64) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), ExpireAtUnixMs: at}
	}
	pTTL := func(k, v string, ttl int64) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), TtlMs: ttl}
	}
	nx := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("a"), Value: []byte("n"), Condition: concordpb.Condition_CONDITION_NX}
	keep := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("a"), Value: []byte("k"), KeepTtl: true}
	incr := &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("a"), IntDelta: 1}
	expire := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: []byte("a"), TtlMs: 10}
	sweep := &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: []byte("a"), ExpireAtUnixMs: 5}
	check := &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: []byte("c"), ExpectAbsent: true}
	malformed := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("a"), Value: []byte("m"), Persist: true}
	for name, c := range map[string]struct {
		ops  []*concordpb.Op
		drop []int
	}{
		"one":                      {[]*concordpb.Op{put("a", "1")}, nil},
		"same key, three puts":     {[]*concordpb.Op{put("a", "1"), put("a", "2"), put("a", "3")}, []int{0, 1}},
		"other keys between":       {[]*concordpb.Op{put("a", "1"), put("b", "1"), del("c"), put("a", "2"), put("b", "2")}, []int{0, 1}},
		"distinct keys":            {[]*concordpb.Op{put("a", "1"), put("b", "1"), put("c", "1")}, nil},
		"get between":              {[]*concordpb.Op{put("a", "1"), getOp("a"), put("a", "2")}, nil},
		"delete between":           {[]*concordpb.Op{put("a", "1"), del("a"), put("a", "2")}, nil},
		"delete before":            {[]*concordpb.Op{del("a"), put("a", "1"), put("a", "2")}, []int{1}},
		"delete after":             {[]*concordpb.Op{put("a", "1"), put("a", "2"), del("a")}, []int{0}},
		"delete not dropped":       {[]*concordpb.Op{del("a"), put("a", "2")}, nil},
		"return_prev not dropped":  {[]*concordpb.Op{putPrev("a", "1"), put("a", "2")}, nil},
		"return_prev between":      {[]*concordpb.Op{put("a", "1"), putPrev("a", "2"), put("a", "3")}, nil},
		"NX between":               {[]*concordpb.Op{put("a", "1"), nx, put("a", "3")}, nil},
		"NX does not cover":        {[]*concordpb.Op{put("a", "1"), nx}, nil},
		"keep_ttl does not cover":  {[]*concordpb.Op{put("a", "1"), keep}, nil},
		"incr between":             {[]*concordpb.Op{put("a", "1"), incr, put("a", "3")}, nil},
		"expire between":           {[]*concordpb.Op{put("a", "1"), expire, put("a", "3")}, nil},
		"sweep between":            {[]*concordpb.Op{put("a", "1"), sweep, put("a", "3")}, nil},
		"ttl put kept":             {[]*concordpb.Op{pTTL("a", "1", 1000), put("a", "2")}, nil},
		"ttl put covers":           {[]*concordpb.Op{put("a", "1"), pTTL("a", "2", 1000)}, []int{0}},
		"expire_at put dropped":    {[]*concordpb.Op{pAt("a", "1", 5), put("a", "2")}, []int{0}},
		"expire_at put covers":     {[]*concordpb.Op{put("a", "1"), pAt("a", "2", 5)}, []int{0}},
		"malformed put kept":       {[]*concordpb.Op{malformed, put("a", "2")}, nil},
		"chain over a kept ttl":    {[]*concordpb.Op{put("a", "1"), pTTL("a", "2", 1000), put("a", "3")}, []int{0}},
		"any CHECK: nothing":       {[]*concordpb.Op{put("a", "1"), put("a", "2"), check}, nil},
		"runs of keys":             {[]*concordpb.Op{put("a", "1"), put("a", "2"), put("b", "1"), put("b", "2"), put("a", "3")}, []int{0, 1, 2}},
		"a run read inside":        {[]*concordpb.Op{put("a", "1"), put("a", "2"), getOp("a"), put("a", "3")}, []int{0}},
		"a run after other keys":   {[]*concordpb.Op{put("b", "1"), put("a", "1"), put("a", "2"), put("b", "2")}, []int{0, 1}},
		"binary keys are compared": {[]*concordpb.Op{put("a\x00", "1"), put("a", "2"), put("a\x00", "3")}, []int{0}},
	} {
		kept, dropped := Absorb(c.ops)
		var got []int
		for i, d := range dropped {
			if d {
				got = append(got, i)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.drop) {
			t.Errorf("%s: dropped %v, want %v", name, got, c.drop)
		}
		if len(kept) != len(c.ops)-len(got) {
			t.Errorf("%s: kept %d of %d ops, dropped %d", name, len(kept), len(c.ops), len(got))
		}
		if dropped == nil && len(kept) > 0 && &kept[0] != &c.ops[0] {
			t.Errorf("%s: nothing dropped, but the ops were copied", name)
		}
	}
}

// TestAbsorbOneKeyAllocations: the ops of one key (a hot key's merged
// SETs) are absorbed without a map: the kept ops and the dropped flags are
// all it allocates.
func TestAbsorbOneKeyAllocations(t *testing.T) {
	ops := make([]*concordpb.Op, 256)
	for i := range ops {
		ops[i] = put("key:__rand_int__", "v")
	}
	var kept []*concordpb.Op
	if n := testing.AllocsPerRun(50, func() { kept, _ = Absorb(ops) }); n > 2 {
		t.Errorf("%.0f allocations to absorb 256 PUTs of one key, want at most 2", n)
	}
	if len(kept) != 1 || kept[0] != ops[255] {
		t.Errorf("kept %d ops, want the last alone", len(kept))
	}
}

// TestExpandRefusesWrongCounts: results that do not match the kept ops
// are not spread over the dropped ones.
func TestExpandRefusesWrongCounts(t *testing.T) {
	_, dropped := Absorb([]*concordpb.Op{put("a", "1"), put("a", "2"), put("b", "1")})
	one := &concordpb.OpResult{Ok: true}
	if Expand([]*concordpb.OpResult{one}, dropped) != nil || Expand([]*concordpb.OpResult{one, one, one}, dropped) != nil {
		t.Fatal("Expand accepted the wrong number of results")
	}
	if got := Expand([]*concordpb.OpResult{one, one}, dropped); len(got) != 3 || got[0] == one || got[1] != one || got[2] != one {
		t.Fatalf("Expand: %v", got)
	}
}

// absorbOp is an op for TestAbsorbedMatchesApplied: mostly blind PUTs of
// three keys (plain, with a TTL, with an absolute expiry in the past or
// future, now and then one with a TTL no clock can place), and every other
// kind of op (randomOp) among them.
func absorbOp(rng *rand.Rand) *concordpb.Op {
	k := []byte(fmt.Sprintf("k%d", rng.Intn(3)))
	v := []byte(fmt.Sprintf("%d", rng.Intn(100)))
	switch rng.Intn(12) {
	case 0, 1, 2, 3, 4:
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v}
	case 5:
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v, ExpireAtUnixMs: t0 + int64(rng.Intn(6000))}
	case 6:
		ttl := int64(rng.Intn(3)+1) * 500
		if rng.Intn(20) == 0 {
			ttl = math.MaxInt64 // refuses the command at apply
		}
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v, TtlMs: ttl}
	case 7:
		if rng.Intn(10) == 0 {
			return &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: k, ExpectAbsent: rng.Intn(2) == 0}
		}
	}
	op := randomOp(rng)
	op.Key = k
	return op
}

// TestAbsorbedMatchesApplied is the safety test of absorption: random
// commands (many ops over three keys: blind PUTs with and without expiry,
// conditional PUTs, deletes, CAS, INCR, APPEND, EXPIRE, sweeps, reads,
// CHECKs with skips, sessions and retries) applied to one state machine as
// they are, and to another absorbed as the leader absorbs them (commands
// without a session; refused whole, proposed again unabsorbed), give every
// op the same result, and leave the same state: byte for byte outside the
// expiry index, and an index that differs only by entries stale in the
// unabsorbed one. After a sweep of everything the two are identical.
func TestAbsorbedMatchesApplied(t *testing.T) {
	plain, absorbed := newFixture(t), newFixture(t)
	rng := rand.New(rand.NewSource(12))
	stamp := at(0)
	drops, refusals := 0, 0
	seqs := map[uint64]uint64{}
	for i := range 2000 {
		stamp += int64(rng.Intn(300)) * int64(time.Millisecond)
		ops := make([]*concordpb.Op, 1+rng.Intn(12))
		for j := range ops {
			ops[j] = absorbOp(rng)
		}
		for j, op := range ops {
			if op.GetType() == concordpb.OpType_OP_CHECK {
				op.Skip = uint32(rng.Intn(len(ops) - j))
			}
		}
		session := uint64(0)
		if rng.Intn(4) == 0 {
			session = uint64(1 + rng.Intn(2))
			if rng.Intn(3) != 0 { // else a retry of the last seq
				seqs[session]++
			}
		}
		mk := func(ops []*concordpb.Op) *storepb.Command {
			return &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
				SessionId: session, Seq: seqs[session], Ops: ops, MaxValueBytes: 64}}}
		}
		want := plain.apply(wholeRange, mk(ops))
		var got *storepb.CommandResult
		kept, dropped := ops, []bool(nil)
		if session == 0 {
			kept, dropped = Absorb(ops)
		}
		got = absorbed.apply(wholeRange, mk(kept))
		if dropped != nil && got.GetErrorCode() != 0 {
			refusals++ // the leader proposes it again, unabsorbed
			got = absorbed.apply(wholeRange, mk(ops))
		} else if dropped != nil {
			for _, d := range dropped {
				if d {
					drops++
				}
			}
			got.Results = Expand(got.GetResults(), dropped)
		}
		if !proto.Equal(want, got) {
			t.Fatalf("command %d %v:\nresults %v\nabsorbed (dropped %v) %v", i, ops, want, dropped, got)
		}
		sameState(t, plain, absorbed, fmt.Sprintf("after command %d", i))
	}
	if drops < 1000 || refusals == 0 {
		t.Fatalf("%d ops dropped, %d absorbed commands refused: the test no longer exercises absorption", drops, refusals)
	}
	t.Logf("%d ops dropped, %d absorbed commands refused and applied unabsorbed", drops, refusals)
	// A sweep of every index entry once every expiry has passed.
	later := stamp + int64(time.Hour)
	for _, f := range []*fixture{plain, absorbed} {
		xs, err := Expired(f.db, shard, later/int64(time.Millisecond), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var ops []*concordpb.Op
		for _, x := range xs {
			ops = append(ops, &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: x.Key, ExpireAtUnixMs: x.AtMs})
		}
		f.apply(wholeRange, &storepb.Command{UnixNanos: later, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops}}})
	}
	ca, cb := contents(t, plain.db), contents(t, absorbed.db)
	if fmt.Sprint(ca) != fmt.Sprint(cb) {
		t.Fatalf("after the final sweep the databases differ:\n%q\n%q", ca, cb)
	}
}

// sameState fails unless a (applied as is) and b (absorbed) hold the same
// keys and values, except expiry index entries that b lacks and that are
// stale in a.
func sameState(t *testing.T, a, b *fixture, when string) {
	t.Helper()
	ca, cb := contents(t, a.db), contents(t, b.db)
	lo, hi := keys.ExpiredSpan(shard, 1<<62)
	j := 0
	for _, e := range ca {
		if j < len(cb) && bytes.Equal(e[0], cb[j][0]) {
			if !bytes.Equal(e[1], cb[j][1]) {
				t.Fatalf("%s: %q is %q applied, %q absorbed", when, e[0], e[1], cb[j][1])
			}
			j++
			continue
		}
		if bytes.Compare(e[0], lo) < 0 || bytes.Compare(e[0], hi) >= 0 {
			t.Fatalf("%s: %q=%q only where applied as is", when, e[0], e[1])
		}
		atMs, key := keys.ExpiryEntry(shard, e[0])
		rec, stored, err := readRecord(a.db, keys.User(shard, key))
		if err != nil || (stored && rec.expireAt == atMs) {
			t.Fatalf("%s: the index entry of %q at %d, live where applied as is, is missing absorbed (%v)", when, key, atMs, err)
		}
	}
	if j != len(cb) {
		t.Fatalf("%s: %q=%q only where absorbed", when, cb[j][0], cb[j][1])
	}
}
