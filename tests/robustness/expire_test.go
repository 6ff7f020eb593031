package robustness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/concord-kv/concord/api/concordpb"
)

func pexpire(k string, ttlMs int64, cond concordpb.Condition) kvInput {
	return kvInput{Kind: opExpire, Key: k, TTLMs: ttlMs, Cond: cond}
}

func persist(k string) kvInput { return kvInput{Kind: opExpire, Key: k, Persist: true} }

func getex(k string, ttlMs int64) kvInput {
	return kvInput{Kind: opExpire, Key: k, TTLMs: ttlMs, Persist: ttlMs == 0, Reply: replyBefore}
}

func keepPut(k, v string) kvInput { return kvInput{Kind: opPut, Key: k, Value: v, KeepTTL: true} }

func changed(ok bool) kvOutput { return kvOutput{Ok: ok} }

var (
	condNone = concordpb.Condition_CONDITION_NONE
	condNX   = concordpb.Condition_CONDITION_NX
	condXX   = concordpb.Condition_CONDITION_XX
	condGT   = concordpb.Condition_CONDITION_GT
	condLT   = concordpb.Condition_CONDITION_LT
)

// TestModelJudgesExpireCommands: the expiry commands change the key's
// expiry as the state machine does (expire.go), against the wall clock: an
// expire of a missing or expired key answers 0 and changes nothing,
// PERSIST removes the expiry, a time in the past deletes, NX/XX/GT/LT
// hold, GETEX answers the value before, SET KEEPTTL keeps a live value's
// expiry. The put p expires in [97, 112] ms (its window and the slack).
func TestModelJudgesExpireCommands(t *testing.T) {
	p := timed(0, 0, 10, ttlPut("a", "1", 100), absent)
	plain := timed(0, 0, 10, put("a", "1"), absent)
	unknown := kvOutput{Unknown: true}
	for _, tc := range []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"PEXPIRE of a missing key answers 0", true, []porcupine.Operation{
			timed(1, 0, 10, pexpire("a", 50, condNone), changed(false)), timed(1, 500, 510, get("a"), absent),
		}},
		{"PEXPIRE of a missing key answers 1", false, []porcupine.Operation{
			timed(1, 0, 10, pexpire("a", 50, condNone), changed(true)),
		}},
		{"PEXPIRE of an expired key answers 0", true, []porcupine.Operation{
			p, timed(1, 300, 310, pexpire("a", 1000, condNone), changed(false)), timed(1, 500, 510, get("a"), absent),
		}},
		{"PEXPIRE of an expired key answers 1", false, []porcupine.Operation{
			p, timed(1, 300, 310, pexpire("a", 1000, condNone), changed(true)),
		}},
		{"PEXPIRE of an expired key brings it back", false, []porcupine.Operation{
			p, timed(1, 300, 310, pexpire("a", 1000, condNone), changed(false)), timed(1, 500, 510, get("a"), found("1")),
		}},
		{"PEXPIRE extends the expiry", true, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 1000, condNone), changed(true)),
			timed(1, 500, 510, get("a"), found("1")), timed(1, 1100, 1110, get("a"), absent),
		}},
		{"PEXPIRE's expiry is held to its window", false, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 1000, condNone), changed(true)), timed(1, 1100, 1110, get("a"), found("1")),
		}},
		{"PEXPIRE gives a key without one an expiry", false, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 5, condNone), changed(true)), timed(1, 200, 210, get("a"), found("1")),
		}},
		{"EXPIRE in the past deletes", true, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 0, condNone), changed(true)), timed(1, 40, 50, get("a"), absent),
		}},
		{"EXPIRE in the past that left the key", false, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 0, condNone), changed(true)), timed(1, 40, 50, get("a"), found("1")),
		}},
		{"PERSIST removes the expiry", true, []porcupine.Operation{
			p, timed(1, 20, 30, persist("a"), changed(true)), timed(1, 500, 510, get("a"), found("1")),
		}},
		{"PERSIST that left the expiry", false, []porcupine.Operation{
			p, timed(1, 20, 30, persist("a"), changed(true)), timed(1, 500, 510, get("a"), absent),
		}},
		{"PERSIST of a key without expiry answers 1", false, []porcupine.Operation{
			plain, timed(1, 20, 30, persist("a"), changed(true)),
		}},
		{"PERSIST of an expired key answers 1", false, []porcupine.Operation{
			p, timed(1, 300, 310, persist("a"), changed(true)),
		}},
		{"NX on a key with an expiry answers 1", false, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 1000, condNX), changed(true)),
		}},
		{"NX on a key without one sets it", true, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 5, condNX), changed(true)), timed(1, 200, 210, get("a"), absent),
		}},
		{"XX on a key without an expiry answers 1", false, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 5, condXX), changed(true)),
		}},
		{"GT later answers 0", false, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 1000, condGT), changed(false)),
		}},
		{"GT later answers 1", true, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 1000, condGT), changed(true)), timed(1, 500, 510, get("a"), found("1")),
		}},
		{"GT sooner answers 1", false, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 5, condGT), changed(true)),
		}},
		{"GT on a key without an expiry answers 1", false, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 1000, condGT), changed(true)),
		}},
		{"LT sooner answers 0", false, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 5, condLT), changed(false)),
		}},
		{"LT later answers 1", false, []porcupine.Operation{
			p, timed(1, 20, 30, pexpire("a", 1000, condLT), changed(true)),
		}},
		{"LT on a key without an expiry sets it", true, []porcupine.Operation{
			plain, timed(1, 20, 30, pexpire("a", 5, condLT), changed(true)), timed(1, 200, 210, get("a"), absent),
		}},
		{"an ambiguous GT close to the expiry, then either read", true, []porcupine.Operation{
			p, timed(1, 20, 0, pexpire("a", 80, condGT), unknown),
			timed(2, 105, 106, get("a"), found("1")), timed(2, 200, 210, get("a"), absent),
		}},
		{"GETEX PX answers the value and sets the expiry", true, []porcupine.Operation{
			plain, timed(1, 20, 30, getex("a", 5), kvOutput{Exists: true, Value: "1"}), timed(1, 200, 210, get("a"), absent),
		}},
		{"GETEX of an expired key answers its value", false, []porcupine.Operation{
			p, timed(1, 300, 310, getex("a", 1000), kvOutput{Exists: true, Value: "1"}),
		}},
		{"GETEX PERSIST removes the expiry", true, []porcupine.Operation{
			p, timed(1, 20, 30, getex("a", 0), kvOutput{Exists: true, Value: "1"}), timed(1, 500, 510, get("a"), found("1")),
		}},
		{"GETEX PERSIST that left the expiry", false, []porcupine.Operation{
			p, timed(1, 20, 30, getex("a", 0), kvOutput{Exists: true, Value: "1"}), timed(1, 500, 510, get("a"), absent),
		}},
		{"SET KEEPTTL keeps a live value's expiry", true, []porcupine.Operation{
			p, timed(1, 20, 30, keepPut("a", "2"), found("1")), timed(1, 500, 510, get("a"), absent),
		}},
		{"SET KEEPTTL that dropped the expiry", false, []porcupine.Operation{
			p, timed(1, 20, 30, keepPut("a", "2"), found("1")), timed(1, 500, 510, get("a"), found("2")),
		}},
		{"SET KEEPTTL of an expired key puts one without", true, []porcupine.Operation{
			p, timed(1, 300, 310, keepPut("a", "2"), absent), timed(1, 5000, 5010, get("a"), found("2")),
		}},
		{"SET KEEPTTL of an expired key kept its old expiry", false, []porcupine.Operation{
			p, timed(1, 300, 310, keepPut("a", "2"), absent), timed(1, 5000, 5010, get("a"), absent),
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

// everyExpiryForm is one answered expiry command of each form each
// protocol sends, with its client id, each on a key of its own that it
// finds absent: a history porcupine accepts.
func everyExpiryForm() []porcupine.Operation {
	var ops []porcupine.Operation
	add := func(id int, in kvInput, out kvOutput) {
		n := int64(len(ops))
		in.Key = fmt.Sprintf("x%d", n)
		ops = append(ops, timed(id, 10*n, 10*n+5, in, out))
	}
	grpcReply := func(in kvInput) kvInput { in.Reply = replyBoth; return in }
	add(0, grpcReply(pexpire("", 5, condGT)), changed(false))
	add(0, grpcReply(persist("")), changed(false))
	add(0, grpcReply(pexpire("", 0, condNone)), changed(false))
	add(0, keepPut("", "1"), absent)
	r := respClientBase
	for _, c := range expireConds {
		add(r, pexpire("", 5, c), changed(false))
	}
	add(r, kvInput{Kind: opExpire, TTLMs: 1000, Seconds: true}, changed(false))
	add(r, persist(""), changed(false))
	add(r, getex("", 5), absent)
	add(r, getex("", 0), absent)
	add(r, kvInput{Kind: opPut, Value: "1", KeepTTL: true, Blind: true}, kvOutput{})
	add(r, keepPut("", "1"), absent)
	return ops
}

// TestCoverageNeedsEveryExpiryForm: a history in which one form of expiry
// command was never answered (missing, or only ambiguous) checks nothing
// of it; it must fail, naming the form.
func TestCoverageNeedsEveryExpiryForm(t *testing.T) {
	all := everyExpiryForm()
	if r := check(all, time.Minute).result; r != porcupine.Ok {
		t.Fatalf("the history of every form is %v; the test needs one porcupine passes", r)
	}
	full := fullCoverage()
	if gaps := full.gaps(true); len(gaps) != 0 {
		t.Fatalf("every form answered, yet: %q", gaps)
	}
	for i, o := range all {
		p := overGRPC
		if o.ClientId >= respClientBase {
			p = overRESP
		}
		form := expiryFormOf(o.Input.(kvInput), p)
		for _, tc := range []struct {
			how  string
			hist []porcupine.Operation
		}{
			{"missing", append(append([]porcupine.Operation(nil), all[:i]...), all[i+1:]...)},
			{"ambiguous", withOutput(all, i, kvOutput{Unknown: true})},
		} {
			c := full
			c.expiry = coverageOf(tc.hist).expiry
			gaps := c.gaps(true)
			want := fmt.Sprintf("no %s %s was answered", protocolNames[p], form)
			if len(gaps) != 1 || !strings.Contains(gaps[0], want) {
				t.Errorf("%s %s %s: gaps %q, want one saying %q", protocolNames[p], form, tc.how, gaps, want)
			}
		}
	}
}

// TestRESPExpireArgs: each RESP form goes out as the command it names.
func TestRESPExpireArgs(t *testing.T) {
	for _, tc := range []struct {
		in   kvInput
		want string
	}{
		{pexpire("k", 7, condNone), "pexpire k 7"},
		{pexpire("k", 7, condGT), "pexpire k 7 GT"},
		{kvInput{Kind: opExpire, Key: "k", TTLMs: 0, Seconds: true}, "expire k 0"},
		{kvInput{Kind: opExpire, Key: "k", TTLMs: 1000, Seconds: true}, "expire k 1"},
		{persist("k"), "persist k"},
		{getex("k", 9), "getex k px 9"},
		{getex("k", 0), "getex k persist"},
	} {
		if got := strings.TrimSuffix(fmt.Sprintln(respExpireArgs(tc.in)...), "\n"); got != tc.want {
			t.Errorf("%s: sent %q, want %q", describe(tc.in, kvOutput{}), got, tc.want)
		}
	}
}

// TestModelJudgesGroupExpiry: a multi-key write of puts with a TTL gives
// each key of the group an expiry held to the write's window, which reads
// of the group (MGET, a member's GET) and its other multi-key operations
// judge as an ungrouped key's reads do; a member's expiry commands act on
// it alone. The write w expires in [97, 112] ms.
func TestModelJudgesGroupExpiry(t *testing.T) {
	a, b := "{g0}a", "{g0}b"
	ttlMSet := func(ttl int64) kvInput {
		in := mset(a, b)
		in.TTLMs = ttl
		return in
	}
	w := timed(0, 0, 10, ttlMSet(100), kvOutput{})
	none, unknown := kvState{}, kvOutput{Unknown: true}
	msetnx := kvInput{Kind: opMSetNX, Keys: []string{a, b}, Values: []string{"2@" + a, "2@" + b}}
	for _, tc := range []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"MGET after the window finds both gone", true, []porcupine.Operation{
			w, timed(1, 500, 510, mget(a, b), seen(none, none)),
		}},
		{"MGET after the window still sees one", false, []porcupine.Operation{
			w, timed(1, 500, 510, mget(a, b), seen(has(a), none)),
		}},
		{"MGET before the window finds one gone", false, []porcupine.Operation{
			w, timed(1, 20, 30, mget(a, b), seen(has(a), none)),
		}},
		{"MGET in the window sees both, then both gone", true, []porcupine.Operation{
			w, timed(1, 100, 104, mget(a, b), seen(has(a), has(b))), timed(1, 200, 210, mget(a, b), seen(none, none)),
		}},
		{"a member's GET after the window sees it", false, []porcupine.Operation{
			w, timed(1, 500, 510, get(a), found("1@"+a)),
		}},
		{"an MSET without a TTL clears the expiry", true, []porcupine.Operation{
			w, timed(1, 20, 30, mset(a, b), kvOutput{}), timed(1, 500, 510, mget(a, b), seen(has(a), has(b))),
		}},
		{"MSETNX after the window puts", true, []porcupine.Operation{
			w, timed(1, 300, 310, msetnx, kvOutput{Ok: true}),
		}},
		{"MSETNX after the window refused", false, []porcupine.Operation{
			w, timed(1, 300, 310, msetnx, kvOutput{Ok: false}),
		}},
		{"DEL after the window counts them", false, []porcupine.Operation{
			w, timed(1, 300, 310, kvInput{Kind: opMDel, Keys: []string{a, b}, CountOnly: true}, kvOutput{N: 2}),
		}},
		{"DEL after the window counts none", true, []porcupine.Operation{
			w, timed(1, 300, 310, kvInput{Kind: opMDel, Keys: []string{a, b}, CountOnly: true}, kvOutput{N: 0}),
		}},
		{"PERSIST of one member keeps it alone", true, []porcupine.Operation{
			w, timed(1, 20, 30, persist(a), changed(true)), timed(1, 500, 510, mget(a, b), seen(has(a), none)),
		}},
		{"PERSIST of one member kept the other too", false, []porcupine.Operation{
			w, timed(1, 20, 30, persist(a), changed(true)), timed(1, 500, 510, mget(a, b), seen(has(a), has(b))),
		}},
		{"an ambiguous MSETNX in the window: its values", true, []porcupine.Operation{
			w, timed(1, 95, 0, msetnx, unknown), timed(1, 500, 510, get(b), found("2@"+b)),
		}},
		{"an ambiguous MSETNX in the window: nothing", true, []porcupine.Operation{
			w, timed(1, 95, 0, msetnx, unknown), timed(1, 500, 510, mget(a, b), seen(none, none)),
		}},
		{"MSETNX before the window puts", false, []porcupine.Operation{
			w, timed(1, 20, 30, msetnx, kvOutput{Ok: true}),
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
