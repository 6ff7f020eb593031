package robustness

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Key expiry in the model. docs/architecture.md ("Key expiry") promises an
// expired key reads as absent on every path from the moment it expires,
// the moment being decided once and replicated. The workload puts some
// values with a short TTL (a group's keys too: groupttl.go; and changes
// expiries without writing values: expire.go), and the model checks that promise against the wall
// clock, which the recorder reads around every operation (CallWall,
// ReturnWall) and the servers read too: all processes run on one machine,
// so they share CLOCK_REALTIME, and a pause (SIGSTOP) stops a process, not
// its clock.
//
// What the servers do (internal/kv, internal/node/backend.go):
//
//   - A PUT's ttl_ms (gRPC Put with client.TTL; RESP SET ... PX, passed on
//     as ttl_ms) becomes E = H + ttl at apply, in whole milliseconds, where
//     H is the highest stamp the shard has applied. Every stamp is a
//     leader's clock read when it proposed, before its entry reached the
//     log, so before the put returned; the put's own stamp is at least its
//     call. So H lies in [call, return] of the put (for an ambiguous put,
//     [call, ∞)).
//   - A mutation judges "live" at the same H of its own command: again in
//     its [call, return].
//   - A read judges it at the serving node's clock read after its barrier:
//     in its [call, return].
//   - Live means now_ms < E_ms, both whole milliseconds: with E = E_ms in
//     ns and t the clock reading in ns, live exactly when t < E. And E_ms =
//     floor(H_ms) + ttl puts E in (H + ttl - 1ms, H + ttl].
//
// So each operation has a check time t in its window [call, return]
// (widened by expirySlack), and a value put with a TTL has an expiry E in
// [call + ttl - 1ms, return + ttl] of its put. Nothing ties t to an
// operation's place in the linearization: a put stamped at H can commit
// after a read that took its barrier earlier but read its clock later,
// saw the old value expired, and then the put reports that value as its
// previous one (it was live at H). So the model must not, once a read saw
// the value expired, treat the key as absent for later operations: it
// keeps the value and what the operations so far say of E.
//
// The state (kvState.Expires) holds E's bounds [ExpLo, ExpHi]. An operation
// with window [c, r] may see the value live if some t in it is before
// some E in the bounds (c < ExpHi), and then E > c (ExpLo rises to c); it
// may see it expired if r >= ExpLo, and then E <= r (ExpHi falls to r).
//
// Soundness (never reject what a correct system can do). Fix the order the
// system applied things in (raft's log, each read at its barrier): it is
// consistent with real time, and each result is the sequential one from
// the state it follows, judged at the operation's own t. Along that order
// the model's bounds are exactly the intersection of the constraints the
// operations so far put on E: the put's window, and one half-line per
// observation, each op choosing its own t (nothing makes them agree). The
// true E satisfies all of them, so every step of that order is accepted,
// and porcupine, trying every order, finds it. Where the model must choose
// between two outcomes it cannot tell apart (an ambiguous SET NX or INCR
// whose t may be before or after E), it joins them: two states that differ
// only in E's bounds become their hull (every check is monotone in the
// bounds, so a wider interval accepts more); any other pair becomes Unsure,
// a state that accepts every output until a put or delete replaces the
// key whatever it held. Both only accept more. And F1 (reduce.go) still
// holds: an ambiguous mutation's window is [call, ∞), so its "expired"
// outcome is always possible, and step accepts an Unknown output in it.

// expirySlack widens every window, for the recorder's clock readings and the
// servers' being different reads of the clock (and a clock step, if any).
const expirySlack = 2 * time.Millisecond

// stepTimed is the single-key step with expiry: step (model.go) on the
// value as live, or as absent, as the op's window allows against s's
// expiry bounds.
func stepTimed(s kvState, in kvInput, out kvOutput) (bool, interface{}) {
	ok, next := timedStep(s, in, out)
	return ok, next
}

