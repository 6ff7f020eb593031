package redisapi

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
	"github.com/concord-kv/concord/internal/version"
)

// The key commands' plans. Each checks its arguments as Redis does (same
// error texts), builds the ops of the contract in api/concordpb/kv.proto,
// and renders the results.

func opGet(k []byte) *concordpb.Op { return &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: k} }

// readPlan is the plan of a read of keys. One key (GET, STRLEN, TTL...):
// the plan, its op and the op's slice are one of the connection's one-op
// plans (newOnePlan), since every pipelined read makes one.
func readPlan(c *conn, keys [][]byte, render func(w *resp.Writer, res []*concordpb.OpResult)) *plan {
	if len(keys) == 1 {
		one := c.newOnePlan()
		one.op.Type, one.op.Key = concordpb.OpType_OP_GET, keys[0]
		one.ops[0] = &one.op
		one.p = plan{ops: one.ops[:], read: true, render: render}
		return &one.p
	}
	p := &plan{read: true, render: render, ops: make([]*concordpb.Op, 0, len(keys))}
	for _, k := range keys {
		p.ops = append(p.ops, opGet(k))
	}
	return p
}

// writePlan is the plan of a one-op write; render answers from the op's
// result unless the op failed (plan.answer). The plan and its ops slice are
// one allocation, and no closure wraps render.
func writePlan(op *concordpb.Op, render func(w *resp.Writer, r *concordpb.OpResult)) *plan {
	one := &struct {
		p   plan
		ops [1]*concordpb.Op
	}{}
	one.ops[0] = op
	one.p = plan{ops: one.ops[:], one: render}
	return &one.p
}

// onePlan is a plan of one op built here (a plain SET, a one-key read),
// its op and the op's slice in one: every pipelined SET or GET makes one.
type onePlan struct {
	p   plan
	ops [1]*concordpb.Op
	op  concordpb.Op
}

// onePlanBlock is how many one-op plans a connection allocates at once,
// at least.
const onePlanBlock = 16

// maxOnePlanBlock bounds the one-op plans a connection allocates at once
// (and keeps between pipelines: ~15 KiB).
const maxOnePlanBlock = 64

// newOnePlan returns an empty one-op plan carved from the connection's
// current block of them (nil c: one of its own). One allocation of 16
// plans instead of 16 (planSet's mallocs were 3 % of a Redis node's CPU
// under pipelined SET), or of as many as the pipeline has calls, up to
// maxOnePlanBlock. A block is reused by the next pipeline only when none of
// its plans can be in use (conn.endPipeline); otherwise it lives while any
// of its plans does (a batch cut short by its context may hold the ops).
// Only the connection's goroutine plans, so no lock.
func (c *conn) newOnePlan() *onePlan {
	if c == nil {
		return &onePlan{}
	}
	if len(c.onePlans) == cap(c.onePlans) {
		c.onePlans = make([]onePlan, 0, min(max(onePlanBlock, len(c.calls)), maxOnePlanBlock))
	}
	c.onePlans = c.onePlans[:len(c.onePlans)+1]
	one := &c.onePlans[len(c.onePlans)-1]
	*one = onePlan{} // a reused block holds the last pipeline's
	return one
}

// opError is the Redis error text of an op's failure, "" if none.
func opError(e concordpb.OpError) string {
	switch e {
	case concordpb.OpError_OP_ERROR_NONE:
		return ""
	case concordpb.OpError_OP_ERROR_NOT_INTEGER:
		return string(errNotInt)
	case concordpb.OpError_OP_ERROR_OVERFLOW:
		return string(errOverflow)
	case concordpb.OpError_OP_ERROR_NOT_FLOAT:
		return string(errNotFloat)
	case concordpb.OpError_OP_ERROR_NAN_OR_INFINITY:
		return string(errNaN)
	case concordpb.OpError_OP_ERROR_TOO_LARGE:
		return "ERR string exceeds maximum allowed size (--max-value-bytes)"
	case concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE:
		return errResultTooLarge
	}
	return "ERR operation failed: " + e.String()
}

func bulkOrNull(w *resp.Writer, found bool, v []byte) {
	if !found {
		w.Null()
		return
	}
	w.Bulk(v)
}

func replyOK(w *resp.Writer, _ *concordpb.OpResult) { w.SimpleString("OK") }

