package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
)

// env is what every op of one command shares.
type env struct {
	nowMs    int64 // the shard's clock, Unix ms: what "expired" means at apply
	maxValue int64 // the proposer's value size limit; 0: none
	// maxResult is the command's result budget (KVCommand.max_result_bytes;
	// 0: none), returned the bytes of stored values its ops returned so far.
	maxResult, returned int64
}

// MaxResultBytes is the result budget a leader gives every KV command
// (KVCommand.max_result_bytes, once version.ResultBudget allows it): the
// most bytes of stored values one command's results return. Without it a
// batch of 1,000 GETs of a 1 MiB value, a few kilobytes of request, made
// every replica build a gigabyte of results at apply (and again after a
// restart: the entry stays in the log), and a session record as large.
// It is the gRPC message limit (dial.MaxMsgBytes, 64 MiB) less 1 MiB for
// the results' framing (under 64 bytes an op, 1,000 ops a batch), so a
// reply within it can be sent at all.
const MaxResultBytes = 63 << 20

// ReturnsValue reports whether op's result carries a stored value, up to
// the value size limit whatever the op's own size: GET, GET_DELETE, CAS,
// CHECK, EXPIRE (GETEX's value) and PUT with return_prev. These are the
// ops the result budget counts (takeResult), and the ones a node merging
// batches counts at their worst (grpcapi, redisapi).
func ReturnsValue(op *concordpb.Op) bool {
	switch op.GetType() {
	case concordpb.OpType_OP_GET, concordpb.OpType_OP_GET_DELETE, concordpb.OpType_OP_CAS,
		concordpb.OpType_OP_CHECK, concordpb.OpType_OP_EXPIRE:
		return true
	case concordpb.OpType_OP_PUT:
		return op.GetReturnPrev()
	}
	return false
}

// takeResult counts n bytes of stored value against the command's result
// budget, and reports whether they fit; those that do not are not
// counted, so a later op returning less may still fit. Every replica
// counts the same values in the same order: they agree on which ops fail.
func (e *env) takeResult(n int) bool {
	if e.maxResult <= 0 {
		return true
	}
	if int64(n) > e.maxResult-e.returned {
		return false
	}
	e.returned += int64(n)
	return true
}

