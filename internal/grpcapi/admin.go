package grpcapi

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// Admin implements the Admin (fault injection) service. It refuses
// everything unless the node runs with --enable-fault-injection.
type Admin struct {
	concordpb.UnimplementedAdminServer
	f       Faults
	enabled bool
}

// NewAdmin returns the Admin service calling f; unless enabled, it refuses
// every call with PermissionDenied.
func NewAdmin(f Faults, enabled bool) *Admin { return &Admin{f: f, enabled: enabled} }

func (s *Admin) check() error {
	if !s.enabled {
		return status.Error(codes.PermissionDenied, "fault injection is disabled on this node (start it with --enable-fault-injection)")
	}
	return nil
}

// Die stops the node; the answer goes out before the process ends.
func (s *Admin) Die(_ context.Context, req *concordpb.DieRequest) (*concordpb.DieResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	s.f.Die(req.GetClean())
	return &concordpb.DieResponse{}, nil
}

// Partition cuts the node off from every peer not in req's reachable list.
func (s *Admin) Partition(_ context.Context, req *concordpb.PartitionRequest) (*concordpb.PartitionResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	blocked := s.f.Partition(req.GetReachable())
	ns := make([]uint64, len(blocked))
	for i, n := range blocked {
		ns[i] = uint64(n)
	}
	return &concordpb.PartitionResponse{BlockedNodeIds: ns}, nil
}

// Heal ends a partition.
func (s *Admin) Heal(context.Context, *concordpb.HealRequest) (*concordpb.HealResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	s.f.Heal()
	return &concordpb.HealResponse{}, nil
}

// DiskLow makes the node read its disk as full (req.low) or measure it
// again. A node whose space guard is off refuses (FailedPrecondition): the
// fault would change nothing, and a test relying on it would check nothing.
func (s *Admin) DiskLow(_ context.Context, req *concordpb.DiskLowRequest) (*concordpb.DiskLowResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.f.DiskLow(req.GetLow()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &concordpb.DiskLowResponse{}, nil
}
