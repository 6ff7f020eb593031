package grpcapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// addLearner is a ChangeReplicas without planned_epoch, as the client
// lets a caller send it: nothing but the node's checks stands between a
// repeat and a second change.
var addLearner = &concordpb.ChangeReplicasRequest{ShardId: 1, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, AddNodeId: 4}

// brokenChangeForward starts f1, which forwards shard 1's changes to its
// leader f2, and f3, which leads shard 1 itself (another node the client
// could ask), and returns a function that cuts f2 off once a change has
// reached it.
func brokenChangeForward(t *testing.T) (f1, f2, f3 *fakeNode, cut func()) {
	f1, f2, f3 = newFakeNode(t, 1, 1, 2), newFakeNode(t, 2, 1, 2), newFakeNode(t, 3, 1, 3)
	f2.changeGate = make(chan struct{})
	srv2 := serveGRPC(t, f2, f1)
	t.Cleanup(func() { close(f2.changeGate) }) // first: f2's handler returns
	serve(t, f1, f2)
	serve(t, f3)
	return f1, f2, f3, func() {
		waitCount(t, "changes reached the leader", 1, f2.changing.Load)
		go srv2.Stop()
	}
}

// TestBrokenClusterForwardSaysSent protects the answer of an admin call a
// node forwarded whose connection broke after the leader received it:
// Unavailable saying the request was sent, as a KV forward's, not gRPC's
// bare Unavailable, which reads as a refusal.
func TestBrokenClusterForwardSaysSent(t *testing.T) {
	f1, _, _, cut := brokenChangeForward(t)
	c1 := concordpb.NewClusterClient(serve(t, f1))
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c1.ChangeReplicas(ctx, addLearner)
		errs <- err
	}()
	cut()
	st := status.Convert(<-errs)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "after the request was sent") {
		t.Fatalf("got %v %q; want Unavailable saying the request was sent (outcome unknown)", st.Code(), st.Message())
	}
}