// parseInt accepts what Redis's string2ll does: the canonical base-10 form
// of an int64 only (no sign '+', no spaces, no leading zeros, no "-0"), as
// internal/kv parses a stored number.
func parseInt(b []byte) (int64, error) {
	d := b
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	// ParseInt takes a '+' and leading zeros; string2ll neither, nor "-0".
	if len(d) == 0 || d[0] < '0' || d[0] > '9' || (d[0] == '0' && len(b) > 1) {
		return 0, errNotInt
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, errNotInt
	}
	return v, nil
}

// parseFloat accepts what Redis's string2ld does, within a double's range,
// decimal only (as Concord reads numbers below version 7, where this is
// asked): no spaces, no NaN, under kv.MaxLongDoubleText bytes, no '_'
// (which strconv takes between digits and strtold does not), no
// hexadecimal float (strconv took "0x1p3" while "0x10" and a stored one
// were refused), and no number so small that a long double rounds it to
// zero (strtold's underflow, which Redis refuses; kv.ParseLongDouble tells).
func parseFloat(b []byte) (float64, error) {
	s := string(b)
	if s == "" || len(s) >= kv.MaxLongDoubleText || strings.ContainsAny(s, " \t_xX") {
		return 0, errNotFloat
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0, errNotFloat
	}
	if _, ok := kv.ParseLongDouble(b); f == 0 && !ok {
		return 0, errNotFloat
	}
	return f, nil
}

func planGet(c *conn, a [][]byte) (*plan, error) {
	return readPlan(c, a[1:2], func(w *resp.Writer, res []*concordpb.OpResult) {
		bulkOrNull(w, res[0].GetOk(), res[0].GetValue())
	}), nil
}

// expiry is a parsed expiry option: a relative time to live or an
// absolute Unix time, both in milliseconds.
type expiry struct {
	ttlMs, atMs int64
	keep        bool // KEEPTTL
	persist     bool // GETEX PERSIST
}

// parseExpiry parses the amount of an EX/PX/EXAT/PXAT option of command
// as Redis's getExpireMillisecondsOrReply does: a positive number whose
// milliseconds fit an int64 and, for the relative EX and PX, still fit
// once added to now (nowMs, the answering node's clock; the shard's state
// machine places the time itself and refuses what overflows there).
func parseExpiry(opt string, arg []byte, command string, nowMs int64) (expiry, error) {
	v, err := parseInt(arg)
	if err != nil {
		return expiry{}, err
	}
	invalid := replyError("ERR invalid expire time in '" + command + "' command")
	unit := int64(1)
	if opt == "EX" || opt == "EXAT" {
		unit = 1000
	}
	if v <= 0 || v > math.MaxInt64/unit {
		return expiry{}, invalid
	}
	ms := v * unit
	if opt == "EX" || opt == "PX" {
		if ms > math.MaxInt64-nowMs {
			return expiry{}, invalid
		}
		return expiry{ttlMs: ms}, nil
	}
	return expiry{atMs: ms}, nil
}

// stringOptions are SET's options ([NX|XX] [GET] [EX|PX|EXAT|PXAT n |
// KEEPTTL]) or GETEX's ([EX|PX|EXAT|PXAT n | PERSIST]).
type stringOptions struct {
	nx, xx, get, keepTTL, persist bool
	expOpt                        string // EX, PX, EXAT or PXAT; "" if none
	expArg                        []byte // its amount, parsed by parseExpiry
}

// parseStringOptions parses SET's options (set) or GETEX's as Redis 7's
// parseExtendedStringArgumentsOrReply does: an option may be repeated (the
// last amount of a repeated expiry counts), options that conflict are a
// syntax error, and an expiry's amount is checked only once every option
// has parsed (SET k v EX x FOO is a syntax error, SET k v EX x EX 5 sets).
func parseStringOptions(a [][]byte, set bool) (stringOptions, error) {
	var o stringOptions
	for i := 0; i < len(a); i++ {
		opt := strings.ToUpper(string(a[i]))
		timed := o.expOpt != ""
		switch {
		case set && opt == "NX" && !o.xx:
			o.nx = true
		case set && opt == "XX" && !o.nx:
			o.xx = true
		case set && opt == "GET":
			o.get = true
		case set && opt == "KEEPTTL" && !timed:
			o.keepTTL = true
		case !set && opt == "PERSIST" && !timed:
			o.persist = true
		case (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") && !o.keepTTL && !o.persist &&
			(!timed || o.expOpt == opt) && i+1 < len(a):
			o.expOpt, o.expArg = opt, a[i+1]
			i++
		default:
			return o, errSyntax
		}
	}
	return o, nil
}

// putOp is a PUT; it asks for the previous value only where the command
// returns it (SET ... GET, GETSET): otherwise the shard writes blindly,
// reading nothing.
func putOp(k, v []byte, e expiry, cond concordpb.Condition, returnPrev bool) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: k, Value: v, TtlMs: e.ttlMs,
		ExpireAtUnixMs: e.atMs, KeepTtl: e.keep, Condition: cond, ReturnPrev: returnPrev}
}

