package kv

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// budgetCmd is a KV command of session/seq with a result budget
// (max_result_bytes; 0: none, as a leader below version.ResultBudget sends).
func budgetCmd(session, seq uint64, budget int64, ops ...*concordpb.Op) *storepb.Command {
	cmd := kvCmd(session, seq, at(0), ops...)
	cmd.GetKv().MaxResultBytes = budget
	return cmd
}

// budgetOps is a batch whose stored values overrun a budget of 4,500
// bytes when "big" and "big2" hold 1,000 bytes each: the first four
// values fit, then the ops returning 1,000 more fail, a smaller one after
// them still fits.
func budgetOps(bigValue []byte) []*concordpb.Op {
	gd := func(k string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_GET_DELETE, Key: []byte(k)}
	}
	return []*concordpb.Op{
		getOp("big"),                            // 0: 1,000
		getOp("big"),                            // 1: 2,000
		put("w", "x"),                           // 2: blind, returns nothing
		getOp("big"),                            // 3: 3,000
		gd("big2"),                              // 4: 4,000, and big2 is deleted
		getOp("big"),                            // 5: past the budget
		putPrev("big", "replaced"),              // 6: past it: must not replace
		getOp("small"),                          // 7: 10 bytes still fit
		cas("big", bigValue, false, "c", false), // 8: past it: must not swap
		{Type: concordpb.OpType_OP_CHECK, Key: []byte("big"), Expected: bigValue, Skip: 1}, // 9: past it: skips 10
		put("z", "skipped"), // 10
		incrOp("n", 1),      // 11: not a stored value: applies
		gd("big"),           // 12: past it: big stays
	}
}

// TestResultBudgetFailsTheOpsPastIt protects replicas from a poison entry:
// a small batch of value-returning ops (64 GETs of a 1 MiB value were a
// 67 MB result, and as large a session record, on every replica) is
// bounded by the command's result budget. The ops past it fail alone with
// OP_ERROR_RESULT_TOO_LARGE and change nothing; the others apply as
// before; the result and the session record stay within the budget; two
// state machines applying the same commands agree on every result and
// value. Without a budget (a cluster below version.ResultBudget) the same
// batch applies whole, as before.
func TestResultBudgetFailsTheOpsPastIt(t *testing.T) {
	const budget = 4500
	bigValue := bytes.Repeat([]byte("v"), 1000)
	setup := kvCmd(0, 0, at(0), put("big", string(bigValue)), put("big2", string(bigValue)), put("small", "0123456789"))
	replicas := []*fixture{newFixture(t), newFixture(t)}
	var results []*storepb.CommandResult
	for _, f := range replicas {
		f.apply(wholeRange, setup)
		results = append(results, f.apply(wholeRange, budgetCmd(7, 1, budget, budgetOps(bigValue)...)))
	}
	if !proto.Equal(results[0], results[1]) {
		t.Fatalf("two replicas answered the same command differently:\n%v\n%v", results[0], results[1])
	}
	res := results[0].GetResults()
	if results[0].GetErrorCode() != 0 || len(res) != 13 {
		t.Fatalf("result %v, want 13 op results", results[0])
	}
	tooLarge := map[int]bool{5: true, 6: true, 8: true, 9: true, 12: true}
	returned := 0
	for i, r := range res {
		returned += len(r.GetValue())
		if got := r.GetError() == concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE; got != tooLarge[i] {
			t.Fatalf("op %d: %v; want RESULT_TOO_LARGE %v", i, r, tooLarge[i])
		}
		if tooLarge[i] && (r.GetOk() || r.GetValue() != nil) {
			t.Fatalf("op %d failed past the budget but answered %v", i, r)
		}
	}
	if returned > budget || returned != 4011 { // and the INCR's new value, "1"
		t.Fatalf("the results return %d bytes of values; the budget is %d, want 4,011", returned, budget)
	}
	if !res[10].GetSkipped() || res[11].GetIntValue() != 1 || string(res[7].GetValue()) != "0123456789" {
		t.Fatalf("ops 7, 10, 11: %v, %v, %v; want small's value, skipped, 1", res[7], res[10], res[11])
	}
	for _, f := range replicas {
		f.value("big", bigValue) // not replaced, swapped or deleted
		f.value("big2", nil)     // deleted by op 4, within the budget
		f.value("w", []byte("x"))
		f.value("z", nil)
		f.value("n", []byte("1"))
		rec := sessionRecord(t, f, 7)
		if !proto.Equal(rec.GetResult(), results[0]) || proto.Size(rec) > budget+1024 {
			t.Fatalf("session record of %d bytes, result %v; want the answer, within the budget", proto.Size(rec), rec.GetResult())
		}
	}

	// Without a budget the same batch applies whole.
	f := newFixture(t)
	f.apply(wholeRange, setup)
	all := f.apply(wholeRange, budgetCmd(7, 1, 0, budgetOps(bigValue)...)).GetResults()
	for i, r := range all {
		if r.GetError() != concordpb.OpError_OP_ERROR_NONE {
			t.Fatalf("without a budget op %d failed: %v", i, r)
		}
	}
	f.value("big", nil) // op 12 deleted it
}

// TestReturnsValue protects the ops the budget counts, which nodes merging
// batches count at their worst: every op whose result carries a stored
// value, none that does not.
func TestReturnsValue(t *testing.T) {
	for typ := range concordpb.OpType_name {
		op := &concordpb.Op{Type: concordpb.OpType(typ)}
		want := false
		switch op.GetType() {
		case concordpb.OpType_OP_GET, concordpb.OpType_OP_GET_DELETE, concordpb.OpType_OP_CAS,
			concordpb.OpType_OP_CHECK, concordpb.OpType_OP_EXPIRE:
			want = true
		}
		if ReturnsValue(op) != want {
			t.Fatalf("ReturnsValue(%v) = %v, want %v", op.GetType(), !want, want)
		}
	}
	if !ReturnsValue(putPrev("k", "v")) || ReturnsValue(put("k", "v")) {
		t.Fatal("a PUT returns a stored value exactly with return_prev")
	}
}