// CheckOp reports why op is malformed, nil if it is not: an unknown type or
// condition, a negative time or offset, options that contradict each other
// or do not belong to the op. The front door refuses such an op with
// InvalidArgument; the state machine refuses the whole command, applying
// nothing, should one reach it.
func CheckOp(op *concordpb.Op) error {
	t := op.GetType()
	if !known(opTypes, int32(t)) {
		return fmt.Errorf("unknown type %d", t)
	}
	if !known(conditions, int32(op.GetCondition())) {
		return fmt.Errorf("unknown condition %d", op.GetCondition())
	}
	timed := op.GetTtlMs() != 0 || op.GetExpireAtUnixMs() != 0
	switch {
	case op.GetTtlMs() < 0 || op.GetExpireAtUnixMs() < 0:
		return errors.New("ttl_ms and expire_at_unix_ms must not be negative")
	case op.GetTtlMs() != 0 && op.GetExpireAtUnixMs() != 0:
		return errors.New("at most one of ttl_ms and expire_at_unix_ms may be set")
	case t == concordpb.OpType_OP_DELETE_EXPIRED && op.GetTtlMs() != 0:
		return errors.New("OP_DELETE_EXPIRED takes the index entry's time as expire_at_unix_ms, not a ttl_ms")
	case timed && t != concordpb.OpType_OP_PUT && t != concordpb.OpType_OP_EXPIRE && t != concordpb.OpType_OP_DELETE_EXPIRED:
		return fmt.Errorf("%v takes no expiry", t)
	case op.GetReturnPrev() && t != concordpb.OpType_OP_PUT:
		return fmt.Errorf("%v takes no return_prev: it is for PUT", t)
	case op.GetKeepTtl() && (t != concordpb.OpType_OP_PUT || timed):
		return errors.New("keep_ttl is for a PUT without a new expiry")
	case op.GetPersist() && (t != concordpb.OpType_OP_EXPIRE || timed || op.GetCondition() != concordpb.Condition_CONDITION_NONE):
		return errors.New("persist is for an EXPIRE without a new expiry or condition")
	case op.GetOffset() < 0:
		return errors.New("offset must not be negative")
	case math.IsNaN(op.GetFloatDelta()) || math.IsInf(op.GetFloatDelta(), 0):
		return errors.New("float_delta must be a finite number")
	case len(op.GetFloatDeltaText()) > 0 && (t != concordpb.OpType_OP_INCR_FLOAT || op.GetFloatDelta() != 0):
		return errors.New("float_delta_text is for an INCR_FLOAT without float_delta")
	case op.GetSkip() != 0 && t != concordpb.OpType_OP_CHECK:
		return fmt.Errorf("%v takes no skip", t)
	case op.GetRepeat() != 0 && t != concordpb.OpType_OP_INCR:
		return fmt.Errorf("%v takes no repeat: it is for INCR", t)
	case op.GetRepeat() > MaxRepeat:
		return fmt.Errorf("repeat %d is above the limit %d", op.GetRepeat(), MaxRepeat)
	case t == concordpb.OpType_OP_CHECK && (len(op.GetValue()) != 0 || op.GetDelete()):
		return errors.New("OP_CHECK takes no value and no delete: it changes nothing")
	case op.GetTentativeVersion() != 0 && t != concordpb.OpType_OP_DELETE && !(t == concordpb.OpType_OP_PUT &&
		!timed && !op.GetKeepTtl() && !op.GetReturnPrev() && op.GetCondition() == concordpb.Condition_CONDITION_NONE):
		return fmt.Errorf("%v takes no tentative_version: it is for a PUT without condition, expiry, keep_ttl or return_prev, and for DELETE", t)
	}
	switch c := op.GetCondition(); {
	case c == concordpb.Condition_CONDITION_NONE || t == concordpb.OpType_OP_EXPIRE:
	case t == concordpb.OpType_OP_PUT && (c == concordpb.Condition_CONDITION_NX || c == concordpb.Condition_CONDITION_XX):
	default:
		return fmt.Errorf("%v takes no condition %v", t, c)
	}
	return nil
}

// opTypes and conditions flag the enum values concordpb defines, indexed
// by value: CheckOp looked each op's type and condition up in the
// generated name maps, two map lookups per op on every node (at the front
// door, in absorption and at apply), 4 % of a Redis node under pipelined
// SET.
var (
	opTypes    = enumValues(concordpb.OpType_name)
	conditions = enumValues(concordpb.Condition_name)
)

func enumValues(names map[int32]string) []bool {
	var ok []bool
	for v := range names {
		if v >= 0 && v < 1024 { // proto enums here are small; anything else is unknown
			ok = append(ok, make([]bool, max(0, int(v)+1-len(ok)))...)
			ok[v] = true
		}
	}
	return ok
}

// known reports whether v is flagged in values.
func known(values []bool, v int32) bool { return v >= 0 && int(v) < len(values) && values[v] }

// CheckSkips reports why the ops of one batch do not fit together, nil if
// they do: a CHECK may skip only ops of its own batch.
func CheckSkips(ops []*concordpb.Op) error {
	for i, op := range ops {
		if after := len(ops) - i - 1; int64(op.GetSkip()) > int64(after) {
			return fmt.Errorf("operation %d: skip %d goes past the end of the batch (%d ops after it)", i, op.GetSkip(), after)
		}
	}
	return nil
}

// expiry is the absolute expiry op asks for (0: none), or an error when a
// TTL cannot be placed on the shard's clock.
func (e env) expiry(op *concordpb.Op) (int64, error) {
	switch ttl := op.GetTtlMs(); {
	case op.GetExpireAtUnixMs() != 0:
		return op.GetExpireAtUnixMs(), nil
	case ttl == 0:
		return 0, nil
	case e.nowMs <= 0:
		return 0, errors.New("a TTL needs a command stamped with the leader's time")
	case ttl > math.MaxInt64-e.nowMs:
		return 0, fmt.Errorf("ttl_ms %d overflows the expiry time", ttl)
	default:
		return e.nowMs + ttl, nil
	}
}

