package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
)

// TestChangeRequest protects the executor's translation of scheduler steps
// into ChangeReplicas requests: each kind, its fields, and the epoch it was
// planned at (which makes the leader refuse a plan made on an older
// membership).
func TestChangeRequest(t *testing.T) {
	for _, c := range []struct {
		step scheduler.Step
		want *concordpb.ChangeReplicasRequest
	}{
		{scheduler.Step{Kind: scheduler.StepReplace, Shard: 3, Epoch: 4, Replica: 2, Target: 5},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 4, RemoveReplicaId: 2, AddNodeId: 5}},
		{scheduler.Step{Kind: scheduler.StepAddLearner, Shard: 3, Epoch: 4, Target: 5},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 4, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, AddNodeId: 5}},
		{scheduler.Step{Kind: scheduler.StepPromoteLearner, Shard: 3, Epoch: 5, Replica: 7, ReplicaNode: 5},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 5, Kind: concordpb.ChangeKind_CHANGE_PROMOTE, ReplicaId: 7}},
		{scheduler.Step{Kind: scheduler.StepRemoveReplica, Shard: 3, Epoch: 6, Replica: 2, ReplicaNode: 2},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 6, Kind: concordpb.ChangeKind_CHANGE_REMOVE, ReplicaId: 2}},
		{scheduler.Step{Kind: scheduler.StepRemoveReplica, Shard: 3, Epoch: 6, Replica: 2, ReplicaNode: 2, MinVoters: 1},
			&concordpb.ChangeReplicasRequest{ShardId: 3, PlannedEpoch: 6, Kind: concordpb.ChangeKind_CHANGE_REMOVE, ReplicaId: 2, MinVoters: 1}},
	} {
		if got := changeRequest(c.step); !proto.Equal(got, c.want) {
			t.Errorf("%s: request %v, want %v", scheduler.DescribeStep(c.step), got, c.want)
		}
	}
}

// TestTransferOverridesStaleReports protects the executor's memory of
// leadership transfers: once one succeeds, the view names the new leader
// (View.LeaderOverride) while the reports still name the old one, and
// stops once a report newer than the transfer names a leader, or once the
// transfer is older than a report may be.
func TestTransferOverridesStaleReports(t *testing.T) {
	var m placementState
	s := scheduler.DefaultSettings(time.Second)
	t0 := time.Now()
	m.record(&concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: 1},
		Replicas: []*concordpb.ReplicaStatus{{ShardId: 7, ReplicaId: 1, NodeId: 1, IsLeader: true, Term: 2}}})
	m.transferDone(7, 2, time.Now())
	if got := m.view(t0, s, nil, nil).LeaderOverride; got[7] != 2 {
		t.Fatalf("after the transfer, overrides %v, want s7 led by n2", got)
	}
	time.Sleep(time.Millisecond) // the next report must be received after the transfer
	m.record(&concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: 2},
		Replicas: []*concordpb.ReplicaStatus{{ShardId: 7, ReplicaId: 2, NodeId: 2, IsLeader: true, Term: 3}}})
	if got := m.view(time.Now(), s, nil, nil).LeaderOverride; len(got) != 0 {
		t.Fatalf("a newer report names the leader, yet overrides %v", got)
	}
	m.transferDone(8, 3, t0)
	if got := m.view(t0.Add(s.ReportMaxAge+time.Second), s, nil, nil).LeaderOverride; len(got) != 0 {
		t.Fatalf("a transfer older than ReportMaxAge still overrides: %v", got)
	}
}

// TestKickRepairCoalesces protects the repair loop's wake-up: kicks never
// block the caller (a join, a step's end), and many become one round.
func TestKickRepairCoalesces(t *testing.T) {
	m := placementState{kick: make(chan struct{}, 1)}
	for range 5 {
		m.kickRepair()
	}
	if len(m.kick) != 1 {
		t.Fatalf("%d kicks pending, want 1", len(m.kick))
	}
	var none placementState // a node built without the channel: kicks are dropped
	none.kickRepair()
}

