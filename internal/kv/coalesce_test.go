package kv

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// incrs is n plain INCRs of k by d, each a new op.
func incrs(k string, d int64, n int) []*concordpb.Op {
	ops := make([]*concordpb.Op, n)
	for i := range ops {
		ops[i] = incrOp(k, d)
	}
	return ops
}

// cloneOps is a deep copy of ops, to check later that nothing changed them.
func cloneOps(ops []*concordpb.Op) []*concordpb.Op {
	out := make([]*concordpb.Op, len(ops))
	for i, op := range ops {
		out[i] = proto.Clone(op).(*concordpb.Op)
	}
	return out
}

// sameOps fails t unless ops are what before holds (cloneOps).
func sameOps(t *testing.T, what string, ops, before []*concordpb.Op) {
	t.Helper()
	for i := range before {
		if !proto.Equal(ops[i], before[i]) {
			t.Fatalf("%s: op %d changed: %v, was %v", what, i, ops[i], before[i])
		}
	}
}

// sameResults fails t unless got and want are equal, result by result.
func sameResults(t *testing.T, what string, got, want []*concordpb.OpResult) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d: %v", what, len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: result %d is %v, alone it is %v", what, i, got[i], want[i])
		}
	}
}

// TestIncrRunMatchesIncrs is the exactness test of INCR runs: R INCRs of a
// key applied one by one, and applied as the one repeated INCR Coalesce
// makes of them with the results expanded (ExpandRuns), give every INCR
// the same result and leave the same database, byte for byte (value,
// expiry, expiry index entries), from every kind of starting state.
func TestIncrRunMatchesIncrs(t *testing.T) {
	const maxS, minS = "9223372036854775807", "-9223372036854775808"
	for _, c := range []struct {
		name  string
		setup *concordpb.Op // nil: the key is absent
		delta int64
		n     int
		k     int // how many apply
	}{
		{"absent", nil, 1, 5, 5},
		{"integer", put("c", "10"), 3, 4, 4},
		{"with TTL", putTTL("c", "7", 10*time.Second), 2, 6, 6},
		{"expired", putTTL("c", "7", time.Second), 2, 6, 6},
		{"not an integer", put("c", "abc"), 1, 5, 0},
		{"not canonical", put("c", "007"), 1, 3, 0},
		{"expired, not an integer", putTTL("c", "abc", time.Second), 1, 3, 3},
		{"overflow partway", put("c", strconv.FormatInt(math.MaxInt64-10, 10)), 3, 6, 3},
		{"overflow partway, with TTL", putTTL("c", strconv.FormatInt(math.MaxInt64-10, 10), 10*time.Second), 5, 4, 2},
		{"overflow at the first", put("c", maxS), 1, 4, 0},
		{"overflow at the last", put("c", strconv.FormatInt(math.MaxInt64-3, 10)), 1, 4, 3},
		{"negative delta", put("c", "5"), -4, 7, 7},
		{"negative overflow partway", put("c", strconv.FormatInt(math.MinInt64+9, 10)), -4, 5, 2},
		{"delta 0", put("c", "42"), 0, 5, 5},
		{"delta 0 at MaxInt64", put("c", maxS), 0, 3, 3},
		{"delta 0, not an integer", put("c", "x"), 0, 3, 0},
		{"MinInt64 from absent", nil, math.MinInt64, 3, 1},
		{"MinInt64 from -1", put("c", "-1"), math.MinInt64, 3, 0},
		{"MinInt64 from MaxInt64", put("c", maxS), math.MinInt64, 3, 1},
		{"MaxInt64 from absent", nil, math.MaxInt64, 3, 1},
		{"MaxInt64 from MinInt64", put("c", minS), math.MaxInt64, 4, 2},
		{"MaxInt64 from MaxInt64", put("c", maxS), math.MaxInt64, 2, 0},
		{"a long run", put("c", "1"), 1, MaxRepeat, MaxRepeat},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain, run := newFixture(t), newFixture(t)
			if c.setup != nil {
				plain.kv(0, 0, at(0), c.setup)
				run.kv(0, 0, at(0), c.setup)
			}
			ops := incrs("c", c.delta, c.n)
			before := cloneOps(ops)
			want := plain.kv(0, 0, at(2*time.Second), ops...)
			kept, runs := Coalesce(ops)
			if len(kept) != 1 || kept[0].GetRepeat() != uint32(c.n) || fmt.Sprint(runs) != fmt.Sprint([]uint32{uint32(c.n)}) {
				t.Fatalf("Coalesce of %d INCRs: %v, runs %v", c.n, kept, runs)
			}
			got := run.kv(0, 0, at(2*time.Second), kept...)
			if got.GetErrorCode() != 0 || len(got.GetResults()) != 1 {
				t.Fatalf("the repeated INCR: %v", got)
			}
			if r := got.GetResults()[0]; int(r.GetRepeatApplied()) != c.k || (c.k < c.n) != (r.GetError() != 0) {
				t.Fatalf("the repeated INCR's result %v: want %d of %d applied", r, c.k, c.n)
			}
			sameResults(t, c.name, ExpandRuns(kept, got.GetResults(), runs), want.GetResults())
			if ca, cb := contents(t, plain.db), contents(t, run.db); fmt.Sprint(ca) != fmt.Sprint(cb) {
				t.Fatalf("the databases differ:\nINCRs %q\nrun   %q", ca, cb)
			}
			sameOps(t, c.name, ops, before)
		})
	}
}

