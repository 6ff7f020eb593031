package node

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
)

// TestCallFromAnotherClusterRefused protects a node from a member of
// another cluster that reaches it at an address its own cluster once gave
// a member (a wiped node restarted without --join bootstraps a cluster of
// its own at that address). The raft transport refuses such traffic by its
// cluster id; the node-to-node gRPC calls must too. Before, node 1 of
// cluster X heartbeating to "node 2" at that address was answered by
// cluster Y's placement leader, and took Y's address book (Y's node 1 at
// Y's address: its own id at a stranger's address) and Y's routes.
func TestCallFromAnotherClusterRefused(t *testing.T) {
	x := startSoloPlacement(t, testHooks{})
	y := startSoloPlacement(t, testHooks{})
	if x.ident.Load().GetClusterId() == y.ident.Load().GetClusterId() {
		t.Fatal("two clusters with one id")
	}
	// X believes its node 2 is at the address Y's node serves on.
	if err := x.book.update(x.eng, []*concordpb.NodeDescriptor{{NodeId: 2, Address: y.Addr()}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, cctx, err := grpcapi.ClusterClientFor(ctx, x.backend(), 2)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Heartbeat(cctx, &concordpb.HeartbeatRequest{Node: x.book.get(x.ID()), Version: uint32(x.level())})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a heartbeat from cluster X's node to cluster Y's: %v, nodes %v; want FailedPrecondition", err, resp.GetNodes())
	}
	// Within one cluster the call goes through: Y's node to itself, over
	// its own peer connection (stamped with Y's cluster id).
	conn, err := y.conns.get(y.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := concordpb.NewClusterClient(conn).Heartbeat(ctx, &concordpb.HeartbeatRequest{Node: y.book.get(y.ID())}); err != nil {
		t.Fatalf("heartbeat within cluster Y: %v", err)
	}
}
