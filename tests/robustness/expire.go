package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
)

// The expiry commands: operations that change a key's expiry without
// writing its value (opExpire), and puts that keep it (KeepTTL). What the
// shard's state machine does (internal/kv, expire and put):
//
//   - EXPIRE of an absent (or expired) key changes nothing and answers
//     "not changed" (RESP 0, GETEX null).
//   - PERSIST removes the expiry: changed exactly when the key had one.
//   - A TTL places E' = H + ttl, H the command's stamp, as a put's does
//     (ttl.go): E' in [call + ttl - 1ms, return + ttl]. A time not in the
//     future (EXPIRE k 0, a gRPC op's expire_at_unix_ms 1) deletes a key it
//     changes.
//   - NX: only a key without an expiry; XX: only one with; GT: only a later
//     expiry than the key's (none counts as infinitely late, so never);
//     LT: only an earlier one (so always, on a key without one).
//   - A put with keep_ttl keeps the expiry of the value it replaces if
//     that value was live; an absent (expired) key had none.
//
// GT and LT compare E' with E, both known by bounds only: where both
// answers are possible the model accepts either and learns from it (GT
// changed: E' > E > ExpLo; GT unchanged: E >= E' >= E'lo; LT likewise), and
// an ambiguous one joins the two next states (ttl.go, join). Soundness as in
// ttl.go: each bound the model keeps is implied by the true E and E', and
// join only accepts more. F1 (reduce.go) holds: an ambiguous expire meets
// an absent key (always possible) or a live one where at least one outcome
// exists (stepExpire), so it is accepted in every state.

// expireReply is what an expire's answer holds.
type expireReply int

const (
	replyChanged expireReply = iota // PEXPIRE, EXPIRE, PERSIST: 1 if changed, else 0
	replyBefore                     // GETEX: the value before, or null
	replyBoth                       // a gRPC EXPIRE op: both
)

// expireOutcome is one answer an expire may give, and the state it leaves.
type expireOutcome struct {
	changed bool
	next    kvState
}

// stepExpire steps an expire from view (the key as the op saw it: live, or
// absent) where seen is the stored state with its expiry bounds, and
// returns whether out is one of its answers and the state that answer
// leaves (their join for an ambiguous expire).
func stepExpire(view, seen kvState, in kvInput, out kvOutput, c, r int64) (bool, kvState) {
	if !view.Exists {
		return out.Unknown || expireAnswered(in, out, false, view), seen
	}
	ok, next := false, kvState{}
	for _, o := range expireOutcomes(seen, in, c, r) {
		if !out.Unknown && !expireAnswered(in, out, o.changed, view) {
			continue
		}
		if ok {
			next = join(next, o.next)
		} else {
			ok, next = true, o.next
		}
	}
	return ok, next
}

// expireAnswered reports whether out is the answer of an expire that
// changed the key or not, from state before.
func expireAnswered(in kvInput, out kvOutput, changed bool, before kvState) bool {
	sawBefore := out.Exists == before.Exists && (!before.Exists || out.Value == before.Value)
	switch in.Reply {
	case replyChanged:
		return out.Ok == changed
	case replyBefore:
		return sawBefore
	}
	return out.Ok == changed && sawBefore
}

// expireOutcomes are the outcomes an expire of window [c, r] may have on a
// live key whose stored state, with what is known of its expiry, is seen.
func expireOutcomes(seen kvState, in kvInput, c, r int64) []expireOutcome {
	had := seen.Expires
	plain := kvState{Exists: true, Value: seen.Value}
	unchanged := expireOutcome{false, seen}
	switch {
	case in.Persist:
		if !had {
			return []expireOutcome{unchanged}
		}
		return []expireOutcome{{true, plain}}
	case in.TTLMs <= 0: // a time not in the future: GT never holds, LT always
		allowed := map[concordpb.Condition]bool{concordpb.Condition_CONDITION_NONE: true,
			concordpb.Condition_CONDITION_NX: !had, concordpb.Condition_CONDITION_XX: had,
			concordpb.Condition_CONDITION_LT: true}[in.Cond]
		if !allowed {
			return []expireOutcome{unchanged}
		}
		return []expireOutcome{{true, kvState{}}}
	}
	set := withTTL(plain, in.TTLMs, c, r)
	switch in.Cond {
	case concordpb.Condition_CONDITION_NX:
		had = !had
		fallthrough
	case concordpb.Condition_CONDITION_XX:
		if !had {
			return []expireOutcome{unchanged}
		}
	case concordpb.Condition_CONDITION_GT:
		if !had {
			return []expireOutcome{unchanged}
		}
		return compareOutcomes(seen, set, true)
	case concordpb.Condition_CONDITION_LT:
		if had {
			return compareOutcomes(seen, set, false)
		}
	}
	return []expireOutcome{{true, set}}
}

