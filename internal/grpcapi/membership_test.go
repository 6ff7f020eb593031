package grpcapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// TestCheckChange protects ChangeReplicas validation: each kind takes
// exactly the fields it needs into the Change the node executes, and a
// request with a missing or a foreign field, or an unknown kind, is
// refused as InvalidArgument before anything reaches raft.
func TestCheckChange(t *testing.T) {
	type req = concordpb.ChangeReplicasRequest
	good := []struct {
		req  *req
		want Change
	}{
		{&req{ShardId: 2, RemoveReplicaId: 3, AddNodeId: 4}, Change{Kind: concordpb.ChangeKind_CHANGE_REPLACE, Shard: 2, Replica: 3, Node: 4}},
		{&req{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, AddNodeId: 4, PlannedEpoch: 7},
			Change{Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, Shard: 2, Node: 4, Epoch: 7}},
		{&req{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_PROMOTE, ReplicaId: 5}, Change{Kind: concordpb.ChangeKind_CHANGE_PROMOTE, Shard: 2, Replica: 5}},
		{&req{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_REMOVE, ReplicaId: 5, PlannedEpoch: 1},
			Change{Kind: concordpb.ChangeKind_CHANGE_REMOVE, Shard: 2, Replica: 5, Epoch: 1}},
	}
	for _, c := range good {
		got, err := checkChange(c.req)
		if err != nil || got != c.want {
			t.Errorf("checkChange(%v) = %+v, %v; want %+v", c.req, got, err, c.want)
		}
	}
	for _, r := range []*req{
		{ShardId: 2},
		{ShardId: 2, RemoveReplicaId: 3},
		{ShardId: 2, RemoveReplicaId: 3, AddNodeId: 4, ReplicaId: 1},
		{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER},
		{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, AddNodeId: 4, ReplicaId: 1},
		{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_PROMOTE},
		{ShardId: 2, Kind: concordpb.ChangeKind_CHANGE_REMOVE, ReplicaId: 1, AddNodeId: 4},
		{ShardId: 2, Kind: 9, ReplicaId: 1},
	} {
		if got, err := checkChange(r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("checkChange(%v) = %+v, %v; want InvalidArgument", r, got, err)
		}
	}
}

// TestTransferTarget protects TransferLeader's target: exactly one of
// replica and node names it, and it must be in the leader's descriptor.
func TestTransferTarget(t *testing.T) {
	d := &concordpb.ShardDescriptor{ShardId: 2, Replicas: []*concordpb.ReplicaDescriptor{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 5, NodeId: 3}}}
	for _, r := range []*concordpb.TransferLeaderRequest{{ShardId: 2}, {ShardId: 2, ReplicaId: 5, NodeId: 3}} {
		if err := checkTransfer(r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("checkTransfer(%v) = %v, want InvalidArgument", r, err)
		}
	}
	for _, r := range []*concordpb.TransferLeaderRequest{{ShardId: 2, ReplicaId: 5}, {ShardId: 2, NodeId: 3}} {
		rep, node, err := transferTarget(d, r)
		if err != nil || rep != 5 || node != ids.NodeID(3) {
			t.Errorf("transferTarget(%v) = %d@%d, %v; want 5@3", r, rep, node, err)
		}
	}
	for _, r := range []*concordpb.TransferLeaderRequest{{ShardId: 2, ReplicaId: 4}, {ShardId: 2, NodeId: 2}} {
		if _, _, err := transferTarget(d, r); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("transferTarget(%v) = %v, want FailedPrecondition", r, err)
		}
	}
}

// TestAdminCallOnAMissingShard protects the answer to a leader transfer or
// a membership change of a shard the node does not know of (`concord
// leader transfer 99 1` on 16 shards): Unavailable naming the shard and
// where the shards are listed, not the "placement leader unknown" that
// forwarding to no leader gave, which sent the operator looking for an
// outage; not NotFound either, which the client takes as final, since a
// node's list can lack shards for a while after it starts (the client asks
// each node once). A shard that exists but has no known leader yet is
// Unavailable naming that shard.
func TestAdminCallOnAMissingShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := concordpb.NewClusterClient(serve(t, newFakeNode(t, 1, 2, 1)))
	_, err := c.TransferLeader(ctx, &concordpb.TransferLeaderRequest{ShardId: 99, NodeId: 1})
	wantStatusPart(t, "TransferLeader of shard 99", err, codes.Unavailable, "shard 99 is not among the shards this node knows")
	_, err = c.ChangeReplicas(ctx, &concordpb.ChangeReplicasRequest{ShardId: 99, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER, AddNodeId: 2})
	wantStatusPart(t, "ChangeReplicas of shard 99", err, codes.Unavailable, "shard 99 is not among the shards this node knows")

	leaderless := concordpb.NewClusterClient(serve(t, newFakeNode(t, 1, 2, 0)))
	_, err = leaderless.TransferLeader(ctx, &concordpb.TransferLeaderRequest{ShardId: 2, NodeId: 1})
	wantStatusPart(t, "TransferLeader of leaderless shard 2", err, codes.Unavailable, "shard 2: no leader known yet")
}

func wantStatusPart(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if st := status.Convert(err); st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Errorf("%s: got %v %q; want %v containing %q", what, st.Code(), st.Message(), code, msg)
	}
}