// blind reports whether op is a PUT that needs nothing of the key's current
// state: no condition, no keep_ttl, no previous value asked for.
func blind(op *concordpb.Op) bool {
	return op.GetType() == concordpb.OpType_OP_PUT && !op.GetReturnPrev() && !op.GetKeepTtl() &&
		op.GetCondition() == concordpb.Condition_CONDITION_NONE && op.GetTentativeVersion() == 0
}

// applyOp applies op; a blind PUT's result is blank (empty, and shared by
// every blind PUT of the command: the caller must not change it) when the
// caller has one (oneOpResult), else a new one.
func (sm *StateMachine) applyOp(b *pebble.Batch, e *env, op *concordpb.Op, blank *concordpb.OpResult) (*concordpb.OpResult, error) {
	if blind(op) {
		if blank == nil {
			blank = &concordpb.OpResult{}
		}
		return blank, e.blindPut(sm.unread(b, op.GetKey()), op)
	}
	s, err := sm.load(b, op.GetKey(), e.nowMs)
	if err != nil {
		return nil, err
	}
	if op.GetTentativeVersion() != 0 {
		return sm.reconcile(s, op)
	}
	cur, exists := s.cur(), s.exists // before any change
	if ReturnsValue(op) && !e.takeResult(len(cur.value)) {
		// Checked before the op changes anything: it fails alone. A
		// CHECK failed so does not match, and skips what it guards.
		return failed(concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE)
	}
	switch op.GetType() {
	case concordpb.OpType_OP_GET:
		return &concordpb.OpResult{Ok: exists, Value: cur.value, ExpireAtUnixMs: cur.expireAt}, nil
	case concordpb.OpType_OP_PUT:
		r, err := e.put(s, op)
		if !op.GetReturnPrev() {
			hidePrev(r, op)
		}
		return r, err
	case concordpb.OpType_OP_DELETE:
		return &concordpb.OpResult{Ok: exists}, s.delete()
	case concordpb.OpType_OP_CAS:
		return casOp(s, op)
	case concordpb.OpType_OP_CHECK:
		return &concordpb.OpResult{Ok: matches(s, op), Exists: exists, Value: cur.value}, nil
	case concordpb.OpType_OP_INCR:
		return incr(s, op.GetIntDelta(), op.GetRepeat())
	case concordpb.OpType_OP_INCR_FLOAT:
		if text := op.GetFloatDeltaText(); len(text) > 0 {
			return e.incrFloatText(s, text)
		}
		return e.incrFloat(s, op.GetFloatDelta())
	case concordpb.OpType_OP_APPEND:
		return e.append(s, op.GetValue())
	case concordpb.OpType_OP_SET_RANGE:
		return e.setRange(s, op.GetOffset(), op.GetValue())
	case concordpb.OpType_OP_GET_DELETE:
		return &concordpb.OpResult{Ok: exists, Value: cur.value, ExpireAtUnixMs: cur.expireAt}, s.delete()
	case concordpb.OpType_OP_EXPIRE:
		return e.expire(s, op)
	case concordpb.OpType_OP_DELETE_EXPIRED:
		// Re-checked here, on the shard's clock: a key set again since the
		// sweep read the index survives.
		expired := s.stored && !live(s.raw.expireAt, e.nowMs)
		// The index entry the sweep found is stale when it does not name
		// the key's expiry: a blind PUT replaced the key without reading
		// (and so without removing) the entry of the expiry it had.
		at := op.GetExpireAtUnixMs()
		stale := at != 0 && (!s.stored || s.raw.expireAt != at)
		if expired && s.raw.version != 0 {
			// Not a writer's delete: the bucket records the removed
			// value's version, so a tentative write older than the value
			// loses after the sweep as it did before (version.go).
			err = s.raiseBucketTo(s.raw.version)
		}
		if expired && err == nil {
			err = s.remove()
		}
		if stale && err == nil {
			err = b.Delete(keys.Expiry(sm.shard, at, op.GetKey()), nil)
		}
		return &concordpb.OpResult{Ok: expired}, err
	default:
		return nil, fmt.Errorf("kv: unknown op type %v", op.GetType())
	}
}

