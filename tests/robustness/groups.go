package robustness

import (
	"fmt"
	"strings"
)

// Groups: keys that share a hash tag ({g0}a, {g0}b, {g0}c) share a shard,
// and Concord promises that a multi-key operation over keys of one shard is
// atomic (docs/redis.md, "Consistency and atomicity": a gRPC Batch, MSET,
// MSETNX, DEL of several keys, MULTI/EXEC, and MGET, which reads one view
// of the shard). The checker holds it to that: a group is one porcupine
// partition whose state is every key of the group, so a reader that sees
// half of an MSET is a violation, which per-key partitions could not see.

// groupMembers are the keys of a group after its tag: {g0}a, {g0}b, {g0}c.
var groupMembers = [...]string{"a", "b", "c"}

// groupState is a group's state: one kvState per member, in groupMembers'
// order (an array, so that states compare with ==).
type groupState [len(groupMembers)]kvState

// groupKeys returns the keys of the group with tag.
func groupKeys(tag string) []string {
	keys := make([]string, len(groupMembers))
	for i, m := range groupMembers {
		keys[i] = "{" + tag + "}" + m
	}
	return keys
}

// groupOf returns key's hash tag, by Redis Cluster's rule (the bytes between
// the first '{' and the first '}' after it, if not empty), and whether it
// has one.
func groupOf(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return key[open+1 : open+1+end], true
}

// keyOf is the key that decides an operation's partition: its one key, or
// the first of its keys (all of one group).
func keyOf(in kvInput) string {
	if len(in.Keys) > 0 {
		return in.Keys[0]
	}
	return in.Key
}

// partitionOf names the partition an operation belongs to: its group's tag,
// or its key when it has none.
func partitionOf(in kvInput) string {
	k := keyOf(in)
	if tag, ok := groupOf(k); ok {
		return "{" + tag + "}"
	}
	return k
}

// slotOf is key's index in its group's state, or -1 for a key that is no
// member (the workload never makes one: the checker rejects it).
func slotOf(key string) int {
	if i := strings.IndexByte(key, '}'); i >= 0 {
		for s, m := range groupMembers {
			if key[i+1:] == m {
				return s
			}
		}
	}
	return -1
}

// stepGroup applies in to the group's state s and reports whether out is a
// result the real system could have returned from s. A single-key
// operation on a member steps that member alone, as an ungrouped key's
// (timedStep, expiry included); a multi-key one steps every way its
// members may have been seen, live or expired (stepMultiTimed).
func stepGroup(s groupState, in kvInput, out kvOutput) (bool, interface{}) {
	slots, ok := slotsOf(in)
	switch {
	case !ok:
		return false, s
	case len(in.Keys) == 0:
		legal, next := timedStep(s[slots[0]], in, out)
		s[slots[0]] = next
		return legal, s
	case in.KeepTTL || (in.TTLMs != 0 && in.Kind != opMSet):
		return false, s // no multi-key op but a put of each key takes a TTL
	}
	for _, i := range slots {
		if s[i].Unsure {
			return true, afterUnsureMulti(s, slots, in, out)
		}
	}
	c, r := window(in, out)
	return stepMultiTimed(s, slots, in, out, c, r)
}

// stepMulti is a multi-key operation's step on members as it saw them
// (each live or absent, none with an expiry).
func stepMulti(s groupState, slots []int, in kvInput, out kvOutput) (bool, groupState) {
	switch in.Kind {
	case opMGet:
		return out.Unknown || sawEach(s, slots, out, false), s
	case opMSet:
		return out.Unknown || in.Blind || sawEach(s, slots, out, false), putEach(s, slots, in.Values)
	case opMDel:
		legal := out.Unknown || (in.CountOnly && out.N == existing(s, slots)) || (!in.CountOnly && sawEach(s, slots, out, true))
		next := s
		for _, i := range slots {
			next[i] = kvState{}
		}
		return legal, next
	case opMSetNX:
		none := existing(s, slots) == 0
		next := s
		if none {
			next = putEach(s, slots, in.Values)
		}
		return out.Unknown || out.Ok == none, next
	}
	return false, s
}

// slotsOf returns the state indexes of in's keys, and false if any key is
// not a member of the partition's group or a multi-key op's values do not
// match its keys.
func slotsOf(in kvInput) ([]int, bool) {
	keys := in.Keys
	if len(keys) == 0 {
		keys = []string{in.Key}
	}
	if (in.Kind == opMSet || in.Kind == opMSetNX) && len(in.Values) != len(keys) {
		return nil, false
	}
	tag, _ := groupOf(keys[0])
	slots := make([]int, len(keys))
	for j, k := range keys {
		t, _ := groupOf(k)
		slots[j] = slotOf(k)
		if t != tag || slots[j] < 0 {
			return nil, false
		}
	}
	return slots, true
}

// sawEach reports whether out.Multi holds s's state of each slot, in order
// (existence alone when existsOnly: what a delete answers).
func sawEach(s groupState, slots []int, out kvOutput, existsOnly bool) bool {
	if len(out.Multi) != len(slots) {
		return false
	}
	for j, i := range slots {
		got, want := out.Multi[j], s[i]
		if existsOnly {
			got, want = kvState{Exists: got.Exists}, kvState{Exists: want.Exists}
		}
		if got != want {
			return false
		}
	}
	return true
}

func putEach(s groupState, slots []int, values []string) groupState {
	for j, i := range slots {
		s[i] = kvState{Exists: true, Value: values[j]}
	}
	return s
}

func existing(s groupState, slots []int) int {
	n := 0
	for _, i := range slots {
		if s[i].Exists {
			n++
		}
	}
	return n
}

// keyState is a key's state as a read or a previous value reports it: an
// absent key's value is "" whatever the reply carried.
func keyState(exists bool, v string) kvState {
	if !exists {
		return kvState{}
	}
	return kvState{Exists: true, Value: v}
}

func (g groupState) String() string {
	parts := make([]string, len(g))
	for i, s := range g {
		parts[i] = groupMembers[i] + "=" + describeState(s)
	}
	return strings.Join(parts, " ")
}

func describeMulti(in kvInput, out kvOutput) string {
	var b strings.Builder
	b.WriteString(in.Kind.String())
	if in.Tx {
		b.WriteString("[tx]")
	}
	b.WriteString("(")
	for j, k := range in.Keys {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		if j < len(in.Values) {
			fmt.Fprintf(&b, "=%s", in.Values[j])
		}
	}
	b.WriteString(")")
	switch {
	case out.Unknown:
		b.WriteString(" → ?")
	case in.Blind:
		b.WriteString(" → ok")
	case in.Kind == opMSetNX:
		fmt.Fprintf(&b, " → set=%v", out.Ok)
	case in.CountOnly:
		fmt.Fprintf(&b, " → %d existed", out.N)
	default:
		parts := make([]string, len(out.Multi))
		for j, s := range out.Multi {
			parts[j] = stateString(s.Exists, s.Value)
		}
		fmt.Fprintf(&b, " → [%s]", strings.Join(parts, " "))
	}
	return b.String()
}
