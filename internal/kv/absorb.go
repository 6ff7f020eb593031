package kv

import (
	"unsafe"

	"github.com/concord-kv/concord/api/concordpb"
)

// Write absorption (issue 12): one raft command is one atomic entry, and
// nothing outside it can observe the state between two of its ops: reads
// are linearized between entries (ReadIndex, leases, stale reads all read
// an applied index, which is an entry boundary), never inside one, and a
// crash loses or keeps the whole entry. So when an op's write is
// overwritten later in the same command by a blind PUT of the same key,
// and no op in between reads the key, that write is invisible to everyone
// and the op can be left out of the command, provided its own result does
// not depend on applying it.
//
// Exactly, op i is dropped when all of these hold:
//
//   - op i is a blind PUT (no condition, keep_ttl or return_prev: blind):
//     it reads nothing, and its result is the blank one every applied
//     blind PUT gets (applyOp), so its answer is known without applying
//     it. A DELETE, CAS, INCR, APPEND, NX/XX or GET-returning PUT is never
//     dropped: its result depends on the key's state.
//   - op i is well formed (CheckOp) and carries no ttl_ms: a relative TTL
//     is placed on the shard's clock at apply, where it can still refuse
//     the whole command (expiry); dropping it could turn a refused
//     command into an applied one. An absolute expire_at is checked by
//     CheckOp alone, so such a PUT may be dropped.
//   - a later op j of the same key is a blind PUT (any: with a TTL, or one
//     that deletes by an expiry in the past): it replaces the value and
//     the expiry whatever they were, without reading them.
//   - no op between i and j touches the key in any other way: anything
//     else (GET, DELETE, CAS, INCR, EXPIRE, DELETE_EXPIRED, a conditional
//     or keep_ttl PUT, ...) reads or conditions on the state op i left.
//   - the command has no CHECK: a failed CHECK skips the ops after it, so
//     op j might not apply, a skipped op's result is "skipped", not blank,
//     and skip counts are positions that dropping would shift.
//
// What differs after apply: nothing a read can see. The key's value and
// expiry are op j's either way. The one trace a dropped op would have left
// is an expiry index entry for its expire_at, which op j (blind: it does
// not read the entry it replaces) would have left stale, for the sweep's
// DELETE_EXPIRED to remove as it removes any stale entry; without op i the
// entry is never written. Absorption runs where the command is built (the
// leader's merged proposal: grpcapi.proposeOneMerged), so the log holds the
// absorbed command and every replica applies the same ops: replicas agree
// byte for byte whatever version applies them.
//
// Sessions: only commands without a session are absorbed (the merged
// proposals: a session's command goes alone, its stored result is its full
// result list). A command the state machine refuses as a whole (a bad TTL,
// a key outside the shard) is proposed again unabsorbed by the caller, so
// its error, which names an op by position, is the one the client would
// have had. Ops of different clients merged into one command are
// independent writers racing on one key: the order in the command is an
// order in which they could have applied, and each still gets the reply
// it would have had there (a plain SET: OK).

// Absorb returns ops without the writes a later blind PUT of the same key
// overwrites unobserved (see above), and dropped, one flag per op of ops
// (nil when nothing was dropped, and then kept is ops itself). ops is not
// changed; kept shares its ops.
func Absorb(ops []*concordpb.Op) (kept []*concordpb.Op, dropped []bool) {
	if len(ops) < 2 {
		return ops, nil
	}
	for _, op := range ops {
		if op.GetType() == concordpb.OpType_OP_CHECK {
			return ops, nil
		}
	}
	// covered: key -> a later op of the key is a blind PUT, and nothing
	// between reads the key. Scanning backwards, each key's entry is the
	// state right after the op being looked at. The map's keys alias the
	// ops' keys (unsafe.String, no copy): they are not changed while the
	// map lives, which is this call. A run of ops of one key (a hot key's
	// merged SETs: all of them, under redis-benchmark) keeps its state in
	// cur and cov and touches the map only where the key changes: one map
	// access per op was half of Absorb, 5 % of a forwarding Redis node.
	var covered map[string]bool
	var cur string
	cov, started := false, false
	n := 0
	for i := len(ops) - 1; i >= 0; i-- {
		op := ops[i]
		k := op.GetKey()
		if key := unsafe.String(unsafe.SliceData(k), len(k)); !started || key != cur {
			if started {
				if covered == nil {
					covered = make(map[string]bool, len(ops))
				}
				covered[cur] = cov
			}
			cur, cov, started = key, covered[key], true // a nil map reads false
		}
		switch {
		case cov && absorbable(op):
			if dropped == nil {
				dropped = make([]bool, len(ops))
			}
			dropped[i] = true
			n++
		case blind(op):
			cov = true
		default:
			cov = false
		}
	}
	if n == 0 {
		return ops, nil
	}
	kept = make([]*concordpb.Op, 0, len(ops)-n)
	for i, op := range ops {
		if !dropped[i] {
			kept = append(kept, op)
		}
	}
	return kept, dropped
}

// absorbable reports whether op, overwritten unobserved, may be left out:
// a well-formed blind PUT whose answer is the blank result and which
// cannot refuse the command at apply (no ttl_ms).
func absorbable(op *concordpb.Op) bool {
	return blind(op) && op.GetTtlMs() == 0 && CheckOp(op) == nil
}

// Expand returns the results of the ops Absorb was given from res, the
// results of the ops it kept: a dropped op's is the blank result of a
// blind PUT. With dropped nil it returns res. It returns nil when res does
// not have one result per kept op.
func Expand(res []*concordpb.OpResult, dropped []bool) []*concordpb.OpResult {
	if dropped == nil {
		return res
	}
	out := make([]*concordpb.OpResult, len(dropped))
	// What applyOp gives every blind PUT: one, shared by the command's
	// dropped ops (as by its applied blind PUTs), never changed.
	blank := &concordpb.OpResult{}
	j := 0
	for i, d := range dropped {
		switch {
		case d:
			out[i] = blank
		case j < len(res):
			out[i] = res[j]
			j++
		default:
			return nil
		}
	}
	if j != len(res) {
		return nil
	}
	return out
}