// put stores op's value under its condition and expiry. A PUT whose
// expiry is not in the future deletes the key (as Redis's SET with a past
// PXAT does).
func (e env) put(s *store, op *concordpb.Op) (*concordpb.OpResult, error) {
	cur := s.cur()
	res := &concordpb.OpResult{Ok: s.exists, Exists: s.exists, Value: cur.value}
	switch op.GetCondition() {
	case concordpb.Condition_CONDITION_NX:
		if res.Ok = !s.exists; !res.Ok {
			return res, nil
		}
	case concordpb.Condition_CONDITION_XX:
		if res.Ok = s.exists; !res.Ok {
			return res, nil
		}
	}
	at, _ := e.expiry(op) // checked in checkOps
	if op.GetKeepTtl() {
		at = cur.expireAt
	}
	if at != 0 && !live(at, e.nowMs) {
		return res, s.delete()
	}
	return res, s.set(op.GetValue(), at)
}

// hidePrev clears what a PUT that did not ask for the previous value would
// otherwise learn of it (the read was needed for its condition or
// keep_ttl), so a PUT reports the previous state exactly when asked: the
// result does not depend on whether the state machine had to read. With a
// condition, ok still says whether the put was made.
func hidePrev(r *concordpb.OpResult, op *concordpb.Op) {
	r.Value, r.Exists = nil, false
	if op.GetCondition() == concordpb.Condition_CONDITION_NONE {
		r.Ok = false
	}
}

// blindPut stores a PUT's value and expiry without reading the key. The
// value it replaces may have had an expiry whose index entry it cannot
// know: that entry stays, stale, until the sweep reaches its time and its
// DELETE_EXPIRED, finding the key's expiry different, removes it. A PUT
// whose expiry is not in the future deletes the key, as put does.
func (e env) blindPut(s *store, op *concordpb.Op) error {
	s.d.dropValue(s.k)    // overwritten: the batch holds the key's record now
	at, _ := e.expiry(op) // checked in checkOps
	if at != 0 && !live(at, e.nowMs) {
		if err := s.raiseBucket(); err != nil {
			return err
		}
		return s.b.Delete(s.k, nil)
	}
	if at != 0 {
		if err := s.b.Set(keys.Expiry(s.shard, at, s.key), nil, nil); err != nil {
			return err
		}
	}
	return setValue(s.b, s.k, op.GetValue(), at, s.ver)
}

// matches reports whether the key's live state is what a CAS or CHECK
// expects: absent, or present with the expected value.
func matches(s *store, op *concordpb.Op) bool {
	if op.GetExpectAbsent() {
		return !s.exists
	}
	return s.exists && bytes.Equal(s.cur().value, op.GetExpected())
}

func casOp(s *store, op *concordpb.Op) (*concordpb.OpResult, error) {
	cur := s.cur()
	match := matches(s, op)
	res := &concordpb.OpResult{Ok: match, Exists: s.exists, Value: cur.value}
	switch {
	case !match:
		return res, nil
	case op.GetDelete():
		return res, s.delete()
	default:
		return res, s.set(op.GetValue(), 0) // a new value, as a plain PUT: no expiry
	}
}

func failed(code concordpb.OpError) (*concordpb.OpResult, error) {
	return &concordpb.OpResult{Error: code}, nil
}

// incr adds delta to the key's integer repeat times in a row (0 or 1:
// once), keeping its expiry: a run of INCRs the leader coalesced
// (Coalesce) applies here as one op, in O(1) whatever the run's length.
// The state it leaves is the run's: the same value, and the same expiry,
// index entry and deferred record (set is called once, with what the
// last INCR would have set; the earlier ones' sets are overwritten in the
// batch and never reach it: deferred.go). All fail when the value is not
// an integer; otherwise the first k apply, k counted arithmetically, and
// the rest overflow: once one does, every later one (same value, same
// delta) does too.
func incr(s *store, delta int64, repeat uint32) (*concordpb.OpResult, error) {
	cur := s.cur()
	var n int64
	if s.exists {
		var ok bool
		if n, ok = parseInt(cur.value); !ok {
			return failed(concordpb.OpError_OP_ERROR_NOT_INTEGER)
		}
	}
	r := uint64(max(repeat, 1))
	k := incrsFit(n, delta, r)
	if k == 0 {
		return failed(concordpb.OpError_OP_ERROR_OVERFLOW)
	}
	// Exact: the true sum lies in int64's range (incrsFit), so int64's
	// wrapping product and sum give it.
	n += int64(k) * delta
	text := strconv.AppendInt(nil, n, 10)
	res := &concordpb.OpResult{Ok: true, Value: text, IntValue: n}
	if repeat > 1 { // a single INCR's result is what it always was
		res.RepeatApplied = uint32(k)
		if k < r {
			res.Error = concordpb.OpError_OP_ERROR_OVERFLOW
		}
	}
	return res, s.set(text, cur.expireAt)
}