// TestPromotionOfAddedLearner protects the promotion an add-learner step
// makes of its own learner: it names the learner the addition created (by
// its node), via the same leader, at the epoch the addition produced (so
// a change made meanwhile refuses it), and there is none when the new
// descriptor lists no learner on the target.
func TestPromotionOfAddedLearner(t *testing.T) {
	add := scheduler.Step{Kind: scheduler.StepAddLearner, Shard: 3, Via: 1, Epoch: 4, Target: 5}
	voter, learner := concordpb.ReplicaRole_REPLICA_VOTER, concordpb.ReplicaRole_REPLICA_LEARNER
	d := &concordpb.ShardDescriptor{ShardId: 3, Epoch: 5, Replicas: []*concordpb.ReplicaDescriptor{
		{ReplicaId: 1, NodeId: 1, Role: voter}, {ReplicaId: 2, NodeId: 2, Role: voter}, {ReplicaId: 9, NodeId: 5, Role: learner}}}
	got, ok := promotionOf(add, d)
	want := scheduler.Step{Kind: scheduler.StepPromoteLearner, Shard: 3, Via: 1, Epoch: 5, Replica: 9, ReplicaNode: 5}
	if !ok || got != want {
		t.Fatalf("promotion %s (%t), want %s", scheduler.DescribeStep(got), ok, scheduler.DescribeStep(want))
	}
	d.Replicas[2].Role = voter
	if got, ok := promotionOf(add, d); ok {
		t.Fatalf("a voter already on the target: promotion %s", scheduler.DescribeStep(got))
	}
	d.Replicas = d.Replicas[:2]
	if got, ok := promotionOf(add, d); ok {
		t.Fatalf("no replica on the target: promotion %s", scheduler.DescribeStep(got))
	}
	if got, ok := promotionOf(add, nil); ok {
		t.Fatalf("no descriptor: promotion %s", scheduler.DescribeStep(got))
	}
}

// TestRecordNoticesNewLeaders protects the placement leader's trigger for
// a scheduler round on a report: a report names a new leader when it
// names, for some shard, a leader its node's previous report did not
// (none before, or another), and not when it repeats the same leaders or
// names none.
func TestRecordNoticesNewLeaders(t *testing.T) {
	var m placementState
	rep := func(leaders ...uint64) *concordpb.HeartbeatRequest {
		req := &concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: 2}}
		for i, l := range leaders {
			req.Replicas = append(req.Replicas, &concordpb.ReplicaStatus{ShardId: uint64(i + 1), ReplicaId: 2, NodeId: 2, LeaderReplicaId: l})
		}
		return req
	}
	for _, c := range []struct {
		name    string
		req     *concordpb.HeartbeatRequest
		noticed bool
	}{
		{"first report, no leader known", rep(0, 0), false},
		{"a leader elected", rep(1, 0), true},
		{"the same leaders", rep(1, 0), false},
		{"a second shard's leader", rep(1, 3), true},
		{"a transfer", rep(2, 3), true},
		{"a leader lost", rep(0, 3), false},
		{"unchanged again", rep(0, 3), false},
	} {
		if got := m.record(c.req); got != c.noticed {
			t.Errorf("%s: new leader %t, want %t", c.name, got, c.noticed)
		}
	}
}