func timedStep(s kvState, in kvInput, out kvOutput) (bool, kvState) {
	if s.Unsure {
		return true, afterUnsure(in, out)
	}
	c, r := window(in, out)
	if !s.Expires {
		return stepView(s, s, in, out, c, r)
	}
	live := kvState{Exists: true, Value: s.Value}
	okLive, nextLive := false, s
	if c < s.ExpHi {
		seen := s
		seen.ExpLo = max(s.ExpLo, c) // seen live at some t >= c: E > c
		okLive, nextLive = stepView(live, seen, in, out, c, r)
	}
	okGone, nextGone := false, s
	if r >= s.ExpLo {
		seen := s
		seen.ExpHi = min(s.ExpHi, r) // seen expired at some t <= r: E <= r
		okGone, nextGone = stepView(kvState{}, seen, in, out, c, r)
	}
	switch {
	case okLive && okGone:
		return true, join(nextLive, nextGone)
	case okLive:
		return true, nextLive
	case okGone:
		return true, nextGone
	}
	return false, s
}

// stepView steps the key as the op saw it (view: the value live, or
// absent) and returns the model's next state: an expire by stepExpire
// (expire.go), which needs seen's expiry, anything else by step and settle.
func stepView(view, seen kvState, in kvInput, out kvOutput, c, r int64) (bool, kvState) {
	if in.Kind == opExpire {
		return stepExpire(view, seen, in, out, c, r)
	}
	ok, next := step(view, in, out)
	return ok, settle(view, seen, next.(kvState), in, c, r)
}

// settle turns step's next state from view (the key as the op saw it) into
// the model's: an op that left the key as it was leaves seen (the stored
// value and what this op says of its expiry); a put sets its own expiry,
// or with KeepTTL keeps the live value's (a value it found absent had
// none); an INCR of a live value keeps its expiry; anything else (a
// delete, a swap, an INCR from absent) leaves a value without one.
func settle(view, seen, next kvState, in kvInput, c, r int64) kvState {
	switch {
	case in.Kind == opPut && in.KeepTTL:
		if view.Exists && seen.Expires {
			next.Expires, next.ExpLo, next.ExpHi = true, seen.ExpLo, seen.ExpHi
		}
		return next
	case in.Kind == opPut:
		return withTTL(next, in.TTLMs, c, r)
	case next == view && in.Kind != opDelete:
		return seen
	case in.Kind == opIncr && view.Exists && seen.Expires:
		next.Expires, next.ExpLo, next.ExpHi = true, seen.ExpLo, seen.ExpHi
	}
	return next
}

// withTTL gives the value a put of window [c, r] stored its expiry: none
// without a TTL (a put clears any: gRPC Put without keep_ttl, Redis SET),
// else E in [c + ttl - 1ms, r + ttl].
func withTTL(s kvState, ttlMs, c, r int64) kvState {
	if ttlMs <= 0 {
		return s
	}
	ttl := ttlMs * int64(time.Millisecond)
	s.Expires, s.ExpLo, s.ExpHi = true, c+ttl-int64(time.Millisecond), r
	if r != math.MaxInt64 {
		s.ExpHi = r + ttl
	}
	return s
}

// window is the op's [call, return] on the wall clock, widened by the
// slack; an ambiguous op (or one recorded without a return time) never
// returned: [call, ∞).
func window(in kvInput, out kvOutput) (c, r int64) {
	c = in.CallWall - int64(expirySlack)
	if out.Unknown || out.ReturnWall == 0 {
		return c, math.MaxInt64
	}
	return c, out.ReturnWall + int64(expirySlack)
}

// join is a state that accepts whatever either a or b accepts: one of
// them if equal, their hull if they differ only in the expiry bounds, else
// Unsure.
func join(a, b kvState) kvState {
	switch {
	case a == b:
		return a
	case a.Expires && b.Expires && a.Exists == b.Exists && a.Value == b.Value && !a.Unsure && !b.Unsure:
		a.ExpLo, a.ExpHi = min(a.ExpLo, b.ExpLo), max(a.ExpHi, b.ExpHi)
		return a
	}
	return kvState{Unsure: true}
}

