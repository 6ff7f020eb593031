package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
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
// bounds (View.LearnerSince, Settings.LearnerTimeout): a learner's time
// is when a view first listed it, kept while it stays a learner, dropped
// once it is promoted or removed, and forgotten when this node stops
// observing (a new placement leadership counts from its own first view).
// The view's copy is the caller's: changing it changes nothing here.
func TestPlacementViewLearnerAges(t *testing.T) {
	var m placementState
	s := scheduler.DefaultSettings(time.Second)
	voter, learner := concordpb.ReplicaRole_REPLICA_VOTER, concordpb.ReplicaRole_REPLICA_LEARNER
	shard := func(role concordpb.ReplicaRole) []*concordpb.ShardDescriptor {
		return []*concordpb.ShardDescriptor{{ShardId: 7, Replicas: []*concordpb.ReplicaDescriptor{
			{ReplicaId: 1, NodeId: 1, Role: voter}, {ReplicaId: 4, NodeId: 3, Role: role}}}}
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := m.view(t0, s, nil, shard(learner)).LearnerSince[7][4]; !got.Equal(t0) {
		t.Fatalf("a learner seen first at %v: since %v", t0, got)
	}
	v := m.view(t0.Add(time.Hour), s, nil, shard(learner))
	if got := v.LearnerSince[7][4]; !got.Equal(t0) {
		t.Fatalf("the same learner an hour later: since %v, want %v", got, t0)
	}
	v.LearnerSince[7][4] = t0.Add(time.Minute)
	if got := m.view(t0.Add(time.Hour), s, nil, shard(learner)).LearnerSince[7][4]; !got.Equal(t0) {
		t.Fatalf("a change to a view's copy reached the state: since %v", got)
	}
	m.view(t0.Add(2*time.Hour), s, nil, shard(voter))
	t1 := t0.Add(3 * time.Hour)
	if got := m.view(t1, s, nil, shard(learner)).LearnerSince[7][4]; !got.Equal(t1) {
		t.Fatalf("after a view listing it as a voter: since %v, want %v (seen afresh)", got, t1)
	}
	m.stopObserving()
	t2 := t0.Add(4 * time.Hour)
	if got := m.view(t2, s, nil, shard(learner)).LearnerSince[7][4]; !got.Equal(t2) {
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
}