// TestPlacementViewLearnerAges protects the learner ages the scheduler
// bounds (View.LearnerSince, Settings.LearnerTimeout): a learner's clock
// starts when a view first lists it and runs only while its shard is led
// and the learner reports the same applied index; progress, a missing
// report of it or a shard without a leader restart it (an outage of the
// shard is not the learner's node's fault). It is dropped once the learner
// is promoted or removed, and forgotten when this node stops observing. The
// view's copy is the caller's: changing it changes nothing here.
func TestPlacementViewLearnerAges(t *testing.T) {
	var m placementState
	s := scheduler.DefaultSettings(time.Second)
	voter, learner := concordpb.ReplicaRole_REPLICA_VOTER, concordpb.ReplicaRole_REPLICA_LEARNER
	shard := func(role concordpb.ReplicaRole) []*concordpb.ShardDescriptor {
		return []*concordpb.ShardDescriptor{{ShardId: 7, Replicas: []*concordpb.ReplicaDescriptor{
			{ReplicaId: 1, NodeId: 1, Role: voter}, {ReplicaId: 4, NodeId: 3, Role: role}}}}
	}
	// report sets the nodes' reports, received at: node 1 leads shard 7
	// when led, node 3's learner has applied index applied (none: node 3
	// has no report).
	report := func(at time.Time, led bool, applied uint64, none bool) {
		m.reports = map[ids.NodeID]scheduler.Report{
			1: {At: at, Replicas: []*concordpb.ReplicaStatus{{ShardId: 7, ReplicaId: 1, IsLeader: led, AppliedIndex: 90}}},
		}
		if !none {
			m.reports[3] = scheduler.Report{At: at, Replicas: []*concordpb.ReplicaStatus{{ShardId: 7, ReplicaId: 4, AppliedIndex: applied}}}
		}
	}
	// unhosted sets a fresh report of node 3 that does not list the
	// learner (its first snapshot was refused: it never created it).
	unhosted := func(at time.Time) {
		report(at, true, 0, false)
		m.reports[3] = scheduler.Report{At: at}
	}
	since := func(at time.Time, role concordpb.ReplicaRole) time.Time {
		t.Helper()
		return m.view(at, s, nil, shard(role)).LearnerSince[7][4]
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	report(t0, true, 0, false)
	if got := since(t0, learner); !got.Equal(t0) {
		t.Fatalf("a learner seen first at %v: since %v", t0, got)
	}
	at := t0.Add(time.Hour)
	report(at, true, 0, false)
	v := m.view(at, s, nil, shard(learner))
	if got := v.LearnerSince[7][4]; !got.Equal(t0) {
		t.Fatalf("the same learner an hour later, no progress, its shard led: since %v, want %v", got, t0)
	}
	v.LearnerSince[7][4] = t0.Add(time.Minute)
	if got := since(at, learner); !got.Equal(t0) {
		t.Fatalf("a change to a view's copy reached the state: since %v", got)
	}
	// Progress restarts the count; an hour led without progress adds an
	// hour; an hour without a fresh report from its node, and an hour
	// without a leader of its shard, pause it; an hour led again adds one.
	steps := []struct {
		name     string
		led      bool
		applied  uint64
		noReport bool
		stuck    time.Duration // the count after the step
	}{
		{name: "its applied index moved", led: true, applied: 5, stuck: 0},
		{name: "an hour led, no progress", led: true, applied: 5, stuck: time.Hour},
		{name: "an hour without a fresh report from its node", led: true, applied: 5, noReport: true, stuck: time.Hour},
		{name: "an hour without a leader of its shard", led: false, applied: 5, stuck: time.Hour},
		{name: "an hour led again, no progress", led: true, applied: 5, stuck: 2 * time.Hour},
	}
	for _, c := range steps {
		at = at.Add(time.Hour)
		report(at, c.led, c.applied, c.noReport)
		if got, want := since(at, learner), at.Add(-c.stuck); !got.Equal(want) {
			t.Fatalf("%s: since %v, want %v (stuck for %v)", c.name, got, want, c.stuck)
		}
	}
	// A node that reports but does not host the learner (it could not
	// even create it): applied index 0, no progress, the clock runs.
	at = at.Add(time.Hour)
	unhosted(at)
	if got := since(at, learner); !got.Equal(at) {
		t.Fatalf("first view of the unhosted learner: since %v, want %v (applied 5 -> 0)", got, at)
	}
	unhostedSince := at
	at = at.Add(time.Hour)
	unhosted(at)
	if got := since(at, learner); !got.Equal(unhostedSince) {
		t.Fatalf("a node reporting without the learner an hour on: since %v, want %v (the clock runs)", got, unhostedSince)
	}
	report(at, true, 5, false)
	since(at, learner) // progress: 0 -> 5
	stale := at.Add(s.ReportMaxAge + time.Second)
	if got := since(stale, learner); !got.Equal(stale) {
		t.Fatalf("reports older than ReportMaxAge: since %v, want %v (none fresh: paused at zero)", got, stale)
	}
	at = stale.Add(time.Hour)
	report(at, true, 5, false)
	since(at, voter)
	t1 := at.Add(time.Hour)
	report(t1, true, 5, false)
	if got := since(t1, learner); !got.Equal(t1) {
		t.Fatalf("after a view listing it as a voter: since %v, want %v (seen afresh)", got, t1)
	}
	m.stopObserving()
	t2 := t1.Add(time.Hour)
	report(t2, true, 5, false)
	if got := since(t2, learner); !got.Equal(t2) {
		t.Fatalf("after this node stopped observing: since %v, want %v", got, t2)
	}
}

// TestRepairRecordsStuckLearners protects the executor's record of the
// stuck learners it removed (View.StuckLearners): a removal the scheduler
// marked stuck, once done, names its node for the shard, for
// Settings.LearnerTimeout, so that the shard's next learner goes
// elsewhere; an ordinary removal records nothing.
func TestRepairRecordsStuckLearners(t *testing.T) {
	n := startSoloPlacement(t, testHooks{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := &recordingLeader{release: make(chan struct{})}
	close(l.release) // removals succeed at once
	s := scheduler.DefaultSettings(time.Second)

	plain := scheduler.Step{Kind: scheduler.StepRemoveReplica, Shard: 7, Via: n.ID(), Epoch: 2, Replica: 4, ReplicaNode: 3}
	if !n.runStepOn(ctx, ctx, l, plain) {
		t.Fatal("the removal failed")
	}
	if got := n.placement.view(time.Now(), s, nil, nil).StuckLearners; len(got) != 0 {
		t.Fatalf("an ordinary removal recorded %v", got)
	}
	stuck := plain
	stuck.Stuck = true
	before := time.Now()
	if !n.runStepOn(ctx, ctx, l, stuck) {
		t.Fatal("the removal failed")
	}
	at, ok := n.placement.view(time.Now(), s, nil, nil).StuckLearners[7][3]
	if !ok || at.Before(before) {
		t.Fatalf("a stuck learner's removal from n3: recorded %v (%t), want a time after %v", at, ok, before)
	}
	if got := n.placement.view(at.Add(s.LearnerTimeout), s, nil, nil).StuckLearners[7]; len(got) != 1 {
		t.Fatalf("exactly LearnerTimeout after the removal: %v, want n3 still", got)
	}
	if got := n.placement.view(at.Add(s.LearnerTimeout+time.Nanosecond), s, nil, nil).StuckLearners; len(got) != 0 {
		t.Fatalf("past LearnerTimeout after the removal: %v, want none", got)
	}

	// A stuck removal whose call fails (it may have applied all the same:
	// a timeout after the proposal) still names the node.
	failing := &recordingLeader{release: make(chan struct{})}
	expired, cancelExpired := context.WithCancel(ctx)
	cancelExpired()
	stuck.Shard = 8
	if n.runStepOn(ctx, expired, failing, stuck) {
		t.Fatal("a removal whose call was cancelled reported done")
	}
	if _, ok := n.placement.view(time.Now(), s, nil, nil).StuckLearners[8][3]; !ok {
		t.Fatal("a stuck learner's removal that failed recorded nothing: the node would take the shard's next learner")
	}
}