// TestIncrRepeatResult pins what a repeated INCR's own result says: the
// final value, and how many applied; OVERFLOW when some did not; a single
// INCR's result (repeat 0 or 1) unchanged.
func TestIncrRepeatResult(t *testing.T) {
	f := newFixture(t)
	rep := func(k string, d int64, n uint32) *concordpb.Op {
		op := incrOp(k, d)
		op.Repeat = n
		return op
	}
	for _, c := range []struct {
		op   *concordpb.Op
		want *concordpb.OpResult
	}{
		{rep("a", 2, 5), &concordpb.OpResult{Ok: true, IntValue: 10, Value: []byte("10"), RepeatApplied: 5}},
		{rep("a", 1, 1), &concordpb.OpResult{Ok: true, IntValue: 11, Value: []byte("11")}},
		{rep("a", 1, 0), &concordpb.OpResult{Ok: true, IntValue: 12, Value: []byte("12")}},
		{rep("a", (math.MaxInt64-12)/2, 3), &concordpb.OpResult{Ok: true, IntValue: math.MaxInt64 - 1,
			Value: []byte(strconv.FormatInt(math.MaxInt64-1, 10)), RepeatApplied: 2, Error: concordpb.OpError_OP_ERROR_OVERFLOW}},
		{rep("a", 2, 2), &concordpb.OpResult{Error: concordpb.OpError_OP_ERROR_OVERFLOW}},
		{rep("b", 0, 3), &concordpb.OpResult{Ok: true, IntValue: 0, Value: []byte("0"), RepeatApplied: 3}},
	} {
		if r := f.op(0, 0, c.op); !proto.Equal(r, c.want) {
			t.Fatalf("%v: %v, want %v", c.op, r, c.want)
		}
	}
}

// TestRepeatChecked: repeat is refused on any op but INCR, and above
// MaxRepeat, by CheckOp (the front door's check and the state machine's,
// which refuses the whole command: the same answer on every replica).
func TestRepeatChecked(t *testing.T) {
	f := newFixture(t)
	for _, op := range []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte("a"), Value: []byte("1"), Repeat: 2},
		{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("a"), FloatDelta: 1, Repeat: 1},
		{Type: concordpb.OpType_OP_INCR, Key: []byte("a"), IntDelta: 1, Repeat: MaxRepeat + 1},
	} {
		if CheckOp(op) == nil {
			t.Fatalf("CheckOp accepted %v", op)
		}
		if res := f.kv(0, 0, at(0), incrOp("b", 1), op); codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
			t.Fatalf("a command with %v: %v, want InvalidArgument", op, res)
		}
	}
	f.value("b", nil) // the commands applied nothing
	if op := (&concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("a"), IntDelta: 1, Repeat: MaxRepeat}); CheckOp(op) != nil {
		t.Fatalf("CheckOp refused %v: %v", op, CheckOp(op))
	}
}

