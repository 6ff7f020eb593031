package robustness

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/concord-kv/concord/client"
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

// TestInconclusiveCheckIsNoAnomaly: a history porcupine ran out of time on
// was not checked: it fails nothing (a limit of the checker, not of the
// product), and the summary says it went unchecked (summary_test.go).
func TestInconclusiveCheckIsNoAnomaly(t *testing.T) {
	v := check(hardHistory(24), 50*time.Millisecond)
	if v.result != porcupine.Unknown {
		t.Fatalf("the hard history's check gave %v in 50ms; the test needs Unknown", v.result)
	}
	o := outcome{result: v.result, faults: 1, checked: 10, cover: fullCoverage()}
	if len(o.problems()) != 0 || o.anomalous() {
		t.Fatalf("an inconclusive check fails the history: %q", o.problems())
	}
}

// TestOutcomeProblems: a history fails for a linearizability violation, a
// lost write, a failed read-back, or a lost-writes check with nothing to
// check; and passes only when every check ran and found nothing.
func TestOutcomeProblems(t *testing.T) {
	covered := fullCoverage()
	for _, tc := range []struct {
		name    string
		o       outcome
		fail    bool
		anomaly bool // a mutant hunt counts it as caught
	}{
		{"all checked, nothing found", outcome{faults: 1, result: porcupine.Ok, checked: 5, cover: covered}, false, false},
		{"not linearizable", outcome{faults: 1, result: porcupine.Illegal, checked: 5, cover: covered}, true, true},
		{"inconclusive", outcome{faults: 1, result: porcupine.Unknown, checked: 5, cover: covered}, false, false},
		{"a write lost", outcome{faults: 1, result: porcupine.Ok, checked: 5, lost: 1, cover: covered}, true, true},
		{"read-back failed", outcome{faults: 1, result: porcupine.Ok, checked: 2, readErr: errors.New("timeout"), cover: covered}, true, true},
		{"no unique write acknowledged", outcome{faults: 1, result: porcupine.Ok, cover: covered}, true, false},
		{"no fault injected", outcome{result: porcupine.Ok, checked: 5, cover: covered}, true, false},
	} {
		if got := len(tc.o.problems()) > 0; got != tc.fail {
			t.Errorf("%s: fails = %v (%q), want %v", tc.name, got, tc.o.problems(), tc.fail)
		}
		if got := tc.o.anomalous(); got != tc.anomaly {
			t.Errorf("%s: anomalous = %v, want %v", tc.name, got, tc.anomaly)
		}
	}
}

// TestCoverageNeedsEachProtocolChecked: a history in which one protocol's
// reads all failed, or its mutations all were refused or ambiguous, passes
// porcupine while checking nothing of that protocol; it must fail. The
// histories go through the recorder, as the workload's do.
func TestCoverageNeedsEachProtocolChecked(t *testing.T) {
	refused := errors.New("UNAVAILABLE not the leader")
	ambiguous := fmt.Errorf("%w: i/o timeout", client.ErrAmbiguous)
	record := func(rec *recorder, id int, in kvInput, out kvOutput, err error) {
		call := rec.begin(&in)
		rec.record(id, call, in, out, err)
	}
	noExpiry := func(rec *recorder) {
		for id, k := range map[int]string{0: "a", respClientBase: "b"} {
			record(rec, id, put(k, "1"), absent, nil)
			record(rec, id, get(k), found("1"), nil)
		}
		for _, o := range append(everyMultiForm(), everyExpiryForm()...) { // multi_test.go, expire_test.go
			record(rec, o.ClientId, o.Input.(kvInput), o.Output.(kvOutput), nil)
		}
	}
	full := func(rec *recorder) {
		noExpiry(rec)
		// A put with a TTL of 1ms, and, once it has run out, a read that
		// finds the key absent: a read that observed an expiry.
		record(rec, 0, ttlPut("t", "e", 1), absent, nil)
		time.Sleep(5 * time.Millisecond) // the TTL's run, not a wait for an event
		record(rec, 0, get("t"), absent, nil)
	}
	for _, tc := range []struct {
		name string
		fill func(rec *recorder)
		fail bool
	}{
		{"both protocols read and write", full, false},
		{"every RESP read failed", func(rec *recorder) {
			record(rec, 0, put("a", "1"), absent, nil)
			record(rec, 0, get("a"), found("1"), nil)
			record(rec, respClientBase, put("b", "2"), absent, nil)
			record(rec, respClientBase, get("b"), kvOutput{}, refused)
		}, true},
		{"every RESP mutation ambiguous or refused", func(rec *recorder) {
			record(rec, 0, put("a", "1"), absent, nil)
			record(rec, 0, get("a"), found("1"), nil)
			record(rec, respClientBase, put("a", "2"), kvOutput{}, ambiguous)
			record(rec, respClientBase+1, incr("a"), kvOutput{}, refused)
			record(rec, respClientBase, get("a"), found("1"), nil)
		}, true},
		{"no TTL ran out", func(rec *recorder) {
			noExpiry(rec)
			record(rec, 0, ttlPut("t", "e", 60_000), absent, nil)
			record(rec, 0, get("t"), found("e"), nil)
		}, true},
		{"no gRPC read", func(rec *recorder) {
			record(rec, 0, put("a", "1"), absent, nil)
			record(rec, respClientBase, put("b", "2"), absent, nil)
			record(rec, respClientBase, get("b"), found("2"), nil)
		}, true},
	} {
		rec := newRecorder()
		tc.fill(rec)
		ops := rec.history()
		if r := check(ops, time.Minute).result; r != porcupine.Ok {
			t.Fatalf("%s: the history is %v; the test needs one porcupine passes", tc.name, r)
		}
		o := outcome{faults: 1, result: porcupine.Ok, checked: 1, cover: coverageOf(ops), resp: true}
		if got := len(o.problems()) > 0; got != tc.fail {
			t.Errorf("%s: fails = %v (%q), want %v", tc.name, got, o.problems(), tc.fail)
		}
	}
}