// compareOutcomes are a GT's (later) or an LT's outcomes on a key whose
// expiry E lies in seen's bounds, the new one E' in set's: changed where
// E' may be later (earlier) than E, and then E' lies beyond E's bound;
// unchanged where it may not be, and then E lies beyond the bound of E'.
func compareOutcomes(seen, set kvState, later bool) []expireOutcome {
	var outs []expireOutcome
	if later {
		if set.ExpHi > seen.ExpLo {
			n := set
			n.ExpLo = max(n.ExpLo, seen.ExpLo)
			outs = append(outs, expireOutcome{true, n})
		}
		if set.ExpLo <= seen.ExpHi {
			k := seen
			k.ExpLo = max(k.ExpLo, set.ExpLo)
			outs = append(outs, expireOutcome{false, k})
		}
		return outs
	}
	if set.ExpLo < seen.ExpHi {
		n := set
		n.ExpHi = min(n.ExpHi, seen.ExpHi)
		outs = append(outs, expireOutcome{true, n})
	}
	if set.ExpHi >= seen.ExpLo {
		k := seen
		k.ExpHi = min(k.ExpHi, set.ExpHi)
		outs = append(outs, expireOutcome{false, k})
	}
	return outs
}

// keepTTLShare is the percentage of single-key puts without a TTL that
// keep the key's instead.
const keepTTLShare = 12

// keepTTL says whether a put without a TTL keeps the key's expiry.
func keepTTL(rng *rand.Rand, ttlMs int64) bool {
	return ttlMs == 0 && rng.IntN(100) < keepTTLShare
}

var expireConds = []concordpb.Condition{concordpb.Condition_CONDITION_NONE, concordpb.Condition_CONDITION_NX,
	concordpb.Condition_CONDITION_XX, concordpb.Condition_CONDITION_GT, concordpb.Condition_CONDITION_LT}

// nextRESPExpire picks a Redis expiry command on k: 50 % PEXPIRE (its
// condition none, NX, XX, GT or LT alike), 10 % EXPIRE of 0 or 1 s (0:
// deletes the key), 15 % PERSIST, 12 % GETEX PX, 13 % GETEX PERSIST.
func nextRESPExpire(rng *rand.Rand, k string) kvInput {
	in := kvInput{Kind: opExpire, Key: k}
	switch p := rng.IntN(100); {
	case p < 50:
		in.TTLMs, in.Cond = ttlMs(rng), expireConds[rng.IntN(len(expireConds))]
	case p < 60:
		in.TTLMs, in.Seconds = 1000*rng.Int64N(2), true
	case p < 75:
		in.Persist = true
	case p < 87:
		in.TTLMs, in.Reply = ttlMs(rng), replyBefore
	default:
		in.Persist, in.Reply = true, replyBefore
	}
	return in
}

// nextGRPCExpire picks a gRPC EXPIRE op on k (a Batch of one op): 60 % a
// TTL under a random condition, 20 % persist, 20 % a time in the past.
func nextGRPCExpire(rng *rand.Rand, k string) kvInput {
	in := kvInput{Kind: opExpire, Key: k, Reply: replyBoth}
	switch p := rng.IntN(100); {
	case p < 60:
		in.TTLMs, in.Cond = ttlMs(rng), expireConds[rng.IntN(len(expireConds))]
	case p < 80:
		in.Persist = true
	}
	return in
}

// expireOp is in as the state machine's op.
func expireOp(in kvInput) *concordpb.Op {
	op := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: []byte(in.Key), Persist: in.Persist}
	if in.Persist {
		return op
	}
	op.Condition, op.TtlMs = in.Cond, in.TTLMs
	if in.TTLMs <= 0 {
		op.TtlMs, op.ExpireAtUnixMs = 0, 1 // the Unix millisecond 1: long past
	}
	return op
}

// doGRPCSingle runs an expire, or a put with keep_ttl (which Put does not
// offer), as a Batch of one op.
func doGRPCSingle(ctx context.Context, c *client.Client, in kvInput) (kvOutput, error) {
	op := expireOp(in)
	if in.Kind == opPut {
		op = &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(in.Key), Value: []byte(in.Value), KeepTtl: true, ReturnPrev: true}
	}
	res, err := c.Batch(ctx, []*concordpb.Op{op})
	if err != nil {
		return kvOutput{}, err
	}
	if len(res) != 1 || res[0].GetError() != concordpb.OpError_OP_ERROR_NONE {
		return kvOutput{}, fmt.Errorf("%w: a batch of one op answered %v", client.ErrAmbiguous, res)
	}
	r := res[0]
	if in.Kind == opPut { // return_prev, no condition: ok is "a previous value existed"
		return kvOutput{Ok: r.GetOk(), Value: string(r.GetValue())}, nil
	}
	return kvOutput{Ok: r.GetOk(), Exists: r.GetExists(), Value: string(r.GetValue())}, nil
}

// respExpireArgs is in as a Redis command.
func respExpireArgs(in kvInput) []interface{} {
	switch {
	case in.Reply == replyBefore && in.Persist:
		return []interface{}{"getex", in.Key, "persist"}
	case in.Reply == replyBefore:
		return []interface{}{"getex", in.Key, "px", in.TTLMs}
	case in.Persist:
		return []interface{}{"persist", in.Key}
	case in.Seconds:
		return []interface{}{"expire", in.Key, in.TTLMs / 1000}
	}
	args := []interface{}{"pexpire", in.Key, in.TTLMs}
	if in.Cond != concordpb.Condition_CONDITION_NONE {
		args = append(args, strings.TrimPrefix(in.Cond.String(), "CONDITION_"))
	}
	return args
}

