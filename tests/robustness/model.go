package robustness

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
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
)

func (k opKind) String() string { return [...]string{"get", "put", "del", "cas", "incr"}[k] }

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
}

// kvOutput is what the operation returned. Unknown marks an ambiguous
// mutation: nothing is known of its result.
type kvOutput struct {
	Unknown bool
	Ok      bool   // get: found; put: previous existed; del: existed; cas: swapped; incr: applied (Value: the new value)
	Value   string // get: value; put: previous value; cas: value before
	Exists  bool   // cas: whether the key existed before
}

// kvState is one key's state; the model is partitioned by key.
type kvState struct {
	Exists bool
	Value  string
}

// kvModel is the sequential specification of one key of Concord's KV API.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
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
	Init: func() interface{} { return kvState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(kvState), input.(kvInput), output.(kvOutput))
	},
	Equal: func(a, b interface{}) bool { return a.(kvState) == b.(kvState) },
	DescribeOperation: func(input, output interface{}) string {
		return describe(input.(kvInput), output.(kvOutput))
	},
	DescribeState: func(state interface{}) string {
		s := state.(kvState)
		if !s.Exists {
			return "(absent)"
		}
		return fmt.Sprintf("%q", s.Value)
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
	var b strings.Builder
	switch in.Kind {
	case opGet:
		fmt.Fprintf(&b, "get(%s)", in.Key)
	case opPut:
		fmt.Fprintf(&b, "put(%s, %s)", in.Key, in.Value)
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
