package robustness

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Reductions of one key's history that let porcupine settle it quickly.
//
// An ambiguous mutation (output Unknown, recorded with return time
// math.MaxInt64) is what makes porcupine's search explode: it may be
// linearized at any point after its call, so a search that must show some
// prefix impossible tries it at every point, for every subset of them. A key
// with forty of them outlasts any timeout.
//
// Two facts about the model (model.go) carry every proof below:
//
//	(F1) step accepts a mutation whose output is Unknown in every state:
//	     an ambiguous mutation is never illegal, wherever it is placed.
//	(F2) an operation whose return time is at or after every call in the
//	     history (a "removable" one) has no operation that must come after
//	     it in real time, so it may be linearized last.
//
// Lemma A (the "at the end" lemma). Let R be any set of removable ambiguous
// operations of H. If H\R is linearizable, so is H. Proof: take a
// linearization L of H\R and append R's operations, in any order. Real
// time: each appended op a must follow every op b with b.Return < a.Call,
// and does (it is after all of L); no op must follow a (F2), so nothing in
// L is misplaced, nor is any order among R's. Legality: L's states are
// untouched, and each appended op is legal in whatever state it meets (F1).
// So H is linearizable.
//
// Lemma A makes any subset a sound first try: a pass of H\R is a pass of H,
// and a failure of H\R says nothing (the check goes on to a bigger subset,
// and in the end to H itself). Only porcupine's Illegal on the full history
// (less the operations of Lemma B, which is exact) reports a violation.
//
// Lemma B (the tail). Let T be the removable ambiguous operations whose call
// is after the return of every operation of H that is not removable and
// ambiguous (every answered operation, on this key). H is linearizable if and
// only if H\T is. "If" is Lemma A. "Only if": take a linearization L of H.
// Every answered op returned before each T op was called, so precedes it in
// L: from L's first T op on, L holds only removable ambiguous ops. Cut L
// there and append the removable ambiguous ops of H\T that were cut off. The
// prefix is a valid run with all of H's answered ops; the appended ops are
// legal anywhere (F1) and may come last (F2). That is a linearization of
// H\T. So T can be dropped even from the check whose Illegal counts.

// checkStage is how much of a key's history its check needed.
type checkStage int

const (
	// stageWithoutAmbiguous: linearizable with every removable ambiguous
	// mutation left out (Lemma A).
	stageWithoutAmbiguous checkStage = iota
	// stageObserved: linearizable with only the ambiguous mutations whose
	// effect some answered operation may have seen put back (Lemma A).
	stageObserved
	// stageFull: the whole history (less its tail, Lemma B) was checked.
	stageFull
)

var stageNames = [...]string{
	stageWithoutAmbiguous: "without ambiguous",
	stageObserved:         "with observed ambiguous",
	stageFull:             "full",
}

func (s checkStage) String() string { return stageNames[s] }

// removable reports whether op is an ambiguous mutation that may be
// linearized after every other operation of its history: its output is
// unknown, it is of a kind F1 was shown for (step judges a get by its output
// alone; a kind added later is not removable until its step is checked: for
// the expire kind expire.go shows it and
// TestAmbiguousMutationsLegalInTimedStates checks it; a single-key kind on a
// group's member is stepped as on any key, by timedStep; the multi-key kinds
// are never removable), and it returns no earlier than maxCall, the
// history's last call.
func removable(op porcupine.Operation, maxCall int64) bool {
	switch op.Input.(kvInput).Kind {
	case opPut, opDelete, opCAS, opIncr, opExpire:
		return op.Output.(kvOutput).Unknown && op.Return >= maxCall
	}
	return false
}

func lastCall(ops []porcupine.Operation) int64 {
	m := int64(math.MinInt64)
	for _, o := range ops {
		m = max(m, o.Call)
	}
	return m
}

// withoutTail drops Lemma B's T from ops (one key's history) and says how
// many it dropped: the result is linearizable exactly when ops is.
func withoutTail(ops []porcupine.Operation) ([]porcupine.Operation, int) {
	maxCall := lastCall(ops)
	lastAnswer := int64(math.MinInt64)
	for _, o := range ops {
		if !removable(o, maxCall) {
			lastAnswer = max(lastAnswer, o.Return)
		}
	}
	return keepIf(ops, func(o porcupine.Operation) bool {
		return !removable(o, maxCall) || o.Call <= lastAnswer
	})
}

// withoutAmbiguous drops every removable ambiguous operation: a pass of
// the result is a pass of ops (Lemma A).
func withoutAmbiguous(ops []porcupine.Operation) []porcupine.Operation {
	maxCall := lastCall(ops)
	out, _ := keepIf(ops, func(o porcupine.Operation) bool { return !removable(o, maxCall) })
	return out
}

