package robustness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// ambiguous is op as the recorder records an ambiguous mutation: it never
// returns, and its output is unknown.
func ambiguous(client int, call int64, in kvInput) porcupine.Operation {
	return op(client, call, math.MaxInt64, in, kvOutput{Unknown: true})
}

func blindPut(k, v string) kvInput { return kvInput{Kind: opPut, Key: k, Value: v, Blind: true} }

// TestStagedCheckFindsAmbiguousEffects (a): histories that are linearizable
// only if an ambiguous mutation took effect fail the first stage (every
// ambiguous mutation left out) and must still be judged linearizable, by
// the stage that puts back the ones whose effect was seen. Each also holds
// an ambiguous put no one saw, which that stage leaves out.
func TestStagedCheckFindsAmbiguousEffects(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
	}{
		{"an ambiguous put read back", []porcupine.Operation{
			ambiguous(0, 0, blindPut("a", "x")),
			op(1, 20, 30, get("a"), found("x")),
		}},
		// porcupine orders a call before a return at the same moment: the
		// two overlap, so the put is no tail (Lemma B) of the read.
		{"an ambiguous put called as its read returned", []porcupine.Operation{
			op(1, 20, 30, get("a"), found("x")),
			ambiguous(0, 30, blindPut("a", "x")),
		}},
		{"an ambiguous cas read back", []porcupine.Operation{
			ambiguous(0, 0, kvInput{Kind: opCAS, Key: "a", Absent: true, Value: "x"}),
			op(1, 20, 30, put("a", "y"), found("x")),
		}},
		{"an ambiguous incr counted", []porcupine.Operation{
			op(0, 0, 10, incr("c"), kvOutput{Ok: true, Value: "1"}),
			ambiguous(1, 20, incr("c")),
			op(0, 40, 50, get("c"), found("2")),
		}},
		{"an ambiguous delete seen", []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), absent),
			ambiguous(1, 20, kvInput{Kind: opDelete, Key: "a"}),
			op(0, 40, 50, get("a"), absent),
		}},
	} {
		h := append(tc.h, ambiguous(9, 5, blindPut(tc.h[0].Input.(kvInput).Key, "unseen")))
		v := check(h, time.Minute)
		if v.result != porcupine.Ok || v.stage() != stageObserved {
			t.Errorf("%s: %v by the %v check, want Ok by the %v check", tc.name, v.result, v.stage(), stageObserved)
		}
	}
}

// TestStagedCheckStillFindsViolations (b): an illegal history stays
// illegal however many ambiguous mutations it holds: no stage that leaves
// some out may pass it, and the full check finds it Illegal.
func TestStagedCheckStillFindsViolations(t *testing.T) {
	stale := []porcupine.Operation{
		op(0, 0, 10, put("a", "1"), absent),
		op(1, 20, 30, get("a"), absent), // a stale read: illegal
	}
	// Forty ambiguous puts after every answer: Lemma B drops them, and
	// the full check is quick.
	late := append([]porcupine.Operation(nil), stale...)
	for i := 0; i < 40; i++ {
		late = append(late, ambiguous(2+i, int64(40+i), blindPut("a", fmt.Sprint("late", i))))
	}
	// Twelve ambiguous puts before the stale read, none of them seen, and
	// a read of a value no one wrote: the full check must try them all.
	early := []porcupine.Operation{op(0, 0, 10, put("a", "1"), absent)}
	for i := 0; i < 12; i++ {
		early = append(early, ambiguous(2+i, int64(11+i), blindPut("a", fmt.Sprint("early", i))))
	}
	early = append(early, op(1, 40, 50, get("a"), found("never written")))
	// A put whose answer was lost but that returned (not as the recorder
	// records one) must take effect before what follows it: not
	// removable.
	returned := []porcupine.Operation{
		op(0, 0, 10, blindPut("a", "x"), kvOutput{Unknown: true}),
		op(1, 20, 30, get("a"), absent),
	}
	// The recorder never records a get so, but the model judges a get by
	// its output alone: one that never returned is no ambiguous mutation.
	unknownGet := []porcupine.Operation{
		op(0, 0, 10, put("a", "1"), absent),
		op(1, 20, math.MaxInt64, get("a"), kvOutput{Unknown: true}),
	}
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		tail int
	}{
		{"forty ambiguous puts after a stale read", late, 40},
		{"an unknown put that returned before a read", returned, 0},
		{"a get that never returned", unknownGet, 0},
		{"twelve ambiguous puts before a read of nothing written", early, 0},
	} {
		if porcupine.CheckOperations(kvModel, tc.h) {
			t.Fatalf("%s: porcupine finds it linearizable; the test needs an illegal history", tc.name)
		}
		v := check(tc.h, time.Minute)
		if v.result != porcupine.Illegal || v.keys[0].tail != tc.tail {
			t.Errorf("%s: %v (%d ambiguous dropped as tail), want Illegal (%d)", tc.name, v.result, v.keys[0].tail, tc.tail)
		}
		// However short its time, the check must never pass it.
		for _, d := range []time.Duration{time.Microsecond, time.Millisecond, 10 * time.Millisecond} {
			if r := check(tc.h, d).result; r == porcupine.Ok {
				t.Errorf("%s: Ok within %v", tc.name, d)
			}
		}
	}
}

