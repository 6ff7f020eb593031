package scheduler

import (
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// NodeStates returns every node's state as the scheduler judges it at
// v.Now. REPLACED, LEAVING and REMOVED are administrative and kept as the
// meta shard records them. Any other node is DEAD if it has been silent
// for longer than Settings.DeadAfter, SUSPECT if for longer than
// SuspectAfter, UP otherwise (a DEAD or SUSPECT node that reports again is
// UP). Silence counts from the node's last report or from
// View.ObservedSince, whichever is later, so a placement leader that just
// took over declares nobody dead before it has listened for DeadAfter.
// With neither a report nor ObservedSince the recorded state stands, a
// node recorded DEAD stays so until it reports again, and one recorded
// SUSPECT stays at least SUSPECT until it reports (within SuspectAfter)
// to this placement leader.
func NodeStates(v View) map[ids.NodeID]concordpb.NodeState {
	out := make(map[ids.NodeID]concordpb.NodeState, len(v.Nodes))
	for _, n := range v.Nodes {
		out[ids.NodeID(n.GetNodeId())] = judge(v, n).state
	}
	return out
}

// LowOnSpace returns the nodes held low on space at v.Now: those whose
// last report says so (Report.DiskLow) and counts. A report counts only
// if this placement leader received it since it began observing
// (View.ObservedSince): one from an earlier term of its leadership says
// nothing of the node's disk now, and would hold the alarm on until the
// node is judged dead. And only while the node is live (not judged dead
// by its silence, removed or replaced, whatever its recorded state,
// LEAVING included: a dead leaving node stays LEAVING until its drain
// completes). Not only while it answers placement: a node silent to the
// placement leader for a few seconds (a stall on a nearly full disk, a
// link cut to the leader only) may still take raft appends, and dropping
// the alarm then would let the cluster's writes fill its disk. The node holds the space
// alarm on while any node is here, and Schedule puts no new replica on
// one (its disk refuses the snapshot anyway).
func LowOnSpace(v View) map[ids.NodeID]bool {
	out := map[ids.NodeID]bool{}
	for _, n := range v.Nodes {
		id := ids.NodeID(n.GetNodeId())
		r, ok := v.Reports[id]
		if ok && r.DiskLow && !r.At.Before(v.ObservedSince) && judge(v, n).live {
			out[id] = true
		}
	}
	return out
}

// judgement is what the scheduler makes of one node.
type judgement struct {
	state concordpb.NodeState // the effective state (see NodeStates)
	// live: replicas there count towards their shard's quorum and size
	// (not dead, replaced or removed; a leaving node is live until it
	// dies).
	live bool
	// good: live and staying (UP or SUSPECT): its replicas count towards
	// the replication factor.
	good bool
	// eligible: UP, the only state that receives new replicas and leaders,
	// and not stopping.
	eligible bool
	// stopping: UP, but the node's fresh report says it is stopping
	// cleanly (Report.Stopping): not eligible, as a SUSPECT node is not,
	// since leaderships and replicas put there would leave with the
	// process. It is expected back: it counts wherever the rules count the
	// nodes that could take a replica (planner.eligible).
	stopping bool
	// answering: live and not silent for longer than SuspectAfter (UP, or
	// LEAVING and heard from lately): a voter there can be counted on to
	// vote now, unlike one on a SUSPECT node, which may be dead.
	answering bool
}

func judge(v View, n *concordpb.NodeDescriptor) judgement {
	rec := n.GetState()
	switch rec {
	case concordpb.NodeState_NODE_REPLACED, concordpb.NodeState_NODE_REMOVED:
		return judgement{state: rec}
	}
	heard := silence(v, ids.NodeID(n.GetNodeId()), rec)
	answering := heard == concordpb.NodeState_NODE_UP
	if rec == concordpb.NodeState_NODE_LEAVING {
		return judgement{state: rec, live: heard != concordpb.NodeState_NODE_DEAD, answering: answering}
	}
	stopping := answering && reportsStopping(v, ids.NodeID(n.GetNodeId()))
	return judgement{
		state:     heard,
		live:      heard != concordpb.NodeState_NODE_DEAD,
		good:      heard != concordpb.NodeState_NODE_DEAD,
		eligible:  answering && !stopping,
		stopping:  stopping,
		answering: answering,
	}
}

// reportsStopping reports whether node's last report says it is stopping
// (Report.Stopping), received since this placement leader began observing
// (View.ObservedSince; one from an earlier term of its leadership says
// nothing of the process running now). Whatever its age: a node that
// stopped reports nothing more, and its stale report must not make it
// eligible again in the seconds before its silence makes it SUSPECT
// (ReportMaxAge is shorter than SuspectAfter). The next process's first
// report says otherwise, and replaces it.
func reportsStopping(v View, node ids.NodeID) bool {
	r, ok := v.Reports[node]
	return ok && r.Stopping && !r.At.Before(v.ObservedSince)
}

// silence classifies node by how long it has been silent: UP, SUSPECT or
// DEAD; rec (the recorded state) if there is nothing to judge by.
func silence(v View, node ids.NodeID, rec concordpb.NodeState) concordpb.NodeState {
	var last time.Time
	if r, ok := v.Reports[node]; ok {
		last = r.At
	}
	if rec == concordpb.NodeState_NODE_DEAD && (last.IsZero() || v.Now.Sub(last) > v.Settings.DeadAfter) {
		// Only the node's own report revives a node recorded dead: a new
		// placement leader's watch is no evidence that it came back.
		return rec
	}
	// Nor does the watch clear a suspicion: a node recorded SUSPECT with no
	// report of its own within SuspectAfter stays SUSPECT at least (not
	// eligible for new replicas and leaders), and is DEAD once silent for
	// DeadAfter from the watch's start. (A report received just before the
	// watch began, as the placement leader's own first one is, counts.)
	unheard := rec == concordpb.NodeState_NODE_SUSPECT && (last.IsZero() || v.Now.Sub(last) > v.Settings.SuspectAfter)
	if v.ObservedSince.After(last) {
		last = v.ObservedSince
	}
	if last.IsZero() {
		if rec == concordpb.NodeState_NODE_LEAVING {
			return concordpb.NodeState_NODE_UP
		}
		return rec
	}
	quiet := v.Now.Sub(last)
	switch s := v.Settings; {
	case s.DeadAfter > 0 && quiet > s.DeadAfter:
		return concordpb.NodeState_NODE_DEAD
	case s.SuspectAfter > 0 && quiet > s.SuspectAfter, unheard:
		return concordpb.NodeState_NODE_SUSPECT
	}
	return concordpb.NodeState_NODE_UP
}

// marks returns a StepMarkNode for every node whose judged state differs
// from the recorded one (UP, SUSPECT and DEAD only), so the meta shard
// records what the scheduler acts on, and for every LEAVING node that no
// shard's descriptor lists any more (it is drained: REMOVED), that no
// step still executing involves (an add-learner planned before the node
// was marked LEAVING puts a replica there, and promotes it, that no
// descriptor shows yet) and that holds no tentative writes (holdsHints).
// While a shard is busy with a step the view does not know (View.InFlight
// alone, or one an earlier placement leader may still run:
// planner.inheritedShards), no node is marked REMOVED.
func (p *planner) marks() []Step {
	held := map[ids.NodeID]bool{}
	for _, d := range p.v.Shards {
		for _, r := range d.GetReplicas() {
			held[ids.NodeID(r.GetNodeId())] = true
		}
	}
	unknownStep := len(p.inherited) > 0
	for shard, busy := range p.v.InFlight {
		if _, known := p.v.InFlightSteps[shard]; busy && !known {
			unknownStep = true
		}
	}
	for _, s := range p.v.InFlightSteps {
		held[s.Target], held[s.ReplicaNode] = true, true
	}
	via := p.via(0)
	var out []Step
	for _, id := range p.order {
		rec, now := p.recorded[id], p.nodes[id].state
		mark := Step{Kind: StepMarkNode, Via: via, Target: id}
		switch rec {
		case concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD:
			if now != rec {
				mark.State = now
				out = append(out, mark)
			}
		case concordpb.NodeState_NODE_LEAVING:
			if !held[id] && !unknownStep && !holdsHints(p.v, id, p.nodes[id]) {
				mark.State = concordpb.NodeState_NODE_REMOVED
				out = append(out, mark)
			}
		}
	}
	return out
}

// holdsHints reports whether the removal of LEAVING node id, judged j,
// waits for tentative writes (available mode) it may hold: a removed node
// never serves again, so the writes it holds would be lost with it, and
// only it can reconcile them. It waits unless the node is judged DEAD (no
// one can reconcile its writes while it is down, and a dead node must not
// hold its removal up for ever: it is removed as before, and says what it
// lost if it is started again) or its last report is fresh
// (Settings.ReportMaxAge), was sent once the node knew it is leaving
// (Report.SawLeaving: from then on it holds no new one) and says it holds
// none (Report.Tentative). A
// live node whose last report is stale (SUSPECT, or silent a little
// longer than ReportMaxAge), or that has not reported to this placement
// leader yet, waits too: it may be reconciling and report 0 next, and
// removing it on an old count would lose what it took since; it waits at
// most until DeadAfter of silence. A node older than
// HeartbeatRequest.tentative_writes reports 0: it is removed once
// drained, the rule before the field.
func holdsHints(v View, id ids.NodeID, j judgement) bool {
	if !j.live {
		return false
	}
	r, ok := v.Reports[id]
	return !ok || !r.Fresh(v.Now, v.Settings) || !r.SawLeaving || r.Tentative > 0
}