// doRESPExpire runs an expire as one Redis command; errors are classified
// by the caller (redis.Nil: GETEX of an absent key).
func doRESPExpire(ctx context.Context, node *redis.Client, in kvInput) (kvOutput, error) {
	cmd := node.Do(ctx, respExpireArgs(in)...)
	if in.Reply == replyBefore {
		v, err := cmd.Text()
		return kvOutput{Exists: err == nil, Value: v}, err
	}
	n, err := cmd.Int64()
	return kvOutput{Ok: n == 1}, err
}

// respKeepTTLSet runs SET k v KEEPTTL, with GET unless in is Blind.
func respKeepTTLSet(ctx context.Context, node *redis.Client, in kvInput) (kvOutput, error) {
	args := []interface{}{"set", in.Key, in.Value, "keepttl"}
	if in.Blind {
		return kvOutput{}, node.Do(ctx, args...).Err()
	}
	prev, err := node.Do(ctx, append(args, "get")...).Text() // redis.Nil: none before
	return kvOutput{Ok: err == nil, Value: prev}, err
}

// expiryForms are, per protocol, the forms of expiry command the workload
// sends; a history in which one was never answered checks nothing of it
// and fails (coverage.gaps).
var expiryForms = [2][]string{
	overGRPC: {"EXPIRE op with a TTL", "EXPIRE op with persist", "EXPIRE op in the past", "PUT op with keep_ttl"},
	overRESP: {"PEXPIRE", "PEXPIRE NX", "PEXPIRE XX", "PEXPIRE GT", "PEXPIRE LT", "EXPIRE", "PERSIST",
		"GETEX PX", "GETEX PERSIST", "SET ... KEEPTTL", "SET ... KEEPTTL GET"},
}

// expiryFormOf names in's form in expiryForms, "" for no expiry command.
func expiryFormOf(in kvInput, p int) string {
	switch {
	case in.Kind == opPut && in.KeepTTL && p == overGRPC:
		return "PUT op with keep_ttl"
	case in.Kind == opPut && in.KeepTTL && in.Blind:
		return "SET ... KEEPTTL"
	case in.Kind == opPut && in.KeepTTL:
		return "SET ... KEEPTTL GET"
	case in.Kind != opExpire:
		return ""
	case p == overGRPC && in.Persist:
		return "EXPIRE op with persist"
	case p == overGRPC && in.TTLMs <= 0:
		return "EXPIRE op in the past"
	case p == overGRPC:
		return "EXPIRE op with a TTL"
	case in.Reply == replyBefore && in.Persist:
		return "GETEX PERSIST"
	case in.Reply == replyBefore:
		return "GETEX PX"
	case in.Persist:
		return "PERSIST"
	case in.Seconds:
		return "EXPIRE"
	case in.Cond == concordpb.Condition_CONDITION_NONE:
		return "PEXPIRE"
	}
	return "PEXPIRE " + strings.TrimPrefix(in.Cond.String(), "CONDITION_")
}

// countExpiry counts an answered expiry command by its form.
func (c *coverage) countExpiry(p int, in kvInput, out kvOutput) {
	f := expiryFormOf(in, p)
	if f == "" || out.Unknown {
		return
	}
	if c.expiry[p] == nil {
		c.expiry[p] = map[string]int{}
	}
	c.expiry[p][f]++
}

// expiryGaps says which of protocol p's expiry forms the history has no
// answered one of.
func (c coverage) expiryGaps(p int) []string {
	var why []string
	for _, f := range expiryForms[p] {
		if c.expiry[p][f] == 0 {
			why = append(why, fmt.Sprintf("no %s %s was answered: the history checks nothing of it", protocolNames[p], f))
		}
	}
	return why
}

func describeExpire(in kvInput, out kvOutput) string {
	var b strings.Builder
	switch {
	case in.Persist:
		fmt.Fprintf(&b, "persist(%s)", in.Key)
	case in.TTLMs <= 0:
		fmt.Fprintf(&b, "expire(%s, in the past)", in.Key)
	default:
		fmt.Fprintf(&b, "expire(%s, %dms)", in.Key, in.TTLMs)
	}
	if in.Cond != concordpb.Condition_CONDITION_NONE {
		b.WriteString(" " + strings.TrimPrefix(in.Cond.String(), "CONDITION_"))
	}
	switch {
	case out.Unknown:
		b.WriteString(" → ?")
	case in.Reply == replyChanged:
		b.WriteString(" → changed=" + strconv.FormatBool(out.Ok))
	case in.Reply == replyBefore:
		b.WriteString(" → before=" + stateString(out.Exists, out.Value))
	default:
		fmt.Fprintf(&b, " → changed=%v before=%s", out.Ok, stateString(out.Exists, out.Value))
	}
	return b.String()
}