// planSet: SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL].
// One PUT: a condition, the previous value (GET) and the expiry are all
// decided by the shard's state machine, atomically.
func planSet(c *conn, a [][]byte) (*plan, error) {
	if len(a) == 3 { // SET key value: a blind PUT answered OK, no closure
		sp := c.newOnePlan()
		sp.op.Type, sp.op.Key, sp.op.Value = concordpb.OpType_OP_PUT, a[1], a[2]
		sp.ops[0] = &sp.op
		sp.p = plan{ops: sp.ops[:], one: replyOK, avail: c.available()}
		return &sp.p, nil
	}
	o, err := parseStringOptions(a[3:], true)
	if err != nil {
		return nil, err
	}
	e := expiry{keep: o.keepTTL}
	if o.expOpt != "" {
		if e, err = parseExpiry(o.expOpt, o.expArg, "set", time.Now().UnixMilli()); err != nil {
			return nil, err
		}
	}
	cond := concordpb.Condition_CONDITION_NONE
	switch {
	case o.nx:
		cond = concordpb.Condition_CONDITION_NX
	case o.xx:
		cond = concordpb.Condition_CONDITION_XX
	}
	return writePlan(putOp(a[1], a[2], e, cond, o.get), func(w *resp.Writer, r *concordpb.OpResult) {
		switch {
		case o.get:
			prev := r.GetExists()
			if cond == concordpb.Condition_CONDITION_NONE {
				prev = r.GetOk()
			}
			bulkOrNull(w, prev, r.GetValue())
		case cond != concordpb.Condition_CONDITION_NONE && !r.GetOk():
			w.Null()
		default:
			w.SimpleString("OK")
		}
	}), nil
}

func planSetNX(_ *conn, a [][]byte) (*plan, error) {
	return writePlan(putOp(a[1], a[2], expiry{}, concordpb.Condition_CONDITION_NX, false), func(w *resp.Writer, r *concordpb.OpResult) {
		w.Int(b2i(r.GetOk()))
	}), nil
}

// planSetEX: SETEX key seconds value (EX) and PSETEX (PX).
func planSetEX(opt, name string) func(*conn, [][]byte) (*plan, error) {
	return func(_ *conn, a [][]byte) (*plan, error) {
		e, err := parseExpiry(opt, a[2], name, time.Now().UnixMilli())
		if err != nil {
			return nil, err
		}
		return writePlan(putOp(a[1], a[3], e, 0, false), replyOK), nil
	}
}

func planGetSet(_ *conn, a [][]byte) (*plan, error) {
	return writePlan(putOp(a[1], a[2], expiry{}, 0, true), func(w *resp.Writer, r *concordpb.OpResult) {
		bulkOrNull(w, r.GetOk(), r.GetValue())
	}), nil
}

func planGetDel(_ *conn, a [][]byte) (*plan, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_GET_DELETE, Key: a[1]}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { bulkOrNull(w, r.GetOk(), r.GetValue()) }), nil
}

// planGetEx: GETEX key [EX|PX|EXAT|PXAT n | PERSIST]. Without an option it
// is a GET; with one, an EXPIRE op that also returns the value.
func planGetEx(c *conn, a [][]byte) (*plan, error) {
	o, err := parseStringOptions(a[2:], false)
	if err != nil {
		return nil, err
	}
	if o.expOpt == "" && !o.persist {
		return planGet(c, a)
	}
	e := expiry{persist: o.persist}
	if o.expOpt != "" {
		if e, err = parseExpiry(o.expOpt, o.expArg, "getex", time.Now().UnixMilli()); err != nil {
			// Redis looks the key up before it checks the time: an
			// absent key answers null, a present one the error.
			return readPlan(c, a[1:2], func(w *resp.Writer, res []*concordpb.OpResult) {
				if !res[0].GetOk() {
					w.Null()
					return
				}
				w.Error(err.Error())
			}), nil
		}
	}
	op := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: a[1], TtlMs: e.ttlMs, ExpireAtUnixMs: e.atMs, Persist: e.persist}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { bulkOrNull(w, r.GetExists(), r.GetValue()) }), nil
}

