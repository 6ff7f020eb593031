package kv

import (
	"bytes"
	"strconv"

	"github.com/concord-kv/concord/api/concordpb"
)

// INCR runs: redis-benchmark's pipelined INCRs of one key reach the leader
// as a few hundred INCRs in a row in one merged command, and every replica
// applied each (decoded it, parsed and formatted the number, made a
// result): about twice a SET's cost per entry on a follower, whose
// overwritten SETs the leader absorbs instead (absorb.go). An INCR cannot
// be dropped (each one's answer is the value it made), but R INCRs by d in
// a row of one key are arithmetic: the leader proposes them as ONE op with
// repeat R (Op.repeat), which every replica applies in O(1) (incr), and
// answers each original INCR from that op's result (ExpandRuns).
//
// Why it is exact: inside one entry nothing between two adjacent ops of
// one key can observe it (absorb.go: reads see entry boundaries), so R
// INCRs in a row leave exactly the state of their last one, and the last
// one's value is n + k*d where k of them apply: all fail on a value that
// is not an integer (none changes it), and once one overflows every later
// one does (same value, same delta). From the final value and k each
// INCR's own result follows: the i-th (i < k) made final - (k-1-i)*d.
//
// Only plain INCRs are coalesced (nothing but type, key and int_delta):
// an op with any other field set is left alone, so a field added to Op
// later cannot be lost in a run. Like Absorb, a command with a CHECK is
// left whole: skip counts are positions. Older binaries would apply a
// repeated INCR as one INCR, so the leader (grpcapi.proposeOneMerged) and
// a node forwarding to it (grpcapi.sendOneWriteMerged) coalesce only once
// the cluster's version allows version.IncrRepeat; a leader that has not
// learned it yet refuses a forwarded repeat, and the parts go alone. A
// command refused as a whole is proposed again
// uncoalesced by the caller, so an error that names an op by position is
// the client's.

// MaxRepeat bounds Op.repeat, at apply as at the leader: as many ops as
// one merged command can hold (grpcapi's batch op limit), so an entry
// cannot ask a leader to expand an absurd run. A longer run is split.
const MaxRepeat = 1000

// Coalesce returns ops with each run of adjacent plain INCRs of one key by
// one delta replaced by one new op with repeat set to the run's length,
// and runs, the number of ops of ops each kept op stands for (nil when
// nothing was coalesced, and then kept is ops itself). ops is not
// changed; kept shares its other ops.
func Coalesce(ops []*concordpb.Op) (kept []*concordpb.Op, runs []uint32) {
	if !hasRun(ops) {
		return ops, nil
	}
	kept = make([]*concordpb.Op, 0, len(ops))
	runs = make([]uint32, 0, len(ops))
	for i := 0; i < len(ops); {
		n := runAt(ops, i)
		op := ops[i]
		if n > 1 {
			op = &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: op.GetKey(), IntDelta: op.GetIntDelta(), Repeat: uint32(n)}
		}
		kept, runs = append(kept, op), append(runs, uint32(n))
		i += n
	}
	return kept, runs
}

// hasRun reports whether ops, a command without a CHECK, holds two
// adjacent ops that one repeated INCR can stand for.
func hasRun(ops []*concordpb.Op) bool {
	run := false
	for i, op := range ops {
		if op.GetType() == concordpb.OpType_OP_CHECK {
			return false
		}
		run = run || (i > 0 && sameIncr(ops[i-1], op))
	}
	return run
}

// runAt is the length of the run of ops starting at i: how many ops from
// i on one repeated INCR stands for (1: op i alone), at most MaxRepeat.
func runAt(ops []*concordpb.Op, i int) int {
	n := 1
	for i+n < len(ops) && n < MaxRepeat && sameIncr(ops[i], ops[i+n]) {
		n++
	}
	return n
}

// sameIncr reports whether a and b are plain INCRs of one key by one
// delta.
func sameIncr(a, b *concordpb.Op) bool {
	return plainIncr(a) && plainIncr(b) && a.GetIntDelta() == b.GetIntDelta() && bytes.Equal(a.GetKey(), b.GetKey())
}

// plainIncr reports whether op is an INCR with nothing but its key and
// delta: anything else set (repeat included, or a field this binary does
// not know) keeps it out of a run.
func plainIncr(op *concordpb.Op) bool {
	return op.GetType() == concordpb.OpType_OP_INCR && len(op.GetValue()) == 0 && len(op.GetExpected()) == 0 &&
		!op.GetExpectAbsent() && !op.GetDelete() && op.GetTtlMs() == 0 && op.GetExpireAtUnixMs() == 0 &&
		!op.GetKeepTtl() && !op.GetPersist() && op.GetCondition() == concordpb.Condition_CONDITION_NONE &&
		op.GetFloatDelta() == 0 && op.GetOffset() == 0 && op.GetSkip() == 0 && !op.GetReturnPrev() &&
		op.GetRepeat() == 0 && len(op.GetFloatDeltaText()) == 0 && op.GetTentativeVersion() == 0 &&
		len(op.ProtoReflect().GetUnknown()) == 0
}

// ExpandRuns returns the results of the ops Coalesce was given from res,
// the results of kept (what it returned) with runs: each INCR of a run
// gets the result it would have had alone. With runs nil it returns res.
// It returns nil when res does not fit kept and runs (one result per kept
// op, a repeated INCR's saying how many of its INCRs applied).
func ExpandRuns(kept []*concordpb.Op, res []*concordpb.OpResult, runs []uint32) []*concordpb.OpResult {
	if runs == nil {
		return res
	}
	if len(res) != len(runs) || len(kept) != len(runs) {
		return nil
	}
	n := 0
	for _, r := range runs {
		n += int(r)
	}
	out := make([]*concordpb.OpResult, 0, n)
	for i, r := range res {
		if runs[i] == 1 {
			out = append(out, r)
			continue
		}
		if out = expandRun(out, r, kept[i].GetIntDelta(), int(runs[i])); out == nil {
			return nil
		}
	}
	return out
}

// expandRun appends to out the results of the n INCRs by delta that r, a
// repeated INCR's result, stands for; nil when r is not such a result.
// The first k applied, the i-th making final - (k-1-i)*delta (exact in
// int64's wrapping arithmetic: every value made lies in its range); each
// of the rest failed alone, as failed() answers: the error only.
func expandRun(out []*concordpb.OpResult, r *concordpb.OpResult, delta int64, n int) []*concordpb.OpResult {
	k, code := int(r.GetRepeatApplied()), r.GetError()
	switch {
	case k == 0 && code != concordpb.OpError_OP_ERROR_NONE: // none applied
	case k == n && code == concordpb.OpError_OP_ERROR_NONE && r.GetOk():
	case k > 0 && k < n && code == concordpb.OpError_OP_ERROR_OVERFLOW && r.GetOk():
	default:
		return nil
	}
	// One allocation for the run's results and one for their texts (at
	// most 20 bytes each), each text capped so an append by a caller copies.
	applied := make([]concordpb.OpResult, k)
	text := make([]byte, 0, 20*k)
	for i := range applied {
		v := r.GetIntValue() - int64(k-1-i)*delta
		start := len(text)
		text = strconv.AppendInt(text, v, 10)
		applied[i].Ok, applied[i].IntValue, applied[i].Value = true, v, text[start:len(text):len(text)]
		out = append(out, &applied[i])
	}
	for range n - k {
		out = append(out, &concordpb.OpResult{Error: code})
	}
	return out
}
