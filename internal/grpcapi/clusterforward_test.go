package grpcapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
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

// TestClientDoesNotRepeatAnUnknownChange protects a ChangeReplicas whose
// forward broke after the shard's leader received it: the client must
// report the outcome unknown (ErrAmbiguous), not ask the next node (here
// f3, which leads the shard in its own view, as a new leader would, and
// makes any change it is asked). A real leader refuses a repeat of a
// change made (the node already holds a replica; Aborted with
// planned_epoch), which the caller would read as a change not made, or,
// without planned_epoch, makes it again if it was undone meanwhile.
// The same holds when the client's own connection to the leader breaks.
func TestClientDoesNotRepeatAnUnknownChange(t *testing.T) {
	for _, via := range []string{"forwarded", "direct"} {
		t.Run(via, func(t *testing.T) {
			f1, f2, f3, cut := brokenChangeForward(t)
			first := f1.addrs[1]
			if via == "direct" {
				first = f2.addrs[2]
			}
			c := newAdminClient(t, first, f3.addrs[3])
			errs := make(chan error, 1)
			go func() {
				_, err := c.ChangeReplicas(context.Background(), addLearner)
				errs <- err
			}()
			cut()
			err := <-errs
			if !errors.Is(err, client.ErrAmbiguous) {
				t.Errorf("ChangeReplicas: %v; want ErrAmbiguous", err)
			}
			if n := f3.changing.Load(); n != 0 {
				t.Errorf("the client asked the next node %d times after the first may have made the change", n)
			}
		})
	}
}

// TestClientRetriesAChangeRefusedBeforeSending protects the other side: a
// node that could not forward the change at all (no address for the
// leader) refused it, so the client asks the next node.
func TestClientRetriesAChangeRefusedBeforeSending(t *testing.T) {
	f1, f3 := newFakeNode(t, 1, 1, 2), newFakeNode(t, 3, 1, 3)
	serve(t, f1)
	serve(t, f3)
	c := newAdminClient(t, f1.addrs[1], f3.addrs[3])
	if _, err := c.ChangeReplicas(context.Background(), addLearner); err != nil {
		t.Fatalf("ChangeReplicas: %v; want the next node's answer", err)
	}
	if n := f3.changing.Load(); n != 1 {
		t.Fatalf("the next node made %d changes; want 1", n)
	}
}

// newAdminClient is a client that asks the nodes at addrs in that order.
func newAdminClient(t *testing.T, addrs ...string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewWithOptions(ctx, client.Options{Endpoints: addrs, Unary: true, AttemptTimeout: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClientRemoveAfterAnUnknownMarkIsAmbiguous protects `concord node
// remove` when its first request was sent and not answered: asking the
// next node is harmless (a LEAVING node marked LEAVING again is success),
// but a refusal from it may come from the first request's own mark (the
// node drained and became REMOVED meanwhile), so it is reported as an
// unknown outcome, not as a removal refused.
func TestClientRemoveAfterAnUnknownMarkIsAmbiguous(t *testing.T) {
	f1, f2, f3 := newFakeNode(t, 1, 1, 2), newFakeNode(t, 2, 1, 2), newFakeNode(t, 3, 1, 3)
	f2.removeGate = make(chan struct{})
	f3.proposeErr = status.Error(codes.FailedPrecondition, "node 4: it was removed, which is final")
	srv2 := serveGRPC(t, f2, f1)
	t.Cleanup(func() { close(f2.removeGate) })
	serve(t, f1, f2)
	serve(t, f3)
	c := newAdminClient(t, f1.addrs[1], f3.addrs[3])
	errs := make(chan error, 1)
	go func() {
		_, err := c.RemoveNode(context.Background(), 4)
		errs <- err
	}()
	waitCount(t, "removals reached the placement leader", 1, f2.removing.Load)
	go srv2.Stop()
	err := <-errs
	if !errors.Is(err, client.ErrAmbiguous) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RemoveNode: %v; want ErrAmbiguous wrapping the next node's refusal", err)
	}
	if n := f3.removing.Load(); n != 1 {
		t.Fatalf("the next node was asked %d times; want 1", n)
	}
}