// planDel: DEL and UNLINK: one DELETE per key, one batch per shard. Of
// one key under available, a Delete with AVAILABLE (plan.avail).
func planDel(c *conn, a [][]byte) (*plan, error) {
	p := &plan{avail: len(a) == 2 && c.available(), render: func(w *resp.Writer, res []*concordpb.OpResult) {
		n := int64(0)
		for _, r := range res {
			n += b2i(r.GetOk())
		}
		w.Int(n)
	}}
	for _, k := range a[1:] {
		p.ops = append(p.ops, &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: k})
	}
	return p, nil
}

func planExists(c *conn, a [][]byte) (*plan, error) {
	return readPlan(c, a[1:], func(w *resp.Writer, res []*concordpb.OpResult) {
		n := int64(0)
		for _, r := range res {
			n += b2i(r.GetOk())
		}
		w.Int(n)
	}), nil
}

// planType: every Concord value is a string.
func planType(c *conn, a [][]byte) (*plan, error) {
	return readPlan(c, a[1:2], func(w *resp.Writer, res []*concordpb.OpResult) {
		if res[0].GetOk() {
			w.SimpleString("string")
		} else {
			w.SimpleString("none")
		}
	}), nil
}

func planMGet(c *conn, a [][]byte) (*plan, error) {
	return readPlan(c, a[1:], func(w *resp.Writer, res []*concordpb.OpResult) {
		w.Array(len(res))
		for _, r := range res {
			bulkOrNull(w, r.GetOk(), r.GetValue())
		}
	}), nil
}

// planMSet: one PUT per pair, one batch per shard: atomic per shard.
func planMSet(_ *conn, a [][]byte) (*plan, error) {
	if len(a)%2 != 1 {
		return nil, replyError("ERR wrong number of arguments for 'mset' command")
	}
	// The plan, its ops and their slice in three allocations, whatever
	// the number of pairs (an MSET of 10 made 15), and a static render.
	n := len(a) / 2
	p := &plan{render: renderOK, ops: make([]*concordpb.Op, n)}
	ops := make([]concordpb.Op, n)
	for i := range ops {
		ops[i].Type, ops[i].Key, ops[i].Value = concordpb.OpType_OP_PUT, a[1+2*i], a[2+2*i]
		p.ops[i] = &ops[i]
	}
	return p, nil
}

func renderOK(w *resp.Writer, _ []*concordpb.OpResult) { w.SimpleString("OK") }

// planMSetNX: Redis sets all the keys only if none exists. One CHECK per
// key (absent), then one PUT per key, in one batch: a failed check skips
// every op after it, so the shard applies all the puts or none, in one raft
// entry. The checks all run before any put (MSETNX k 1 k 2 sets k to 2, as
// in Redis). The keys must share a shard (oneShard): across shards there is
// no single entry to make it atomic.
func planMSetNX(_ *conn, a [][]byte) (*plan, error) {
	if len(a)%2 != 1 {
		return nil, replyError("ERR wrong number of arguments for 'msetnx' command")
	}
	n := len(a) / 2
	p := &plan{oneShard: true, render: func(w *resp.Writer, res []*concordpb.OpResult) {
		for _, r := range res[:n] {
			if !r.GetOk() {
				w.Int(0)
				return
			}
		}
		w.Int(1)
	}}
	for i := 0; i < n; i++ {
		skip := uint32(2*n - i - 1) // every op after this check
		p.ops = append(p.ops, &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: a[1+2*i], ExpectAbsent: true, Skip: skip})
	}
	for i := 1; i < len(a); i += 2 {
		p.ops = append(p.ops, putOp(a[i], a[i+1], expiry{}, 0, false))
	}
	return p, nil
}

// planIncr: INCR/DECR (sign ±1, no argument) and INCRBY/DECRBY.
func planIncr(sign int64, withArg bool) func(*conn, [][]byte) (*plan, error) {
	return func(_ *conn, a [][]byte) (*plan, error) {
		delta := int64(1)
		if withArg {
			var err error
			if delta, err = parseInt(a[2]); err != nil {
				return nil, err
			}
			if sign < 0 && delta == math.MinInt64 {
				return nil, replyError("ERR decrement would overflow")
			}
		}
		op := &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: a[1], IntDelta: sign * delta}
		return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Int(r.GetIntValue()) }), nil
	}
}

