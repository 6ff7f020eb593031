package robustness

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// wallBase is the wall clock (Unix ns) the hand-built histories start at.
const wallBase = int64(1_800_000_000) * int64(time.Second)

// timed is an operation called at callMs and returned at retMs (ms from
// wallBase, on both porcupine's clock and the wall clock); an ambiguous
// one (out.Unknown) never returns.
func timed(client int, callMs, retMs int64, in kvInput, out kvOutput) porcupine.Operation {
	ms := int64(time.Millisecond)
	in.CallWall = wallBase + callMs*ms
	ret := retMs * ms
	if out.Unknown {
		ret = math.MaxInt64
	} else {
		out.ReturnWall = wallBase + ret
	}
	return op(client, callMs*ms, ret, in, out)
}

func ttlPut(k, v string, ttlMs int64) kvInput {
	return kvInput{Kind: opPut, Key: k, Value: v, TTLMs: ttlMs}
}

// TestModelJudgesExpiry: the model holds a value put with a TTL to its
// window (from the put's call + ttl to its return + ttl), with a few
// milliseconds of slack, and accepts what a correct system may do around
// it, including a put that saw the value live after a concurrent read saw
// it expired (the put's time is its stamp, taken before it committed).
func TestModelJudgesExpiry(t *testing.T) {
	unknown := kvOutput{Unknown: true}
	// put(a, 1) with a TTL of 100ms, in [0, 10]: it expires in [99, 110].
	p := timed(0, 0, 10, ttlPut("a", "1", 100), absent)
	for _, tc := range []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"read long after the window still sees the value", false, []porcupine.Operation{
			p, timed(1, 500, 510, get("a"), found("1")),
		}},
		{"read just after the window still sees the value", false, []porcupine.Operation{
			p, timed(1, 115, 120, get("a"), found("1")),
		}},
		{"read sees it absent before the window", false, []porcupine.Operation{
			p, timed(1, 20, 30, get("a"), absent),
		}},
		{"read sees it absent just before the window", false, []porcupine.Operation{
			p, timed(1, 80, 90, get("a"), absent),
		}},
		{"reads before and after the window", true, []porcupine.Operation{
			p, timed(1, 50, 60, get("a"), found("1")), timed(1, 200, 210, get("a"), absent),
		}},
		{"read inside the window sees the value", true, []porcupine.Operation{
			p, timed(1, 100, 105, get("a"), found("1")),
		}},
		{"read inside the window sees it absent", true, []porcupine.Operation{
			p, timed(1, 100, 105, get("a"), absent),
		}},
		{"concurrent reads in the window disagree", true, []porcupine.Operation{
			p, timed(1, 100, 108, get("a"), absent), timed(2, 101, 107, get("a"), found("1")),
		}},
		{"once seen expired, a later read sees the value", false, []porcupine.Operation{
			p, timed(1, 100, 105, get("a"), absent), timed(1, 110, 112, get("a"), found("1")),
		}},
		{"once seen live at 107, no read ended before 105 saw it expired", false, []porcupine.Operation{
			p, timed(1, 107, 108, get("a"), found("1")), timed(2, 100, 102, get("a"), absent),
		}},
		{"a put saw the value live after a concurrent read saw it expired", true, []porcupine.Operation{
			p, timed(1, 100, 120, get("a"), absent), timed(2, 90, 130, put("a", "2"), found("1")),
			timed(1, 140, 150, get("a"), found("2")),
		}},
		{"a put long after the window saw the value live", false, []porcupine.Operation{
			p, timed(2, 300, 310, put("a", "2"), found("1")),
		}},
		{"a put without a TTL clears the expiry", true, []porcupine.Operation{
			p, timed(1, 20, 30, put("a", "2"), found("1")), timed(1, 500, 510, get("a"), found("2")),
		}},
		{"a value put without a TTL expires", false, []porcupine.Operation{
			p, timed(1, 20, 30, put("a", "2"), found("1")), timed(1, 500, 510, get("a"), absent),
		}},
		{"delete after the window finds nothing", true, []porcupine.Operation{
			p, timed(1, 300, 310, kvInput{Kind: opDelete, Key: "a"}, kvOutput{}),
		}},
		{"delete after the window finds the value", false, []porcupine.Operation{
			p, timed(1, 300, 310, kvInput{Kind: opDelete, Key: "a"}, kvOutput{Ok: true}),
		}},
		{"SET NX after the window puts", true, []porcupine.Operation{
			p, timed(1, 300, 310, kvInput{Kind: opCAS, Key: "a", Value: "2", Absent: true}, kvOutput{Ok: true}),
			timed(1, 400, 410, get("a"), found("2")),
		}},
		{"SET NX before the window puts", false, []porcupine.Operation{
			p, timed(1, 30, 40, kvInput{Kind: opCAS, Key: "a", Value: "2", Absent: true}, kvOutput{Ok: true}),
		}},
		{"INCR after the window counts from absent", true, []porcupine.Operation{
			p, timed(1, 300, 310, incr("a"), kvOutput{Ok: true, Value: "1"}),
			timed(1, 400, 410, get("a"), found("1")),
		}},
		{"an INCR's value, put after the expiry, does not expire", false, []porcupine.Operation{
			p, timed(1, 300, 310, incr("a"), kvOutput{Ok: true, Value: "1"}),
			timed(1, 1400, 1410, get("a"), absent),
		}},
		{"an ambiguous put with a TTL then either read", true, []porcupine.Operation{
			timed(0, 0, 0, ttlPut("a", "1", 100), unknown),
			timed(1, 50, 60, get("a"), found("1")), timed(1, 5000, 5010, get("a"), absent),
		}},
		{"an ambiguous put with a TTL is seen long after its call", true, []porcupine.Operation{
			timed(0, 0, 0, ttlPut("a", "1", 100), unknown),
			timed(1, 5000, 5010, get("a"), found("1")),
		}},
		{"an ambiguous SET NX in the window: its value", true, []porcupine.Operation{
			p, timed(1, 50, 0, kvInput{Kind: opCAS, Key: "a", Value: "2", Absent: true}, unknown),
			timed(1, 400, 410, get("a"), found("2")),
		}},
		{"an ambiguous SET NX in the window: nothing", true, []porcupine.Operation{
			p, timed(1, 50, 0, kvInput{Kind: opCAS, Key: "a", Value: "2", Absent: true}, unknown),
			timed(1, 400, 410, get("a"), absent),
		}},
		{"after an ambiguous SET NX, a put is checked again", false, []porcupine.Operation{
			p, timed(1, 50, 0, kvInput{Kind: opCAS, Key: "a", Value: "2", Absent: true}, unknown),
			timed(2, 400, 410, put("a", "3"), kvOutput{Ok: true, Value: "2"}),
			timed(1, 500, 510, get("a"), found("2")),
		}},
	} {
		if got := porcupine.CheckOperations(kvModel, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
		if got := check(tc.h, time.Minute).result == porcupine.Ok; got != tc.ok {
			t.Errorf("%s: the staged check says linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestAmbiguousMutationsLegalInTimedStates is F1 (reduce.go) for the states
// expiry adds: a mutation whose output is Unknown is accepted in a state
// that expires (before, in or after its window) and in the Unsure one.
func TestAmbiguousMutationsLegalInTimedStates(t *testing.T) {
	ms := int64(time.Millisecond)
	states := []kvState{
		{Exists: true, Value: "1", Expires: true, ExpLo: wallBase + 100*ms, ExpHi: wallBase + 110*ms},
		{Exists: true, Value: "7", Expires: true, ExpLo: wallBase + 100*ms, ExpHi: math.MaxInt64},
		{Unsure: true},
		{Exists: true, Value: "1"}, {},
	}
	muts := []kvInput{
		put("a", "2"), ttlPut("a", "2", 5), {Kind: opPut, Key: "a", Value: "2", Blind: true, TTLMs: 5},
		{Kind: opDelete, Key: "a"}, {Kind: opCAS, Key: "a", Value: "2", Absent: true},
		{Kind: opCAS, Key: "a", Value: "2", Expected: "1"}, incr("a"), keepPut("a", "2"),
	}
	for _, c := range expireConds {
		muts = append(muts, pexpire("a", 5, c), pexpire("a", 0, c))
	}
	muts = append(muts, persist("a"), getex("a", 5), getex("a", 0))
	for _, s := range states {
		for _, in := range muts {
			for _, callMs := range []int64{0, 105, 1000} {
				in.CallWall = wallBase + callMs*ms
				if ok, _ := kvModel.Step(s, in, kvOutput{Unknown: true}); !ok {
					t.Errorf("ambiguous %s called at %dms refused in state %s", describe(in, kvOutput{Unknown: true}), callMs, describeState(s))
				}
			}
		}
	}
}

// TestExpiryCountsCountOnlyCertainExpiries: a read counts as having seen a
// TTL run out only when nothing but the expiry explains its absence.
func TestExpiryCountsCountOnlyCertainExpiries(t *testing.T) {
	p := timed(0, 0, 10, ttlPut("a", "1", 100), absent)
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		want int
	}{
		{"a read after the put, alone", []porcupine.Operation{p, timed(1, 200, 210, get("a"), absent)}, 1},
		{"the read overlaps the put", []porcupine.Operation{p, timed(1, 5, 210, get("a"), absent)}, 0},
		{"a delete came between", []porcupine.Operation{p, timed(2, 50, 60, kvInput{Kind: opDelete, Key: "a"}, absent),
			timed(1, 200, 210, get("a"), absent)}, 0},
		{"an ambiguous delete called before the read returned", []porcupine.Operation{p,
			timed(2, 205, 0, kvInput{Kind: opDelete, Key: "a"}, kvOutput{Unknown: true}), timed(1, 200, 210, get("a"), absent)}, 0},
		{"an ambiguous delete called before the put", []porcupine.Operation{
			timed(2, -5, 0, kvInput{Kind: opDelete, Key: "a"}, kvOutput{Unknown: true}), p, timed(1, 200, 210, get("a"), absent)}, 0},
		{"the put had no TTL", []porcupine.Operation{timed(0, 0, 10, put("a", "1"), absent), timed(1, 200, 210, get("a"), absent)}, 0},
		{"another key's delete does not matter", []porcupine.Operation{p, timed(2, 50, 60, kvInput{Kind: opDelete, Key: "b"}, absent),
			timed(1, 200, 210, get("a"), absent)}, 1},
	} {
		if _, got := expiryCounts(tc.h); got != tc.want {
			t.Errorf("%s: %d reads saw an expiry, want %d", tc.name, got, tc.want)
		}
	}
}

// TestExpiryCountsCountExpireCommands: a read that finds the key absent
// after an expire that gave it a TTL, alone before it, saw that TTL run
// out; after one that did not change the key, or removed the expiry, it
// proves nothing.
func TestExpiryCountsCountExpireCommands(t *testing.T) {
	p := timed(0, 0, 10, put("a", "1"), absent)
	read := timed(1, 200, 210, get("a"), absent)
	for _, tc := range []struct {
		name string
		op   porcupine.Operation
		want int
	}{
		{"PEXPIRE that changed it", timed(2, 20, 30, pexpire("a", 5, condNone), changed(true)), 1},
		{"PEXPIRE that did not", timed(2, 20, 30, pexpire("a", 5, condNX), changed(false)), 0},
		{"an ambiguous PEXPIRE", timed(2, 20, 0, pexpire("a", 5, condNone), kvOutput{Unknown: true}), 0},
		{"GETEX PX that found it", timed(2, 20, 30, getex("a", 5), kvOutput{Exists: true, Value: "1"}), 1},
		{"GETEX PX that did not", timed(2, 20, 30, getex("a", 5), absent), 0},
		{"PERSIST", timed(2, 20, 30, persist("a"), changed(true)), 0},
		{"EXPIRE in the past", timed(2, 20, 30, pexpire("a", 0, condNone), changed(true)), 0},
	} {
		if _, got := expiryCounts([]porcupine.Operation{p, tc.op, read}); got != tc.want {
			t.Errorf("%s: %d reads saw an expiry, want %d", tc.name, got, tc.want)
		}
	}
}