// TestCoalesceRules protects which INCRs Coalesce joins: adjacent plain
// INCRs of one key by one delta, runs of at most MaxRepeat, nothing in a
// command with a CHECK. Each case lists the ops and the runs (nil: the
// ops are returned as they are). A joined run is a new op; every other
// kept op is the caller's own; the caller's ops never change.
func TestCoalesceRules(t *testing.T) {
	a1 := func() *concordpb.Op { return incrOp("a", 1) }
	with := func(f func(op *concordpb.Op)) *concordpb.Op { op := a1(); f(op); return op }
	unknown := a1()
	unknown.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x06, 0x01}) // field 111, varint 1
	check := &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: []byte("c"), ExpectAbsent: true}
	long := incrs("a", 1, MaxRepeat+5)
	for name, c := range map[string]struct {
		ops  []*concordpb.Op
		runs []uint32
	}{
		"one":                         {[]*concordpb.Op{a1()}, nil},
		"two":                         {[]*concordpb.Op{a1(), a1()}, []uint32{2}},
		"one op twice":                {[]*concordpb.Op{long[0], long[0], long[0]}, []uint32{3}},
		"adjacent only":               {[]*concordpb.Op{a1(), getOp("a"), a1()}, nil},
		"other key between":           {[]*concordpb.Op{a1(), incrOp("b", 1), a1()}, nil},
		"other delta":                 {[]*concordpb.Op{a1(), incrOp("a", 2)}, nil},
		"runs of deltas":              {[]*concordpb.Op{a1(), a1(), incrOp("a", 2), incrOp("a", 2), incrOp("a", 2)}, []uint32{2, 3}},
		"among other ops":             {[]*concordpb.Op{put("a", "1"), a1(), a1(), a1(), put("b", "1"), a1()}, []uint32{1, 3, 1, 1}},
		"runs of keys":                {[]*concordpb.Op{a1(), a1(), incrOp("b", 1), incrOp("b", 1)}, []uint32{2, 2}},
		"binary keys are compared":    {[]*concordpb.Op{incrOp("a\x00", 1), a1(), incrOp("a\x00", 1)}, nil},
		"any CHECK: nothing":          {[]*concordpb.Op{a1(), a1(), check}, nil},
		"repeat set: alone":           {[]*concordpb.Op{a1(), with(func(op *concordpb.Op) { op.Repeat = 1 }), a1()}, nil},
		"a value: alone":              {[]*concordpb.Op{a1(), with(func(op *concordpb.Op) { op.Value = []byte("v") }), a1()}, nil},
		"a TTL: alone":                {[]*concordpb.Op{a1(), with(func(op *concordpb.Op) { op.TtlMs = 5 }), a1()}, nil},
		"an unknown field: alone":     {[]*concordpb.Op{a1(), unknown, a1()}, nil},
		"not INCR":                    {[]*concordpb.Op{incrFloatOp("a", 1), incrFloatOp("a", 1), appendOp("a", "x"), appendOp("a", "x")}, nil},
		"a run longer than the limit": {long, []uint32{MaxRepeat, 5}},
	} {
		before := cloneOps(c.ops)
		kept, runs := Coalesce(c.ops)
		if fmt.Sprint(runs) != fmt.Sprint(c.runs) {
			t.Errorf("%s: runs %v, want %v", name, runs, c.runs)
			continue
		}
		sameOps(t, name, c.ops, before)
		if runs == nil {
			if len(kept) != len(c.ops) || (len(kept) > 0 && &kept[0] != &c.ops[0]) {
				t.Errorf("%s: nothing coalesced, but the ops were copied", name)
			}
			continue
		}
		i := 0
		for j, op := range kept {
			n := int(runs[j])
			switch {
			case n == 1 && op != c.ops[i]:
				t.Errorf("%s: kept op %d is not the caller's op %d", name, j, i)
			case n > 1 && (op == c.ops[i] || !proto.Equal(op, &concordpb.Op{Type: concordpb.OpType_OP_INCR,
				Key: c.ops[i].GetKey(), IntDelta: c.ops[i].GetIntDelta(), Repeat: uint32(n)})):
				t.Errorf("%s: kept op %d is %v for a run of %d of %v", name, j, op, n, c.ops[i])
			}
			i += n
		}
	}
}