// incrsFit is how many of r INCRs by delta, starting from n, apply before
// the first that would leave int64's range. The room to the bound in
// delta's direction is at most 2^64-1: it and the step are unsigned
// (wrapping int64 differences read as uint64 are exact here, and -delta
// for math.MinInt64 is 2^63).
func incrsFit(n, delta int64, r uint64) uint64 {
	var room, step uint64
	switch {
	case delta > 0:
		room, step = uint64(math.MaxInt64-n), uint64(delta)
	case delta < 0:
		room, step = uint64(n-math.MinInt64), -uint64(delta)
	default:
		return r // adding 0 never overflows
	}
	return min(room/step, r)
}

// parseInt accepts what Redis's string2ll does: the canonical base-10 form
// of an int64 only (no sign '+', no spaces, no leading zeros, no "-0").
func parseInt(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == string(b)
}

// floatPrec is the mantissa of the x87 long double Redis computes
// INCRBYFLOAT in; computing and printing at the same precision gives
// Redis's answers (0.1 + 0.2 is "0.3", not "0.30000000000000004").
const floatPrec = 64

// maxFloatExp bounds a result's binary exponent to the long double's range;
// beyond it Redis overflows to infinity and refuses.
const maxFloatExp = 16384

// incrFloat adds delta to the key's number, keeping its expiry. The delta
// arrives as a double; it is taken as its shortest decimal text (what a
// client typed, in the ordinary case), parsed as Redis parses the increment.
func (e env) incrFloat(s *store, delta float64) (*concordpb.OpResult, error) {
	cur := s.cur()
	n := new(big.Float).SetPrec(floatPrec)
	if s.exists {
		var ok bool
		if n, ok = parseFloat(string(cur.value)); !ok {
			return failed(concordpb.OpError_OP_ERROR_NOT_FLOAT)
		}
	}
	d, ok := parseFloat(strconv.FormatFloat(delta, 'g', -1, 64))
	if !ok || n.IsInf() {
		return failed(concordpb.OpError_OP_ERROR_NOT_FLOAT) // inf + anything is not a number Redis keeps
	}
	n.Add(n, d)
	if n.MantExp(nil) > maxFloatExp {
		return failed(concordpb.OpError_OP_ERROR_NOT_FLOAT)
	}
	text := []byte(formatFloat(n))
	if e.tooLarge(len(text)) {
		return failed(concordpb.OpError_OP_ERROR_TOO_LARGE)
	}
	return &concordpb.OpResult{Ok: true, Value: text}, s.set(text, cur.expireAt)
}

// incrFloatText adds the increment text to the key's number as Redis's
// INCRBYFLOAT does (version.IncrFloatText): both read as strtold reads
// them (ParseLongDouble), the stored one first, summed as the x87 sums,
// an infinite or NaN sum refused; the expiry is kept.
func (e env) incrFloatText(s *store, text []byte) (*concordpb.OpResult, error) {
	cur := s.cur()
	n := new(big.Float).SetPrec(ldPrec)
	if s.exists {
		var ok bool
		if n, ok = ParseLongDouble(cur.value); !ok {
			return failed(concordpb.OpError_OP_ERROR_NOT_FLOAT)
		}
	}
	d, ok := ParseLongDouble(text)
	if !ok {
		return failed(concordpb.OpError_OP_ERROR_NOT_FLOAT)
	}
	sum, ok := AddLongDouble(n, d)
	if !ok {
		return failed(concordpb.OpError_OP_ERROR_NAN_OR_INFINITY)
	}
	value := []byte(formatFloat(sum))
	if e.tooLarge(len(value)) {
		return failed(concordpb.OpError_OP_ERROR_TOO_LARGE)
	}
	return &concordpb.OpResult{Ok: true, Value: value}, s.set(value, cur.expireAt)
}

