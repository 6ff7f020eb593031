package grpcapi

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestAdminRefusesWithoutFaultInjection protects production nodes: unless
// started with --enable-fault-injection, no Admin call reaches the hooks.
func TestAdminRefusesWithoutFaultInjection(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	conn := serve(t, f) // serve registers Admin disabled
	admin := concordpb.NewAdminClient(conn)
	ctx := context.Background()
	const refusal = "fault injection is disabled on this node (start it with --enable-fault-injection)"
	_, err := admin.Die(ctx, &concordpb.DieRequest{Clean: true})
	wantStatus(t, err, codes.PermissionDenied, refusal)
	_, err = admin.Partition(ctx, &concordpb.PartitionRequest{Reachable: []string{"a:1"}})
	wantStatus(t, err, codes.PermissionDenied, refusal)
	_, err = admin.Heal(ctx, &concordpb.HealRequest{})
	wantStatus(t, err, codes.PermissionDenied, refusal)
	_, err = admin.DiskLow(ctx, &concordpb.DiskLowRequest{Low: true})
	wantStatus(t, err, codes.PermissionDenied, refusal)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.died)+len(f.partitions)+f.heals+len(f.diskLow) != 0 {
		t.Fatal("a refused Admin call reached the node")
	}
}

// TestAdminCallsTheHooksWhenEnabled protects the mapping of each Admin call
// onto the node's fault-injection hooks.
func TestAdminCallsTheHooksWhenEnabled(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	admin := NewAdmin(f, true)
	ctx := context.Background()
	if _, err := admin.Die(ctx, &concordpb.DieRequest{Clean: false}); err != nil {
		t.Fatal(err)
	}
	resp, err := admin.Partition(ctx, &concordpb.PartitionRequest{Reachable: []string{"a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Heal(ctx, &concordpb.HealRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, low := range []bool{true, false} {
		if _, err := admin.DiskLow(ctx, &concordpb.DiskLowRequest{Low: low}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(f.died, []bool{false}) || len(f.partitions) != 1 || f.partitions[0][0] != "a:1" ||
		!slices.Equal(resp.GetBlockedNodeIds(), []uint64{3}) || f.heals != 1 || !slices.Equal(f.diskLow, []bool{true, false}) {
		t.Fatalf("died=%v partitions=%v blocked=%v heals=%d diskLow=%v", f.died, f.partitions, resp.GetBlockedNodeIds(), f.heals, f.diskLow)
	}
}

// TestAdminDiskLowRefusedWhenTheGuardIsOff protects tests that rely on the
// space fault: a node whose space guard is off (where the fault would do
// nothing) answers FailedPrecondition with its reason, not OK.
func TestAdminDiskLowRefusedWhenTheGuardIsOff(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	f.diskLowErr = errors.New("the disk space guard is off on this node")
	_, err := NewAdmin(f, true).DiskLow(context.Background(), &concordpb.DiskLowRequest{Low: true})
	wantStatus(t, err, codes.FailedPrecondition, "the disk space guard is off on this node")
}