// manyAmbiguousPuts is one key's history of n ambiguous blind puts, all
// called before a read that finds the key absent (so none took effect by
// then), then reads of the 17th's value (it took effect later). It is
// linearizable, but porcupine alone tries the puts before the first read
// in every subset before it tries none.
func manyAmbiguousPuts(n int) []porcupine.Operation {
	var h []porcupine.Operation
	for i := 0; i < n; i++ {
		h = append(h, ambiguous(i, int64(i), blindPut("a", fmt.Sprint("v", i))))
	}
	return append(h,
		op(n, 100, 110, get("a"), absent),
		op(n, 200, 210, get("a"), found("v17")),
		op(n+1, 300, 310, put("a", "w"), found("v17")),
		op(n, 400, 410, get("a"), found("w")),
	)
}

// TestStagedCheckSettlesManyAmbiguousPuts (c): a key with forty ambiguous
// blind puts that porcupine alone cannot settle in its time is settled by
// the staged check, well within the same time.
func TestStagedCheckSettlesManyAmbiguousPuts(t *testing.T) {
	h := manyAmbiguousPuts(40)
	const limit = 2 * time.Second
	if r := porcupine.CheckOperationsTimeout(kvModel, h, limit); r != porcupine.Unknown {
		t.Fatalf("porcupine alone settles the history in %v (%v); the test needs one it cannot", limit, r)
	}
	start := time.Now()
	v := check(h, limit)
	if v.result != porcupine.Ok || v.stage() != stageObserved {
		t.Fatalf("staged check: %v by the %v check, want Ok by the %v check", v.result, v.stage(), stageObserved)
	}
	t.Logf("porcupine alone: Unknown after %v; staged: Ok in %v", limit, time.Since(start))
}

// TestStagedCheckAgreesWithPorcupine: on many random small histories of one
// key (small enough for porcupine to settle without a timeout), the staged
// check gives porcupine's verdict: never Ok where porcupine says Illegal,
// never Illegal where it says Ok.
func TestStagedCheckAgreesWithPorcupine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var legal, illegal, tails int
	var byStage [len(stageNames)]int
	for i := 0; i < 3000; i++ {
		h := randomHistory(rng, i)
		want := porcupine.Illegal
		if porcupine.CheckOperations(kvModel, h) {
			want = porcupine.Ok
		}
		v := check(h, time.Minute)
		if v.result != want {
			t.Fatalf("history %d: staged check %v, porcupine %v:\n%s", i, v.result, want, describeHistory(h))
		}
		if v.keys[0].tail > 0 {
			tails++
		}
		if want == porcupine.Ok {
			legal++
			byStage[v.stage()]++
		} else {
			illegal++
		}
	}
	// Each reduction must have had its say, or the test proves nothing of it.
	if legal < 500 || illegal < 500 || tails < 100 || slices.Min(byStage[:]) < 50 {
		t.Fatalf("%d legal (by stage %v) and %d illegal histories, %d with a tail: the test needs many of each",
			legal, byStage, illegal, tails)
	}
	t.Logf("%d legal (by stage %v), %d illegal, %d with a tail dropped", legal, byStage, illegal, tails)
}

