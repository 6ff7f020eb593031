package robustness

// Expiry in a group (groups.go). A group's members carry expiry bounds as
// ungrouped keys do (ttl.go): single-key operations on a member step it
// alone (timedStep), and a multi-key write of puts (a gRPC Batch of PUTs
// with ttl_ms, a MULTI/EXEC of SET ... PX ... GET) gives each key E in
// [call + ttl - 1ms, return + ttl]. A multi-key operation judges each
// member live or expired at its own t in its window: stepMultiTimed tries
// each way the members may have been seen (at most two each: live if some
// t is before E, expired if some t is at or after it), steps the
// untimed stepMulti on those views, and joins the outcomes it accepts.
//
// Soundness, as in ttl.go: the true run sees each member one of the ways
// tried, with bounds that the true E satisfies, so its step is accepted.
// Each member is narrowed as if seen at a t of its own, where the system
// used one t (and one E for every key of a write): the model knows less
// than it could, never something false. The join is per member: a group
// state whose every member accepts what either outcome's member does
// accepts what either whole state does, since each step asks of each
// member separately how it may have been seen. An operation that meets an
// Unsure member is accepted whatever it answered (afterUnsureMulti).

// memberView is one way an operation may have seen a member: view (live
// or absent, no expiry) and seen, its stored state narrowed by that.
type memberView struct{ view, seen kvState }

// memberViews are the ways an operation of window [c, r] may have seen m.
func memberViews(m kvState, c, r int64) []memberView {
	if !m.Expires {
		return []memberView{{m, m}}
	}
	var vs []memberView
	if c < m.ExpHi {
		seen := m
		seen.ExpLo = max(m.ExpLo, c) // seen live at some t >= c: E > c
		vs = append(vs, memberView{kvState{Exists: true, Value: m.Value}, seen})
	}
	if r >= m.ExpLo {
		seen := m
		seen.ExpHi = min(m.ExpHi, r) // seen expired at some t <= r: E <= r
		vs = append(vs, memberView{kvState{}, seen})
	}
	return vs
}

// stepMultiTimed steps a multi-key operation from every combination of
// the ways its members may have been seen, and joins what it accepts.
func stepMultiTimed(s groupState, slots []int, in kvInput, out kvOutput, c, r int64) (bool, interface{}) {
	legal, joined := false, groupState{}
	var walk func(j int, views, seens groupState)
	walk = func(j int, views, seens groupState) {
		if j < len(slots) {
			i := slots[j]
			for _, v := range memberViews(s[i], c, r) {
				views[i], seens[i] = v.view, v.seen
				walk(j+1, views, seens)
			}
			return
		}
		ok, next := stepMulti(views, slots, in, out)
		if !ok {
			return
		}
		for _, i := range slots {
			next[i] = settleMember(views[i], seens[i], next[i], in, c, r)
		}
		if legal {
			joined = joinGroups(joined, next)
		} else {
			legal, joined = true, next
		}
	}
	walk(0, s, s)
	if !legal {
		return false, s
	}
	return true, joined
}

// settleMember is a member's next state after a multi-key operation saw it
// as view: what a put leaves (with its TTL), or a delete; seen (the stored
// value and what the op says of its expiry) if the op left it as it was.
func settleMember(view, seen, next kvState, in kvInput, c, r int64) kvState {
	switch {
	case in.Kind == opMSet:
		return withTTL(next, in.TTLMs, c, r)
	case in.Kind == opMDel:
		return next
	case next == view:
		return seen
	}
	return next // an MSETNX's value, without expiry
}

// joinGroups joins two group states member by member (ttl.go, join).
func joinGroups(a, b groupState) groupState {
	for i := range a {
		a[i] = join(a[i], b[i])
	}
	return a
}

// afterUnsureMulti is the group's state after a multi-key operation that
// met an Unsure member: what an MSET or a delete leaves, whatever the keys
// held; what an answered MSETNX says it did; else an MSETNX that may have
// put leaves its keys Unsure, and a read changes nothing.
func afterUnsureMulti(s groupState, slots []int, in kvInput, out kvOutput) groupState {
	c, r := window(in, out)
	for j, i := range slots {
		switch {
		case in.Kind == opMSet:
			s[i] = withTTL(kvState{Exists: true, Value: in.Values[j]}, in.TTLMs, c, r)
		case in.Kind == opMDel:
			s[i] = kvState{}
		case in.Kind == opMSetNX && !out.Unknown && out.Ok:
			s[i] = kvState{Exists: true, Value: in.Values[j]}
		case in.Kind == opMSetNX && out.Unknown:
			s[i] = kvState{Unsure: true}
		}
	}
	return s
}
