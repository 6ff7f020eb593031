package robustness

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func op(client int, call, ret int64, in kvInput, out kvOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func put(k, v string) kvInput { return kvInput{Kind: opPut, Key: k, Value: v} }
func get(k string) kvInput    { return kvInput{Kind: opGet, Key: k} }
func incr(k string) kvInput   { return kvInput{Kind: opIncr, Key: k} }
func found(v string) kvOutput { return kvOutput{Ok: true, Value: v} }

var absent = kvOutput{}

// TestModelJudgesHistories protects the checker itself: it must accept
// linearizable histories (ambiguous writes either applied or not) and
// reject stale reads, lost acknowledged writes and wrong previous values.
func TestModelJudgesHistories(t *testing.T) {
	never := int64(math.MaxInt64)
	for _, tc := range []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"read your write", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(1, 11, 20, get("a"), found("1")),
		}},
		{"stale read after acknowledged write", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(1, 11, 20, get("a"), absent),
		}},
		{"concurrent read may see either", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(1, 5, 8, get("a"), absent),
		}},
		{"ambiguous write applied", true, []porcupine.Operation{
			op(0, 0, never, put("a", "1"), kvOutput{Unknown: true}),
			op(1, 20, 30, get("a"), found("1")),
		}},
		{"ambiguous write never applied", true, []porcupine.Operation{
			op(0, 0, never, put("a", "1"), kvOutput{Unknown: true}),
			op(1, 20, 30, get("a"), absent),
		}},
		{"put reports a wrong previous value", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(0, 20, 30, put("a", "2"), found("9")),
		}},
		{"blind put says nothing of the state before", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(1, 20, 30, kvInput{Kind: opPut, Key: "a", Value: "2", Blind: true}, kvOutput{}),
			op(0, 40, 50, get("a"), found("2")),
		}},
		{"blind put acknowledged then not read", false, []porcupine.Operation{
			op(1, 0, 10, kvInput{Kind: opPut, Key: "a", Value: "2", Blind: true}, kvOutput{}),
			op(0, 20, 30, get("a"), absent),
		}},
		{"cas swaps on the expected value", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(1, 20, 30, kvInput{Kind: opCAS, Key: "a", Expected: "1", Value: "2"}, kvOutput{Ok: true, Exists: true, Value: "1"}),
			op(0, 40, 50, get("a"), found("2")),
		}},
		{"cas claims a swap against the wrong value", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(1, 20, 30, kvInput{Kind: opCAS, Key: "a", Expected: "7", Value: "2"}, kvOutput{Ok: true, Exists: true, Value: "1"}),
		}},
		{"delete then absent", true, []porcupine.Operation{
			op(0, 0, 10, put("b", "1"), absent),
			op(0, 20, 30, kvInput{Kind: opDelete, Key: "b"}, kvOutput{Ok: true}),
			op(1, 40, 50, get("b"), absent),
		}},
		{"incr counts from absent, then from its last value", true, []porcupine.Operation{
			op(0, 0, 10, incr("c"), kvOutput{Ok: true, Value: "1"}),
			op(1, 20, 30, incr("c"), kvOutput{Ok: true, Value: "2"}),
			op(0, 40, 50, get("c"), found("2")),
		}},
		{"two incrs answer one value", false, []porcupine.Operation{
			op(0, 0, 10, incr("c"), kvOutput{Ok: true, Value: "1"}),
			op(1, 5, 15, incr("c"), kvOutput{Ok: true, Value: "1"}),
		}},
		{"concurrent incrs in either order", true, []porcupine.Operation{
			op(0, 0, 30, incr("c"), kvOutput{Ok: true, Value: "2"}),
			op(1, 5, 20, incr("c"), kvOutput{Ok: true, Value: "1"}),
		}},
		{"incr of text is refused and changes nothing", true, []porcupine.Operation{
			op(0, 0, 10, put("c", "x"), absent),
			op(1, 20, 30, incr("c"), kvOutput{}),
			op(0, 40, 50, get("c"), found("x")),
		}},
		{"incr of text claimed applied", false, []porcupine.Operation{
			op(0, 0, 10, put("c", "x"), absent),
			op(1, 20, 30, incr("c"), kvOutput{Ok: true, Value: "1"}),
		}},
		{"incr of an integer refused", false, []porcupine.Operation{
			op(0, 0, 10, put("c", "5"), absent),
			op(1, 20, 30, incr("c"), kvOutput{}),
		}},
		{"an ambiguous incr may have applied", true, []porcupine.Operation{
			op(0, 0, 10, put("c", "5"), absent),
			op(1, 20, math.MaxInt64, incr("c"), kvOutput{Unknown: true}), // as the recorder records it
			op(0, 40, 50, get("c"), found("6")),
		}},
		{"an ambiguous incr may not have applied", true, []porcupine.Operation{
			op(0, 0, 10, put("c", "5"), absent),
			op(1, 20, math.MaxInt64, incr("c"), kvOutput{Unknown: true}),
			op(0, 40, 50, get("c"), found("5")),
		}},
		{"keys are independent", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "1"), absent),
			op(0, 20, 30, put("b", "1"), absent),
			op(1, 40, 50, get("a"), absent),
		}},
	} {
		if got := porcupine.CheckOperations(kvModel, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// mset is a blind MSET putting "1@key" under each key.
func mset(keys ...string) kvInput {
	in := kvInput{Kind: opMSet, Keys: keys, Blind: true}
	for _, k := range keys {
		in.Values = append(in.Values, "1@"+k)
	}
	return in
}
func mget(keys ...string) kvInput     { return kvInput{Kind: opMGet, Keys: keys} }
func seen(states ...kvState) kvOutput { return kvOutput{Multi: states} }
func has(k string) kvState            { return kvState{Exists: true, Value: "1@" + k} }

// TestModelJudgesGroups: the keys of a group are one partition, so a
// multi-key write must be seen whole or not at all. A reader that sees half
// of an MSET (at once, or by reading one key and then another) is a
// violation, which a model partitioned by key cannot see.
func TestModelJudgesGroups(t *testing.T) {
	never := int64(math.MaxInt64)
	a, b, c := "{g0}a", "{g0}b", "{g0}c"
	none := kvState{}
	for _, tc := range []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"mget after an mset sees it whole", true, []porcupine.Operation{
			op(0, 0, 10, mset(a, b), kvOutput{}),
			op(1, 20, 30, mget(b, a), seen(has(b), has(a))),
		}},
		{"mget during an mset sees none of it", true, []porcupine.Operation{
			op(0, 0, 100, mset(a, b), kvOutput{}),
			op(1, 10, 20, mget(a, b), seen(none, none)),
		}},
		{"mget during an mset sees half of it", false, []porcupine.Operation{
			op(0, 0, 100, mset(a, b), kvOutput{}),
			op(1, 10, 20, mget(a, b), seen(has(a), none)),
		}},
		{"two gets during an mset see its second half, then not its first", false, []porcupine.Operation{
			op(0, 0, 100, mset(a, b), kvOutput{}),
			op(1, 10, 20, get(b), found("1@"+b)),
			op(1, 30, 40, get(a), absent),
		}},
		{"an ambiguous mset applied whole", true, []porcupine.Operation{
			op(0, 0, never, mset(a, b, c), kvOutput{Unknown: true}),
			op(1, 20, 30, mget(a, b, c), seen(has(a), has(b), has(c))),
		}},
		{"an ambiguous mset applied in part", false, []porcupine.Operation{
			op(0, 0, never, mset(a, b, c), kvOutput{Unknown: true}),
			op(1, 20, 30, mget(a, c), seen(has(a), none)),
		}},
		{"a batch of puts answers the states before it", true, []porcupine.Operation{
			op(0, 0, 10, put(a, "x"), absent),
			op(1, 20, 30, kvInput{Kind: opMSet, Keys: []string{a, b}, Values: []string{"1@" + a, "1@" + b}},
				seen(kvState{Exists: true, Value: "x"}, none)),
		}},
		{"a batch of puts misses a write before it", false, []porcupine.Operation{
			op(0, 0, 10, put(a, "x"), absent),
			op(1, 20, 30, kvInput{Kind: opMSet, Keys: []string{a, b}, Values: []string{"1@" + a, "1@" + b}}, seen(none, none)),
		}},
		{"msetnx refused because one key exists, changing nothing", true, []porcupine.Operation{
			op(0, 0, 10, put(a, "x"), absent),
			op(1, 20, 30, kvInput{Kind: opMSetNX, Keys: []string{a, b}, Values: []string{"1@" + a, "1@" + b}}, kvOutput{}),
			op(0, 40, 50, get(b), absent),
		}},
		{"msetnx claims to set over an existing key", false, []porcupine.Operation{
			op(0, 0, 10, put(a, "x"), absent),
			op(1, 20, 30, kvInput{Kind: opMSetNX, Keys: []string{a, b}, Values: []string{"1@" + a, "1@" + b}}, kvOutput{Ok: true}),
		}},
		{"del of several keys counts those that existed", true, []porcupine.Operation{
			op(0, 0, 10, put(a, "x"), absent),
			op(1, 20, 30, kvInput{Kind: opMDel, Keys: []string{b, a}, CountOnly: true}, kvOutput{N: 1}),
			op(0, 40, 50, mget(a, b), seen(none, none)),
		}},
		{"del of several keys miscounts", false, []porcupine.Operation{
			op(0, 0, 10, put(a, "x"), absent),
			op(1, 20, 30, kvInput{Kind: opMDel, Keys: []string{b, a}, CountOnly: true}, kvOutput{N: 2}),
		}},
		{"groups are independent of each other and of plain keys", true, []porcupine.Operation{
			op(0, 0, 10, mset(a, b), kvOutput{}),
			op(1, 20, 30, mget("{g1}a", "{g1}b"), seen(none, none)),
			op(1, 40, 50, get("a"), absent),
		}},
		{"a multi-key op over two groups is rejected", false, []porcupine.Operation{
			op(0, 0, 10, mset(a, "{g1}b"), kvOutput{}),
		}},
	} {
		if got := porcupine.CheckOperations(kvModel, tc.h); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