// TestPlainIncrEveryField: an INCR with any field set but its type, key
// and delta is not joined into a run, so a field added to Op later is
// never lost by coalescing before plainIncr learns it.
func TestPlainIncrEveryField(t *testing.T) {
	fields := (&concordpb.Op{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch f.Name() {
		case "type", "key", "int_delta":
			continue
		}
		op := incrOp("a", 1)
		m := op.ProtoReflect()
		switch f.Kind() {
		case protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		case protoreflect.EnumKind:
			m.Set(f, protoreflect.ValueOfEnum(1))
		case protoreflect.BytesKind:
			m.Set(f, protoreflect.ValueOfBytes([]byte("x")))
		case protoreflect.Int64Kind:
			m.Set(f, protoreflect.ValueOfInt64(1))
		case protoreflect.Uint32Kind:
			m.Set(f, protoreflect.ValueOfUint32(1))
		case protoreflect.Uint64Kind:
			m.Set(f, protoreflect.ValueOfUint64(1))
		case protoreflect.DoubleKind:
			m.Set(f, protoreflect.ValueOfFloat64(1))
		default:
			t.Fatalf("field %s of kind %v: teach this test (and plainIncr) about it", f.Name(), f.Kind())
		}
		if plainIncr(op) {
			t.Errorf("an INCR with %s set counts as plain", f.Name())
		}
	}
	if !plainIncr(incrOp("a", -3)) {
		t.Fatal("a plain INCR is not plain")
	}
}

// TestExpandRunsRefusesWrongResults: results that do not fit the kept ops
// (a count off, or a repeated INCR's result that does not say how many of
// its INCRs applied, as a replica that ignored repeat would answer) are
// not spread over the run.
func TestExpandRunsRefusesWrongResults(t *testing.T) {
	kept, runs := Coalesce([]*concordpb.Op{put("b", "1"), incrOp("a", 1), incrOp("a", 1), incrOp("a", 1)})
	blank := &concordpb.OpResult{}
	for _, res := range [][]*concordpb.OpResult{
		{blank},
		{blank, {Ok: true, IntValue: 3, Value: []byte("3"), RepeatApplied: 3}, blank},
		{blank, {Ok: true, IntValue: 1, Value: []byte("1")}},
		{blank, {Ok: true, IntValue: 3, Value: []byte("3"), RepeatApplied: 4}},
		{blank, {Ok: true, IntValue: 3, Value: []byte("3"), RepeatApplied: 2}},
		{blank, {Ok: true, IntValue: 3, Value: []byte("3"), RepeatApplied: 3, Error: concordpb.OpError_OP_ERROR_OVERFLOW}},
	} {
		if got := ExpandRuns(kept, res, runs); got != nil {
			t.Fatalf("ExpandRuns(%v) = %v, want nil", res, got)
		}
	}
	res := []*concordpb.OpResult{blank, {Ok: true, IntValue: 3, Value: []byte("3"), RepeatApplied: 3}}
	got := ExpandRuns(kept, res, runs)
	if len(got) != 4 || got[0] != blank || got[1].GetIntValue() != 1 || string(got[3].GetValue()) != "3" {
		t.Fatalf("ExpandRuns: %v", got)
	}
}

// coalesceOp is an op for TestCoalescedMatchesApplied, over two keys:
// INCRs by a few deltas (some near the bounds, so runs overflow partway),
// INCRBYs, SETs (integers near the bounds, text, a TTL, now and then one
// no clock can place), GETs, DELs and APPENDs.
func coalesceOp(rng *rand.Rand) *concordpb.Op {
	k := fmt.Sprintf("k%d", rng.Intn(2))
	deltas := []int64{1, 1, 1, -1, 7, 0, math.MaxInt64 / 3, math.MinInt64 / 4, math.MaxInt64, math.MinInt64}
	values := []string{"0", "5", "-3", "x", strconv.FormatInt(math.MaxInt64-20, 10), strconv.FormatInt(math.MinInt64+20, 10)}
	switch rng.Intn(10) {
	case 0, 1, 2, 3:
		return incrOp(k, deltas[rng.Intn(len(deltas))])
	case 4:
		return incrOp(k, rng.Int63n(1000)-500)
	case 5:
		return put(k, values[rng.Intn(len(values))])
	case 6:
		ttl := time.Duration(rng.Intn(3)+1) * 500 * time.Millisecond
		op := putTTL(k, values[rng.Intn(len(values))], ttl)
		if rng.Intn(20) == 0 {
			op.TtlMs = math.MaxInt64 // refuses the command at apply
		}
		return op
	case 7:
		return getOp(k)
	case 8:
		return del(k)
	default:
		return appendOp(k, strconv.Itoa(rng.Intn(3)))
	}
}

// TestCoalescedMatchesApplied is the safety test of INCR runs with
// absorption, as the leader does both: random commands (runs of INCRs
// among SETs, GETs, DELs and APPENDs of two keys) applied as they are to
// one state machine, and absorbed, then coalesced, to another (a command
// refused whole proposed again as it is), give every op the same result
// and leave the same state after every command (byte for byte but for the
// stale expiry index entries absorption leaves out: sameState).
func TestCoalescedMatchesApplied(t *testing.T) {
	plain, coalesced := newFixture(t), newFixture(t)
	rng := rand.New(rand.NewSource(17))
	stamp := at(0)
	joined, overflows, refusals := 0, 0, 0
	for i := range 2000 {
		stamp += int64(rng.Intn(300)) * int64(time.Millisecond)
		var ops []*concordpb.Op
		for len(ops) < 1+rng.Intn(16) {
			op := coalesceOp(rng)
			for range 1 + rng.Intn(6) { // a run: the op again, a copy or the same pointer
				if rng.Intn(2) == 0 {
					op = proto.Clone(op).(*concordpb.Op)
				}
				ops = append(ops, op)
			}
		}
		before := cloneOps(ops)
		mk := func(ops []*concordpb.Op) *storepb.Command {
			return &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops, MaxValueBytes: 64}}}
		}
		want := plain.apply(wholeRange, mk(ops))
		absorbedOps, dropped := Absorb(ops)
		kept, runs := Coalesce(absorbedOps)
		got := coalesced.apply(wholeRange, mk(kept))
		switch {
		case (dropped != nil || runs != nil) && got.GetErrorCode() != 0:
			refusals++ // the leader proposes it again, as it is
			got = coalesced.apply(wholeRange, mk(ops))
		default:
			for j, r := range got.GetResults() {
				if runs != nil && runs[j] > 1 {
					joined += int(runs[j])
					if r.GetError() == concordpb.OpError_OP_ERROR_OVERFLOW && r.GetRepeatApplied() > 0 {
						overflows++
					}
				}
			}
			got.Results = Expand(ExpandRuns(kept, got.GetResults(), runs), dropped)
		}
		if !proto.Equal(want, got) {
			t.Fatalf("command %d %v:\nresults %v\ncoalesced (runs %v, dropped %v) %v", i, ops, want, runs, dropped, got)
		}
		sameOps(t, fmt.Sprintf("command %d", i), ops, before)
		sameState(t, plain, coalesced, fmt.Sprintf("after command %d", i))
	}
	if joined < 1000 || overflows == 0 || refusals == 0 {
		t.Fatalf("%d INCRs joined, %d runs overflowed partway, %d commands refused: the test no longer exercises coalescing",
			joined, overflows, refusals)
	}
	t.Logf("%d INCRs joined in runs, %d runs overflowed partway, %d commands refused and applied as they were", joined, overflows, refusals)
}