// planIncrFloat: INCRBYFLOAT. Once every replica applies it
// (version.IncrFloatText) the increment travels as the client's text and
// the state machine reads it as Redis does (long double, hexadecimal,
// infinities); it is checked here first, so a bad one costs no proposal
// (Redis answers it as it answers a stored non-number: the same error).
// Before, it travels as a double (planIncrFloatDouble).
func planIncrFloat(c *conn, a [][]byte) (*plan, error) {
	if !c.s.b.ClusterVersion().Allows(version.IncrFloatText) {
		return planIncrFloatDouble(c, a)
	}
	if _, ok := kv.ParseLongDouble(a[2]); !ok {
		return nil, errNotFloat
	}
	op := &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: a[1], FloatDeltaText: a[2]}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Bulk(r.GetValue()) }), nil
}

// planIncrFloatDouble is INCRBYFLOAT in a cluster below
// version.IncrFloatText: the increment read as a double (float_delta).
func planIncrFloatDouble(c *conn, a [][]byte) (*plan, error) {
	d, err := parseFloat(a[2])
	if err != nil {
		return nil, err
	}
	if math.IsInf(d, 0) {
		return infIncrPlan(c, a[1]), nil
	}
	op := &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: a[1], FloatDelta: d}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Bulk(r.GetValue()) }), nil
}

// infIncrPlan answers INCRBYFLOAT by an infinite increment, which is an
// error whatever the key holds, and changes nothing: Redis reads the stored
// number before the increment, so a key that holds no number answers "not
// a valid float" and any other "would produce NaN or Infinity". The key is
// read to tell which (the op cannot carry an infinite delta).
func infIncrPlan(c *conn, key []byte) *plan {
	return readPlan(c, [][]byte{key}, func(w *resp.Writer, res []*concordpb.OpResult) {
		if res[0].GetOk() && !storedFloatOK(res[0].GetValue()) {
			w.Error(string(errNotFloat))
			return
		}
		w.Error(string(errNaN))
	})
}

// storedFloatOK reports whether Redis's string2ld takes v as a number
// (kv.ParseLongDouble: strtold's syntax whole, within a long double's
// range and not rounded to zero), decimal or an infinity: Concord below
// version 7, where this is asked, reads no hexadecimal floats. big.ParseFloat
// was used before: it takes a binary exponent ("1p3" is 8, which strtold
// does not read whole) and rounds at 64 bits without subnormals (2e-4951,
// which strtold reads as the smallest subnormal, was refused).
func storedFloatOK(v []byte) bool {
	if bytes.ContainsAny(v, "xX") {
		return false
	}
	_, ok := kv.ParseLongDouble(v)
	return ok
}

func planAppend(_ *conn, a [][]byte) (*plan, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_APPEND, Key: a[1], Value: a[2]}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Int(r.GetIntValue()) }), nil
}

func planStrlen(c *conn, a [][]byte) (*plan, error) {
	return readPlan(c, a[1:2], func(w *resp.Writer, res []*concordpb.OpResult) {
		w.Int(int64(len(res[0].GetValue())))
	}), nil
}

// planGetRange: GETRANGE key start end, with Redis's negative indexes.
func planGetRange(c *conn, a [][]byte) (*plan, error) {
	start, err := parseInt(a[2])
	if err != nil {
		return nil, err
	}
	end, err := parseInt(a[3])
	if err != nil {
		return nil, err
	}
	return readPlan(c, a[1:2], func(w *resp.Writer, res []*concordpb.OpResult) {
		w.Bulk(substr(res[0].GetValue(), start, end))
	}), nil
}

func substr(v []byte, start, end int64) []byte {
	n := int64(len(v))
	if start < 0 && end < 0 && start > end {
		return nil
	}
	if start < 0 {
		start = max(n+start, 0)
	}
	if end < 0 {
		end = max(n+end, 0)
	}
	end = min(end, n-1)
	if start > end || n == 0 {
		return nil
	}
	return v[start : end+1]
}

func planSetRange(c *conn, a [][]byte) (*plan, error) {
	off, err := parseInt(a[2])
	if err != nil {
		return nil, err
	}
	switch {
	case off < 0:
		return nil, errOffsetRange
	case len(a[3]) == 0:
		// Sets nothing, at any offset: Redis answers the length (0 for
		// an absent key, which it does not create), so a read does.
		return planStrlen(c, a)
	case off > int64(c.s.cfg.MaxValueBytes)-int64(len(a[3])): // not off+len: that may overflow
		return nil, replyError("ERR string exceeds maximum allowed size (--max-value-bytes)")
	}
	op := &concordpb.Op{Type: concordpb.OpType_OP_SET_RANGE, Key: a[1], Value: a[3], Offset: off}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Int(r.GetIntValue()) }), nil
}

