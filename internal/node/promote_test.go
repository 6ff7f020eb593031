package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/version"
)

// recordingLeader is a shard leader for the executor (clusterCaller) that
// records the changes asked of it. An add-learner succeeds with a learner
// on the node asked for (running onAdd first, as if something happened
// while it ran); a promotion reports that it is waiting (on waiting, if
// set) and holds, as a leader does for a learner that has not caught up,
// until its context ends or release is closed.
type recordingLeader struct {
	mu      sync.Mutex
	kinds   []concordpb.ChangeKind
	onAdd   func()
	waiting chan struct{}
	release chan struct{}
}

func (l *recordingLeader) ChangeReplicas(ctx context.Context, req *concordpb.ChangeReplicasRequest, _ ...grpc.CallOption) (*concordpb.ChangeReplicasResponse, error) {
	l.mu.Lock()
	l.kinds = append(l.kinds, req.GetKind())
	l.mu.Unlock()
	if req.GetKind() == concordpb.ChangeKind_CHANGE_ADD_LEARNER {
		if l.onAdd != nil {
			l.onAdd()
		}
		return &concordpb.ChangeReplicasResponse{Shard: &concordpb.ShardDescriptor{ShardId: req.GetShardId(), Epoch: req.GetPlannedEpoch() + 1,
			Replicas: []*concordpb.ReplicaDescriptor{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: req.GetAddNodeId(), Role: concordpb.ReplicaRole_REPLICA_LEARNER}}}}, nil
	}
	if l.waiting != nil {
		close(l.waiting)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.release:
		return &concordpb.ChangeReplicasResponse{Shard: &concordpb.ShardDescriptor{ShardId: req.GetShardId(), Epoch: req.GetPlannedEpoch() + 1}}, nil
	}
}

func (l *recordingLeader) TransferLeader(context.Context, *concordpb.TransferLeaderRequest, ...grpc.CallOption) (*concordpb.TransferLeaderResponse, error) {
	return nil, errors.New("not expected")
}

func (l *recordingLeader) asked() []concordpb.ChangeKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]concordpb.ChangeKind(nil), l.kinds...)
}

// joinReported registers a node at a fresh address with the placement
// leader n and records a heartbeat from it, so that n judges it UP.
func joinReported(t *testing.T, n *Node, addr string) ids.NodeID {
	t.Helper()
	id, _, err := n.addNode(context.Background(), addr, nil, version.Base)
	if err != nil {
		t.Fatal(err)
	}
	n.placement.record(&concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: uint64(id), Address: addr}})
	if err := n.promotable(context.Background(), id); err != nil {
		t.Fatalf("a node that just reported: %v", err)
	}
	return id
}

// TestPromotionRechecksTheNode protects the executor's promotions against
// a node that changed since the promotion was planned: a learner on a
// node that is no longer UP (here marked LEAVING by a removal) is not
// promoted, whether the promotion is the scheduler's step, an add-learner
// step's own promotion after the node changed during the addition, or a
// promotion the leader is holding for the learner to catch up when the
// node changes. A voter there would raise the quorum with a vote that may
// never come.
func TestPromotionRechecksTheNode(t *testing.T) {
	n := startSoloPlacement(t, testHooks{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The scheduler's promotion, executed once the node is LEAVING.
	a := joinReported(t, n, "127.0.0.1:1")
	if _, err := n.removeNode(ctx, a); err != nil {
		t.Fatal(err)
	}
	l := &recordingLeader{}
	promote := scheduler.Step{Kind: scheduler.StepPromoteLearner, Shard: 7, Via: n.ID(), Epoch: 2, Replica: 2, ReplicaNode: a}
	if n.runStepOn(ctx, ctx, l, promote) || len(l.asked()) != 0 {
		t.Fatalf("promotion of a learner on a LEAVING node: asked the leader for %v", l.asked())
	}

	// An add-learner step on an UP node, which is marked LEAVING while
	// the addition runs: its own promotion does not follow.
	b := joinReported(t, n, "127.0.0.1:2")
	l = &recordingLeader{onAdd: func() {
		if _, err := n.removeNode(ctx, b); err != nil {
			t.Error(err)
		}
	}}
	add := scheduler.Step{Kind: scheduler.StepAddLearner, Shard: 8, Via: n.ID(), Epoch: 1, Target: b}
	if !n.runStepOn(ctx, ctx, l, add) {
		t.Fatal("the addition failed")
	}
	if got := l.asked(); len(got) != 1 {
		t.Fatalf("asked the leader for %v; want the addition only", got)
	}

	// A promotion the leader holds (the learner catching up) while its
	// node is marked LEAVING: the request is withdrawn. Were it not, the
	// leader would promote once released.
	c := joinReported(t, n, "127.0.0.1:3")
	l = &recordingLeader{waiting: make(chan struct{}), release: make(chan struct{})}
	promote.ReplicaNode = c
	done := make(chan bool, 1)
	go func() { done <- n.runStepOn(ctx, ctx, l, promote) }()
	<-l.waiting
	if _, err := n.removeNode(ctx, c); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-done:
		if ok {
			t.Fatal("promoted a learner whose node became LEAVING during the wait")
		}
	case <-time.After(5 * time.Second):
		close(l.release)
		if <-done {
			t.Fatal("the promotion went on after the learner's node became LEAVING")
		}
	}
}
