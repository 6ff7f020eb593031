package client

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// adminNode is a fake node that answers RoutingTable (while rtStalls is
// false) and lets every other Cluster and Backup call wait for its
// caller's deadline, or answers Status with status, so that the client's
// helpers run out of their deadlines.
type adminNode struct {
	concordpb.UnimplementedClusterServer
	concordpb.UnimplementedBackupServer
	rt       *concordpb.RoutingTableResponse
	rtStalls atomic.Bool
	status   error
}

func (f *adminNode) RoutingTable(ctx context.Context, _ *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	if f.rtStalls.Load() {
		return nil, waitDeadline(ctx)
	}
	return f.rt, nil
}

func (f *adminNode) Status(context.Context, *concordpb.StatusRequest) (*concordpb.StatusResponse, error) {
	return nil, f.status
}

func (f *adminNode) TransferLeader(ctx context.Context, _ *concordpb.TransferLeaderRequest) (*concordpb.TransferLeaderResponse, error) {
	return nil, waitDeadline(ctx)
}

func (f *adminNode) ChangeReplicas(ctx context.Context, _ *concordpb.ChangeReplicasRequest) (*concordpb.ChangeReplicasResponse, error) {
	return nil, waitDeadline(ctx)
}

func (f *adminNode) RemoveNode(ctx context.Context, _ *concordpb.RemoveNodeRequest) (*concordpb.RemoveNodeResponse, error) {
	return nil, waitDeadline(ctx)
}

func (f *adminNode) Shard(_ *concordpb.BackupShardRequest, s grpc.ServerStreamingServer[concordpb.BackupShardChunk]) error {
	return waitDeadline(s.Context())
}

// waitDeadline waits for ctx to end, as a node that never answers.
func waitDeadline(ctx context.Context) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// TestHelpersDeadlineErrors protects the same error from the client's
// other calls that end at their deadline: New and Status (which retry
// Unavailable until it), and the helpers that ask one node after another
// (RoutingTable, TransferLeader, ChangeReplicas, RemoveNode) or stream
// (BackupShard) when the node does not answer in time. Each once returned
// the last attempt's error alone, or its text: errors.Is(err,
// context.DeadlineExceeded) was false, or status.Code Unknown.
func TestHelpersDeadlineErrors(t *testing.T) {
	l := listen(t)
	unavailable := status.Error(codes.Unavailable, "no placement leader known")
	f := &adminNode{status: unavailable, rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := newServer(t)
	concordpb.RegisterClusterServer(s, f)
	concordpb.RegisterBackupServer(s, f)
	go s.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := New(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(op func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		return op(ctx)
	}

	err = call(func(ctx context.Context) error { _, err := c.Status(ctx); return err })
	// A call cut at its deadline (last: nil) fails DeadlineExceeded with
	// gRPC's words, or the server's ("stream terminated by RST_STREAM").
	checkRetriedDeadlineErr(t, "Status", err, unavailable)
	err = call(func(ctx context.Context) error { _, err := c.StaleStatus(ctx); return err })
	checkRetriedDeadlineErr(t, "StaleStatus", err, unavailable)
	err = call(func(ctx context.Context) error { _, err := c.TransferLeader(ctx, 1, 1); return err })
	checkDeadlineErr(t, "TransferLeader", err, nil, codes.DeadlineExceeded)
	err = call(func(ctx context.Context) error {
		_, err := c.ChangeReplicas(ctx, &concordpb.ChangeReplicasRequest{ShardId: 1})
		return err
	})
	checkDeadlineErr(t, "ChangeReplicas", err, nil, codes.DeadlineExceeded)
	if !errors.Is(err, ErrAmbiguous) {
		t.Errorf("ChangeReplicas sent and never answered: %v; want ErrAmbiguous", err)
	}
	err = call(func(ctx context.Context) error { _, err := c.RemoveNode(ctx, 1); return err })
	checkDeadlineErr(t, "RemoveNode", err, nil, codes.DeadlineExceeded)
	err = call(func(ctx context.Context) error {
		return c.BackupShard(ctx, 1, func(*concordpb.BackupShardChunk) error { return nil })
	})
	checkDeadlineErr(t, "BackupShard", err, nil, codes.DeadlineExceeded)
	f.rtStalls.Store(true)
	err = call(func(ctx context.Context) error { _, err := c.RoutingTable(ctx); return err })
	checkDeadlineErr(t, "RoutingTable", err, nil, codes.DeadlineExceeded)
}

// checkRetriedDeadlineErr checks the deadline error of a call retried on
// last until its deadline: the deadline may cut the final attempt in
// flight (under load it does), and then that attempt's DeadlineExceeded
// is the last error, as TestDeadlineErrorKeepsTheLastAttempts allows too.
func checkRetriedDeadlineErr(t *testing.T, what string, err, last error) {
	t.Helper()
	if status.Code(err) == codes.DeadlineExceeded {
		checkDeadlineErr(t, what, err, nil, codes.DeadlineExceeded)
		return
	}
	checkDeadlineErr(t, what, err, last, status.Code(last))
}

// TestNewDeadlineError protects New's error when no node answers until its
// deadline (here a closed port): it wraps context.DeadlineExceeded and the
// last attempt's Unavailable, and says which.
func TestNewDeadlineError(t *testing.T) {
	l := listen(t)
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := New(ctx, addr)
	if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "connection refused") || !strings.HasPrefix(err.Error(), "concord: no node answered with a routing table: ") {
		t.Fatalf("New of a closed port: %v (code %v); want a routing-table error wrapping context.DeadlineExceeded, code Unavailable, saying connection refused",
			err, status.Code(err))
	}
}
