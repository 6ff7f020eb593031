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