// withObserved drops the removable ambiguous operations whose effect no
// answered operation can have seen, and keeps the rest: a pass of the result
// is a pass of ops (Lemma A, whatever is dropped), so "seen" only decides
// how often this stage settles a legal history, never whether a verdict is
// right. A put's or CAS's value is unique to it, so it was seen if some
// answer shows that value. An INCR's effect is an integer, so it may have
// been seen if some answer shows an integer. A DEL's effect (absence) is
// what many answers show for other reasons: every ambiguous DEL is kept,
// and so is every ambiguous expire (its effect, an expiry, shows only as a
// later absence).
func withObserved(ops []porcupine.Operation) []porcupine.Operation {
	maxCall := lastCall(ops)
	seen := map[string]bool{}
	sawInteger := false
	for _, o := range ops {
		if removable(o, maxCall) {
			continue
		}
		if v, ok := shownValue(o.Input.(kvInput), o.Output.(kvOutput)); ok {
			seen[v] = true
			if _, err := strconv.ParseInt(v, 10, 64); err == nil {
				sawInteger = true
			}
		}
	}
	out, _ := keepIf(ops, func(o porcupine.Operation) bool {
		if !removable(o, maxCall) {
			return true
		}
		switch in := o.Input.(kvInput); in.Kind {
		case opPut, opCAS:
			return seen[in.Value]
		case opIncr:
			return sawInteger
		}
		return true
	})
	return out
}

// shownValue is the value an answered operation's output shows the key
// held (before it, or after it for INCR).
func shownValue(in kvInput, out kvOutput) (string, bool) {
	switch in.Kind {
	case opGet, opIncr:
		return out.Value, out.Ok
	case opPut:
		return out.Value, out.Ok && !in.Blind
	case opCAS:
		return out.Value, out.Exists
	case opExpire:
		return out.Value, out.Exists && in.Reply != replyChanged
	}
	return "", false
}

// keepIf returns the operations of ops that keep accepts, in order, and how
// many it left out.
func keepIf(ops []porcupine.Operation, keep func(porcupine.Operation) bool) ([]porcupine.Operation, int) {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out, len(ops) - len(out)
}

// keyVerdict is the check of one key's history.
type keyVerdict struct {
	key    string
	result porcupine.CheckResult
	stage  checkStage // the stage that settled it (stageFull for Illegal and Unknown)
	ops    int        // operations on the key
	tail   int        // of them, ambiguous ones dropped by Lemma B
	// info is porcupine's account of the full stage, for the
	// visualisation; hasInfo says whether the key reached it.
	info    porcupine.LinearizationInfo
	hasInfo bool
}

// verdict is the checker's judgement of one history: Illegal if any key's
// is, else Unknown if any key's is, else Ok.
type verdict struct {
	result porcupine.CheckResult
	keys   []keyVerdict
}

// stage is the furthest stage any key of a linearizable history needed.
func (v verdict) stage() checkStage {
	s := stageWithoutAmbiguous
	for _, k := range v.keys {
		s = max(s, k.stage)
	}
	return s
}

// check judges ops key by key (linearizability is compositional: a history
// is linearizable exactly when each key's is), all keys at once, each
// within timeout of the start.
func check(ops []porcupine.Operation, timeout time.Duration) verdict {
	deadline := time.Now().Add(timeout)
	parts := kvModel.Partition(ops)
	keys := make([]keyVerdict, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); keys[i] = checkKey(p, timeout, deadline) }()
	}
	wg.Wait()
	v := verdict{result: porcupine.Ok, keys: keys}
	for _, k := range keys {
		switch {
		case k.result == porcupine.Illegal:
			v.result = porcupine.Illegal
		case k.result == porcupine.Unknown && v.result == porcupine.Ok:
			v.result = porcupine.Unknown
		}
	}
	return v
}

// checkKey checks one key's history in stages, each a smaller history
// whose pass is a pass of the whole (Lemma A): first without its ambiguous
// mutations, then with those whose effect was seen, and only then the whole
// (less its tail, Lemma B). Each of the first two may take an eighth of
// timeout; the whole gets what is left until deadline. Only the whole can
// find the key Illegal.
func checkKey(ops []porcupine.Operation, timeout time.Duration, deadline time.Time) keyVerdict {
	full, tail := withoutTail(ops)
	kv := keyVerdict{key: partitionOf(ops[0].Input.(kvInput)), ops: len(ops), tail: tail}
	tries := []struct {
		stage checkStage
		ops   []porcupine.Operation
	}{
		{stageWithoutAmbiguous, withoutAmbiguous(full)},
		{stageObserved, withObserved(full)},
	}
	tried, settles := -1, stageFull
	for _, try := range tries {
		// A stage that holds no fewer operations than the whole, or no
		// more than the stage before, would only repeat a check; the
		// whole's pass is its pass (a key with no ambiguous mutation
		// passes "without ambiguous").
		if len(try.ops) == len(full) {
			settles = min(settles, try.stage)
			continue
		}
		if len(try.ops) == tried {
			continue
		}
		tried = len(try.ops)
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if porcupine.CheckOperationsTimeout(kvModel, try.ops, min(timeout/8, left)) == porcupine.Ok {
			kv.result, kv.stage = porcupine.Ok, try.stage
			return kv
		}
	}
	kv.stage, kv.result = stageFull, porcupine.Unknown
	// porcupine reads a timeout of 0 as none: never pass it one.
	if left := time.Until(deadline); left > 0 {
		kv.result, kv.info = porcupine.CheckOperationsVerbose(kvModel, full, left)
		kv.hasInfo = true
	}
	if kv.result == porcupine.Ok {
		kv.stage = settles
	}
	return kv
}
