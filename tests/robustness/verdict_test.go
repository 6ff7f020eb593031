package robustness

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// hardHistory is one key's history that porcupine cannot settle quickly:
// n puts all concurrent with each other, then a read of a value none of
// them wrote (so it is illegal, but only after every order is tried).
func hardHistory(n int) []porcupine.Operation {
	var h []porcupine.Operation
	for i := 0; i < n; i++ {
		h = append(h, op(i, int64(i), int64(1000+i), kvInput{Kind: opPut, Key: "a", Value: fmt.Sprint(i), Blind: true}, kvOutput{}))
	}
	return append(h, op(n, 5000, 5010, get("a"), found("never written")))
}

// TestInconclusiveCheckFailsTheHistory: a history porcupine ran out of time
// on was not checked, so it must not count as a pass (it used to: the
// summary said "1 checks inconclusive ... verdict: PASS").
func TestInconclusiveCheckFailsTheHistory(t *testing.T) {
	v := check(hardHistory(24), 50*time.Millisecond)
	if v.result != porcupine.Unknown {
		t.Fatalf("the hard history's check gave %v in 50ms; the test needs Unknown", v.result)
	}
	o := outcome{result: v.result, checked: 10}
	if len(o.problems()) == 0 {
		t.Fatalf("an inconclusive check passes the history")
	}
}

// TestOutcomeProblems: a history fails for a linearizability violation, a
// lost write, a failed read-back, or a lost-writes check with nothing to
// check; and passes only when every check ran and found nothing.
func TestOutcomeProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    outcome
		fail bool
	}{
		{"all checked, nothing found", outcome{result: porcupine.Ok, checked: 5}, false},
		{"not linearizable", outcome{result: porcupine.Illegal, checked: 5}, true},
		{"inconclusive", outcome{result: porcupine.Unknown, checked: 5}, true},
		{"a write lost", outcome{result: porcupine.Ok, checked: 5, lost: 1}, true},
		{"read-back failed", outcome{result: porcupine.Ok, checked: 2, readErr: errors.New("timeout")}, true},
		{"no unique write acknowledged", outcome{result: porcupine.Ok}, true},
	} {
		if got := len(tc.o.problems()) > 0; got != tc.fail {
			t.Errorf("%s: fails = %v (%q), want %v", tc.name, got, tc.o.problems(), tc.fail)
		}
	}
}