// afterUnsure is the state after an op the Unsure state accepted whatever
// it answered: what a put, a delete or an answered swap leaves, whatever
// the key held; else still Unsure (so after an expire, and after a put
// that keeps an expiry the model does not know, KEEPTTL).
func afterUnsure(in kvInput, out kvOutput) kvState {
	c, r := window(in, out)
	switch {
	case in.Kind == opPut && !in.KeepTTL:
		return withTTL(kvState{Exists: true, Value: in.Value}, in.TTLMs, c, r)
	case in.Kind == opDelete:
		return kvState{}
	case in.Kind == opCAS && !out.Unknown && out.Ok:
		return kvState{Exists: true, Value: in.Value}
	}
	return kvState{Unsure: true}
}

func describeState(s kvState) string {
	switch {
	case s.Unsure:
		return "(unsure: an ambiguous op met a value that may have expired)"
	case !s.Exists:
		return "(absent)"
	case s.Expires:
		return fmt.Sprintf("%q expiring in [%s, %s]", s.Value, wallString(s.ExpLo), wallString(s.ExpHi))
	}
	return fmt.Sprintf("%q", s.Value)
}

func wallString(ns int64) string {
	if ns == math.MaxInt64 {
		return "∞"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}

// expiryCounts counts the history's answered puts with a TTL, and its reads
// that certainly observed an expiry: an answered get that found the key
// absent where the key's last mutation before it was an answered put with
// a TTL, or an expire that says it gave the live key one (setsExpiry),
// which returned before the read was called, and no other mutation
// (answered or ambiguous) may have come between (none was called before the
// read returned that had not returned before the put was called). Nothing
// but the expiry can explain such a read; a history with none never saw
// a TTL run out, and checks nothing of it.
func expiryCounts(ops []porcupine.Operation) (ttlPuts, expiredReads int) {
	muts := map[string][]porcupine.Operation{}
	var reads []porcupine.Operation
	for _, o := range ops {
		in, out := o.Input.(kvInput), o.Output.(kvOutput)
		switch {
		case len(in.Keys) > 0:
			for _, k := range in.Keys {
				if in.Kind != opMGet {
					muts[k] = append(muts[k], o)
				}
			}
		case in.Kind == opGet:
			if !out.Ok {
				reads = append(reads, o)
			}
		default:
			muts[in.Key] = append(muts[in.Key], o)
			if in.Kind == opPut && in.TTLMs > 0 && !out.Unknown {
				ttlPuts++
			}
		}
	}
	byKey := map[string]lastMutations{}
	for k, m := range muts {
		byKey[k] = newLastMutations(m)
	}
	for _, r := range reads {
		if p, ok := byKey[r.Input.(kvInput).Key].alone(r.Return); ok && p.Return < r.Call {
			if setsExpiry(p.Input.(kvInput), p.Output.(kvOutput)) {
				expiredReads++
			}
		}
	}
	return ttlPuts, expiredReads
}

// lastMutations are one key's mutations by call time, with, for each, the
// latest return of those called before it.
type lastMutations struct {
	ops          []porcupine.Operation
	maxRetBefore []int64
}

func newLastMutations(ops []porcupine.Operation) lastMutations {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	m := lastMutations{ops: ops, maxRetBefore: make([]int64, len(ops))}
	latest := int64(math.MinInt64)
	for i, o := range ops {
		m.maxRetBefore[i] = latest
		latest = max(latest, o.Return)
	}
	return m
}

// alone returns the last mutation called before t, if every mutation called
// before it returned before it was called: then it is the key's last
// mutation in every linearization of an op that ended at t.
func (m lastMutations) alone(t int64) (porcupine.Operation, bool) {
	i, _ := slices.BinarySearchFunc(m.ops, t, func(o porcupine.Operation, t int64) int { return cmp.Compare(o.Call, t) })
	if i == 0 {
		return porcupine.Operation{}, false
	}
	p := m.ops[i-1]
	return p, m.maxRetBefore[i-1] < p.Call
}

// setsExpiry reports whether an answered mutation certainly left the key
// with a value and an expiry in the future: a put with a TTL, or an expire
// with a TTL that changed the key (a GETEX PX that found it did).
func setsExpiry(in kvInput, out kvOutput) bool {
	switch {
	case out.Unknown || in.TTLMs <= 0:
		return false
	case in.Kind == opPut:
		return true
	case in.Kind != opExpire || in.Persist:
		return false
	case in.Reply == replyBefore:
		return out.Exists
	}
	return out.Ok
}