// parseFloat parses a number as Redis's string2ld does (strtold on the
// whole string: no spaces, no NaN), at long double precision.
func parseFloat(s string) (*big.Float, bool) {
	if s == "" || strings.TrimSpace(s) != s || strings.Contains(s, "_") {
		return nil, false
	}
	n, _, err := big.ParseFloat(s, 10, floatPrec, big.ToNearestEven)
	if err != nil || n.MantExp(nil) > maxFloatExp {
		return nil, false
	}
	return n, true
}

// formatFloat prints n as Redis prints a long double for humans: "%.17Lf",
// trailing zeros and a trailing point trimmed, "-0" as "0".
func formatFloat(n *big.Float) string {
	t := n.Text('f', 17)
	t = strings.TrimRight(t, "0")
	t = strings.TrimSuffix(t, ".")
	if t == "-0" || t == "" {
		return "0"
	}
	return t
}

// maxStringBytes bounds a value whatever the proposer's limit (Redis's
// proto-max-bulk-len), so no op allocates without bound.
const maxStringBytes = 512 << 20

func (e env) tooLarge(n int) bool {
	return n > maxStringBytes || (e.maxValue > 0 && int64(n) > e.maxValue)
}

// append appends v to the key's value (absent: empty), keeping its expiry.
func (e env) append(s *store, v []byte) (*concordpb.OpResult, error) {
	cur := s.cur()
	if e.tooLarge(len(cur.value) + len(v)) {
		return failed(concordpb.OpError_OP_ERROR_TOO_LARGE)
	}
	value := append(append(make([]byte, 0, len(cur.value)+len(v)), cur.value...), v...)
	return &concordpb.OpResult{Ok: true, IntValue: int64(len(value))}, s.set(value, cur.expireAt)
}

// setRange writes v at offset, zero-padding a gap, keeping the expiry. An
// empty v changes nothing (and creates no key), as in Redis.
func (e env) setRange(s *store, offset int64, v []byte) (*concordpb.OpResult, error) {
	cur := s.cur()
	if len(v) == 0 {
		return &concordpb.OpResult{Ok: s.exists, IntValue: int64(len(cur.value))}, nil
	}
	if offset > maxStringBytes || e.tooLarge(int(offset)+len(v)) {
		return failed(concordpb.OpError_OP_ERROR_TOO_LARGE)
	}
	value := make([]byte, max(int64(len(cur.value)), offset+int64(len(v))))
	copy(value, cur.value)
	copy(value[offset:], v)
	return &concordpb.OpResult{Ok: true, IntValue: int64(len(value))}, s.set(value, cur.expireAt)
}

// expire changes the expiry of an existing key under op's condition; a
// time not in the future deletes the key. A key without expiry counts as
// expiring never (infinitely late) for GT and LT.
func (e env) expire(s *store, op *concordpb.Op) (*concordpb.OpResult, error) {
	cur := s.cur()
	res := &concordpb.OpResult{Exists: s.exists, Value: cur.value}
	if !s.exists {
		return res, nil
	}
	if op.GetPersist() {
		if res.Ok = cur.expireAt != 0; !res.Ok {
			return res, nil
		}
		return res, s.set(cur.value, 0)
	}
	at, _ := e.expiry(op) // checked in checkOps
	if at == 0 {
		return res, nil // nothing asked: GETEX without options
	}
	had := cur.expireAt != 0
	switch op.GetCondition() {
	case concordpb.Condition_CONDITION_NX:
		res.Ok = !had
	case concordpb.Condition_CONDITION_XX:
		res.Ok = had
	case concordpb.Condition_CONDITION_GT:
		res.Ok = had && at > cur.expireAt
	case concordpb.Condition_CONDITION_LT:
		res.Ok = !had || at < cur.expireAt
	default:
		res.Ok = true
	}
	switch {
	case !res.Ok:
		return res, nil
	case !live(at, e.nowMs):
		return res, s.delete()
	default:
		return res, s.set(cur.value, at)
	}
}
