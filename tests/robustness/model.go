package robustness

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/concord-kv/concord/api/concordpb"
)

// opKind is an operation of the workload.
type opKind int

const (
	opGet opKind = iota
	opPut
	opDelete
	opCAS
	// opIncr is Redis's INCR (RESP clients only): the key's integer plus
	// one, absent counting as 0; a value that is not an integer refuses it
	// (Ok false) and changes nothing.
	opIncr
	// The multi-key kinds (groups.go) act on Keys, keys of one group (one
	// hash tag, so one shard), atomically.
	opMGet   // every key's value, from one view of the shard
	opMSet   // put Values[i] under Keys[i]; unless Blind, answer each key's state before
	opMDel   // delete every key; answer which existed (or, CountOnly, how many)
	opMSetNX // MSETNX: put every key only if none exists (Ok: they were put)
	// opExpire changes a key's expiry without writing its value (expire.go):
	// PEXPIRE, EXPIRE, PERSIST, GETEX PX|PERSIST, a gRPC EXPIRE op.
	opExpire
)

func (k opKind) String() string {
	return [...]string{"get", "put", "del", "cas", "incr", "mget", "mset", "mdel", "msetnx", "expire"}[k]
}

// isRead reports whether the kind changes nothing: a failed read is left
// out of the history, never ambiguous.
func (k opKind) isRead() bool { return k == opGet || k == opMGet }

// kvInput is an operation's input.
type kvInput struct {
	Kind     opKind
	Key      string
	Value    string // put, cas: the new value
	Expected string // cas: the expected value, unless ExpectAbsent
	Absent   bool   // cas: expect the key to be absent
	// Blind: a put that does not return the previous value (Redis SET
	// without GET), so its output says nothing of the state before.
	Blind bool
	// The multi-key kinds: Keys (distinct, one group's) and, for mset and
	// msetnx, Values in the same order.
	Keys, Values []string
	// CountOnly: an mdel that answers how many keys existed (Redis DEL),
	// not which.
	CountOnly bool
	// Tx: sent over RESP as MULTI/EXEC rather than as one command.
	Tx bool
	// TTLMs: a put that makes the key expire this many milliseconds after
	// the shard places it (ttl.go); 0: none, and the put clears any expiry.
	TTLMs int64
	// KeepTTL: a put that keeps the key's expiry (SET ... KEEPTTL, a gRPC
	// PUT op with keep_ttl) rather than clearing it.
	KeepTTL bool
	// The expire kind (expire.go): Persist removes the expiry; otherwise
	// TTLMs > 0 sets one that many milliseconds after the shard applies
	// it, and TTLMs <= 0 names a time not in the future, which deletes the
	// key. Cond restricts it (NX, XX, GT, LT); Reply says what its answer
	// holds; Seconds: sent as EXPIRE (TTLMs a whole number of seconds).
	Persist bool
	Cond    concordpb.Condition
	Reply   expireReply
	Seconds bool
	// CallWall is the wall clock (Unix ns) read just before the call: the
	// checker compares expiry times, which the servers take from the same
	// wall clock, with it (ttl.go).
	CallWall int64
}

// kvOutput is what the operation returned. Unknown marks an ambiguous
// mutation: nothing is known of its result.
type kvOutput struct {
	Unknown bool
	Ok      bool   // get: found; put: previous existed; del: existed; cas: swapped; incr: applied (Value: the new value); expire: changed
	Value   string // get: value; put: previous value; cas, expire: value before
	Exists  bool   // cas, expire: whether the key existed before
	// Multi: per key of a multi-key op, in Keys' order: mget, the state
	// read; mset (not Blind), the state before; mdel (not CountOnly), the
	// state before (only Exists is compared).
	Multi []kvState
	N     int // mdel with CountOnly: how many keys existed
	// ReturnWall is the wall clock (Unix ns) read just after the return;
	// 0 for an ambiguous mutation, which never returned (ttl.go).
	ReturnWall int64
}

// kvState is one key's state; the model is partitioned by key, except that
// the keys of one group (groups.go) form one partition, with a groupState.
type kvState struct {
	Exists bool
	Value  string
	// Expires: the value expires at an instant (wall clock, Unix ns) known
	// to lie in [ExpLo, ExpHi] (ttl.go). Unsure: the model no longer knows
	// the key's state and accepts anything of it until a write replaces
	// it whatever it held. A group's members hold them too (groups.go,
	// stepGroup).
	Expires      bool
	ExpLo, ExpHi int64
	Unsure       bool
}