// randomHistory runs up to 12 random operations on one key, one after
// another in a model of the key, and spreads each around its moment
// (so that they overlap). Some end ambiguous (applied or not); some have an
// output made wrong, which makes most of those histories illegal.
func randomHistory(rng *rand.Rand, seed int) []porcupine.Operation {
	s := kvState{}
	var h []porcupine.Operation
	n := 2 + rng.IntN(11)
	for i := 0; i < n; i++ {
		in := kvInput{Key: "a", Value: fmt.Sprintf("v%d.%d", seed, i)}
		switch rng.IntN(6) {
		case 0:
			in.Kind = opGet
		case 1:
			in.Kind, in.Blind = opPut, rng.IntN(2) == 0
		case 2:
			in.Kind = opDelete
		case 3:
			in.Kind, in.Absent = opCAS, rng.IntN(2) == 0
			if !in.Absent {
				in.Expected = s.Value
			}
		default:
			in.Kind = opIncr
		}
		out := answer(s, in)
		_, next := step(s, in, out)
		at := int64(100 * i)
		call, ret := at-rng.Int64N(150), at+rng.Int64N(150)
		switch p := rng.IntN(10); {
		case p < 3 && in.Kind != opGet:
			out, ret = kvOutput{Unknown: true}, math.MaxInt64
			if p == 0 {
				next = s // it never took effect
			}
		case p == 3:
			out.Ok, out.Value = !out.Ok, "wrong"
		}
		s = next.(kvState)
		h = append(h, op(rng.IntN(4), call, ret, in, out))
	}
	return h
}

// answer is the output the key in state s gives to in.
func answer(s kvState, in kvInput) kvOutput {
	switch in.Kind {
	case opCAS:
		match := (in.Absent && !s.Exists) || (!in.Absent && s.Exists && s.Value == in.Expected)
		return kvOutput{Ok: match, Exists: s.Exists, Value: s.Value}
	case opIncr:
		n, err := strconv.ParseInt(s.Value, 10, 64)
		if s.Exists && err != nil {
			return kvOutput{}
		}
		return kvOutput{Ok: true, Value: strconv.FormatInt(n+1, 10)}
	case opDelete:
		return kvOutput{Ok: s.Exists}
	}
	if in.Blind {
		return kvOutput{}
	}
	return kvOutput{Ok: s.Exists, Value: s.Value}
}

func describeHistory(h []porcupine.Operation) string {
	var b strings.Builder
	for _, o := range h {
		fmt.Fprintf(&b, "  [%d, %d] client %d: %s\n", o.Call, o.Return, o.ClientId, describe(o.Input.(kvInput), o.Output.(kvOutput)))
	}
	return b.String()
}

// TestCheckKeptHistories judges the histories keep wrote (CONCORD_CHECK_KEPT:
// history.json files, separated by commas) with porcupine alone and with the
// staged check, each within CONCORD_CHECK_TIMEOUT (default 2m), to study
// what makes a history hard and what the stages make of it. It fails if the
// two disagree where both are conclusive.
func TestCheckKeptHistories(t *testing.T) {
	files := os.Getenv("CONCORD_CHECK_KEPT")
	if files == "" {
		t.Skip("set CONCORD_CHECK_KEPT to history.json files kept under robustness-out/")
	}
	timeout := envDuration(t, "CONCORD_CHECK_TIMEOUT", 2*time.Minute)
	for _, f := range strings.Split(files, ",") {
		ops, err := readKept(f)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		alone := porcupine.CheckOperationsTimeout(kvModel, ops, timeout)
		took := time.Since(start)
		start = time.Now()
		v := check(ops, timeout)
		t.Logf("%s: %d operations; porcupine alone %v in %v; staged %v in %v", f, len(ops), alone, took.Round(time.Millisecond), v.result, time.Since(start).Round(time.Millisecond))
		logKeys(t, v)
		if alone != porcupine.Unknown && v.result != porcupine.Unknown && alone != v.result {
			t.Errorf("%s: porcupine alone says %v, the staged check %v", f, alone, v.result)
		}
	}
}

// TestKeptHistoryReadsBack: keep writes a history that readKept reads back
// as it was, and a visualisation of each key that did not pass (only).
func TestKeptHistoryReadsBack(t *testing.T) {
	ops := append(manyAmbiguousPuts(20), op(7, 0, 10, put("b/1", "1"), absent), op(8, 20, 30, get("b/1"), absent))
	v := check(ops, time.Minute)
	if v.result != porcupine.Illegal {
		t.Fatalf("the history is %v; the test needs an illegal one", v.result)
	}
	dir := t.TempDir()
	if err := keep(dir, ops, v); err != nil {
		t.Fatal(err)
	}
	back, err := readKept(filepath.Join(dir, "history.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ops) {
		t.Fatalf("read back %v, want %v", back, ops)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"history-b_1.html", "history.json"}) {
		t.Fatalf("kept %v, want history.json and the illegal key's history-b_1.html", names)
	}
}
