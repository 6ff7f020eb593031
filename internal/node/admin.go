package node

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// adminService implements the Admin (fault injection) service. It refuses
// everything unless the node runs with --enable-fault-injection.
type adminService struct {
	concordpb.UnimplementedAdminServer
	n *Node
}

func (s *adminService) check() error {
	if !s.n.cfg.EnableFaultInjection {
		return status.Error(codes.PermissionDenied, "fault injection is disabled on this node (start it with --enable-fault-injection)")
	}
	return nil
}

func (s *adminService) Die(_ context.Context, req *concordpb.DieRequest) (*concordpb.DieResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	n := s.n
	if req.GetClean() {
		n.log.Warn("fault injection: clean die requested")
		go func() {
			n.Shutdown(5 * time.Second)
			os.Exit(0)
		}()
	} else {
		n.log.Warn("fault injection: unclean die requested; exiting now")
		// Reply first so the caller sees success, then die as kill -9 would:
		// no deferred work, nothing flushed.
		go func() {
			time.Sleep(20 * time.Millisecond)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}()
	}
	return &concordpb.DieResponse{}, nil
}

func (s *adminService) Partition(_ context.Context, req *concordpb.PartitionRequest) (*concordpb.PartitionResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	n := s.n
	reach := map[string]bool{n.cfg.Addr: true}
	for _, a := range req.GetReachable() {
		reach[a] = true
	}
	n.reachable.Store(&reach)
	resp := &concordpb.PartitionResponse{}
	for _, d := range n.book.all() {
		if n.blocked(d.GetNodeId()) {
			resp.BlockedNodeIds = append(resp.BlockedNodeIds, d.GetNodeId())
		}
	}
	n.log.Warn("fault injection: partitioned", "reachable", req.GetReachable(), "blocked_nodes", resp.BlockedNodeIds)
	return resp, nil
}

func (s *adminService) Heal(context.Context, *concordpb.HealRequest) (*concordpb.HealResponse, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	s.n.reachable.Store(nil)
	s.n.log.Warn("fault injection: healed")
	return &concordpb.HealResponse{}, nil
}

// blocked reports whether a partition cuts this node off from node.
func (n *Node) blocked(node uint64) bool {
	reach := n.reachable.Load()
	if reach == nil || node == n.ID() {
		return false
	}
	addr, ok := n.book.resolve(node)
	return !ok || !(*reach)[addr]
}

// fromNodeKey is the metadata key naming the node that sent a node-to-node
// call, so a partitioned node can refuse calls from peers it is cut off from.
const fromNodeKey = "concord-from-node"

// stampFromNode is the client interceptor of node-to-node connections.
func (n *Node) stampFromNode(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := n.ID(); id != 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, fromNodeKey, strconv.FormatUint(id, 10))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// dropPartitioned is the server interceptor that refuses calls from peers a
// partition cuts off. Client calls carry no node id and always pass.
func (n *Node) dropPartitioned(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if n.reachable.Load() != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(fromNodeKey); len(v) > 0 {
			if from, err := strconv.ParseUint(v[0], 10, 64); err == nil && n.blocked(from) {
				return nil, status.Errorf(codes.Unavailable, "partitioned from node %d (fault injection)", from)
			}
		}
	}
	return handler(ctx, req)
}