// kvModel is the sequential specification of one key of Concord's KV API.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := partitionOf(op.Input.(kvInput))
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	// A partition's state is a kvState or, for a group, a groupState; the
	// initial state is nil (nothing written yet) because Init cannot know
	// which partition it starts.
	Init: func() interface{} { return nil },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(kvInput)
		if _, grouped := groupOf(keyOf(in)); grouped {
			g, _ := state.(groupState) // nil: the zero state
			return stepGroup(g, in, output.(kvOutput))
		}
		s, _ := state.(kvState)
		return stepTimed(s, in, output.(kvOutput))
	},
	// Both state types are comparable (no slices or maps).
	Equal: func(a, b interface{}) bool { return a == b },
	DescribeOperation: func(input, output interface{}) string {
		return describe(input.(kvInput), output.(kvOutput))
	},
	DescribeState: func(state interface{}) string {
		if g, ok := state.(groupState); ok {
			return g.String()
		}
		s, _ := state.(kvState)
		return describeState(s)
	},
}

// step applies in to s and reports whether out is a result the real system
// could have returned from state s.
func step(s kvState, in kvInput, out kvOutput) (bool, interface{}) {
	prevMatches := out.Ok == s.Exists && (!s.Exists || out.Value == s.Value)
	switch in.Kind {
	case opGet:
		return prevMatches, s
	case opPut:
		return out.Unknown || in.Blind || prevMatches, kvState{Exists: true, Value: in.Value}
	case opDelete:
		return out.Unknown || out.Ok == s.Exists, kvState{}
	case opCAS:
		match := (in.Absent && !s.Exists) || (!in.Absent && s.Exists && s.Value == in.Expected)
		next := s
		if match {
			next = kvState{Exists: true, Value: in.Value}
		}
		if out.Unknown {
			return true, next
		}
		sawState := out.Exists == s.Exists && (!s.Exists || out.Value == s.Value)
		return out.Ok == match && sawState, next
	case opIncr:
		n, isInt := int64(0), true
		if s.Exists {
			var err error
			n, err = strconv.ParseInt(s.Value, 10, 64)
			isInt = err == nil && strconv.FormatInt(n, 10) == s.Value && n < math.MaxInt64
		}
		if !isInt {
			return out.Unknown || !out.Ok, s
		}
		next := kvState{Exists: true, Value: strconv.FormatInt(n+1, 10)}
		return out.Unknown || (out.Ok && out.Value == next.Value), next
	}
	return false, s
}

func describe(in kvInput, out kvOutput) string {
	if len(in.Keys) > 0 {
		return describeMulti(in, out)
	}
	var b strings.Builder
	switch in.Kind {
	case opGet:
		fmt.Fprintf(&b, "get(%s)", in.Key)
	case opPut:
		fmt.Fprintf(&b, "put(%s, %s)", in.Key, in.Value)
		if in.TTLMs > 0 {
			fmt.Fprintf(&b, " ttl %dms", in.TTLMs)
		}
		if in.KeepTTL {
			b.WriteString(" keepttl")
		}
	case opDelete:
		fmt.Fprintf(&b, "del(%s)", in.Key)
	case opCAS:
		exp := fmt.Sprintf("%q", in.Expected)
		if in.Absent {
			exp = "absent"
		}
		fmt.Fprintf(&b, "cas(%s, %s → %s)", in.Key, exp, in.Value)
	case opIncr:
		fmt.Fprintf(&b, "incr(%s)", in.Key)
	case opExpire:
		return describeExpire(in, out)
	}
	switch {
	case out.Unknown:
		b.WriteString(" → ?")
	case in.Blind:
		b.WriteString(" → ok")
	case in.Kind == opCAS:
		fmt.Fprintf(&b, " → swapped=%v before=%s", out.Ok, stateString(out.Exists, out.Value))
	case in.Kind == opIncr && !out.Ok:
		b.WriteString(" → not an integer")
	default:
		fmt.Fprintf(&b, " → %s", stateString(out.Ok, out.Value))
	}
	return b.String()
}

func stateString(exists bool, v string) string {
	if !exists {
		return "absent"
	}
	return fmt.Sprintf("%q", v)
}