// planExpire: EXPIRE/PEXPIRE (relative) and EXPIREAT/PEXPIREAT (absolute),
// with NX|XX|GT|LT, checked in Redis's order: the options, then the number,
// then whether its milliseconds (plus now, when relative) overflow. A time
// not in the future deletes the key (the state machine's rule); such a
// time is sent as the Unix millisecond 1.
func planExpire(unit int64, absolute bool) func(*conn, [][]byte) (*plan, error) {
	return func(_ *conn, a [][]byte) (*plan, error) {
		cond, err := parseExpireCond(a[3:])
		if err != nil {
			return nil, err
		}
		v, err := parseInt(a[2])
		if err != nil {
			return nil, err
		}
		invalid := replyError("ERR invalid expire time in '" + strings.ToLower(string(a[0])) + "' command")
		if v > math.MaxInt64/unit || v < math.MinInt64/unit {
			return nil, invalid
		}
		op := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: a[1], Condition: cond}
		switch ms := v * unit; {
		case absolute:
			op.ExpireAtUnixMs = max(ms, 1)
		case ms > math.MaxInt64-time.Now().UnixMilli():
			return nil, invalid
		case ms <= 0:
			op.ExpireAtUnixMs = 1
		default:
			op.TtlMs = ms
		}
		return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Int(b2i(r.GetOk())) }), nil
	}
}

// errXXLT refuses EXPIRE's XX and LT together, which Redis accepts: the
// shard's state machine has one condition per op, and XX with LT (has an
// expiry, and the new one is sooner) is none of its four.
const errXXLT = replyError("ERR XX and LT options together are not supported by Concord")

// parseExpireCond parses EXPIRE's options as Redis 7's
// parseExtendedExpireArgumentsOrReply does: any repeated, an unknown one
// refused first, then the conflicts. XX with GT is GT (GT already requires
// an expiry: a key without one counts as expiring never).
func parseExpireCond(a [][]byte) (concordpb.Condition, error) {
	var nx, xx, gt, lt bool
	for _, o := range a {
		switch strings.ToUpper(string(o)) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			return 0, replyError("ERR Unsupported option " + cString(o, len(o)))
		}
	}
	switch {
	case nx && (xx || gt || lt):
		return 0, replyError("ERR NX and XX, GT or LT options at the same time are not compatible")
	case gt && lt:
		return 0, replyError("ERR GT and LT options at the same time are not compatible")
	case xx && lt:
		return 0, errXXLT
	case nx:
		return concordpb.Condition_CONDITION_NX, nil
	case gt:
		return concordpb.Condition_CONDITION_GT, nil
	case lt:
		return concordpb.Condition_CONDITION_LT, nil
	case xx:
		return concordpb.Condition_CONDITION_XX, nil
	}
	return concordpb.Condition_CONDITION_NONE, nil
}

func planPersist(_ *conn, a [][]byte) (*plan, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: a[1], Persist: true}
	return writePlan(op, func(w *resp.Writer, r *concordpb.OpResult) { w.Int(b2i(r.GetOk())) }), nil
}

// TTL family: -2 for an absent key, -1 for a key without expiry.
const (
	ttlSeconds = iota
	ttlMillis
	expireSeconds
	expireMillis
)

func planTTL(kind int) func(*conn, [][]byte) (*plan, error) {
	return func(c *conn, a [][]byte) (*plan, error) {
		return readPlan(c, a[1:2], func(w *resp.Writer, res []*concordpb.OpResult) {
			w.Int(ttlReply(kind, res[0], time.Now().UnixMilli()))
		}), nil
	}
}

func ttlReply(kind int, r *concordpb.OpResult, nowMs int64) int64 {
	at := r.GetExpireAtUnixMs()
	switch {
	case !r.GetOk():
		return -2
	case at == 0:
		return -1
	}
	switch kind {
	case ttlSeconds:
		return (max(at-nowMs, 0) + 500) / 1000
	case ttlMillis:
		return max(at-nowMs, 0)
	case expireSeconds:
		return at / 1000
	}
	return at
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
