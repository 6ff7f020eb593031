package grpcapi

import (
	"context"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/internal/ids"
)

// fromNodeKey is the metadata key naming the node that sent a node-to-node
// call, so a partitioned node can refuse calls from peers it is cut off from.
const fromNodeKey = "concord-from-node"

// StampFromNode returns the client interceptor of node-to-node connections:
// it names the calling node, id(), once it has an id.
func StampFromNode(id func() ids.NodeID) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if id := id(); id != 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, fromNodeKey, strconv.FormatUint(uint64(id), 10))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// DropPartitioned returns the server interceptor that refuses calls from
// peers a fault-injected partition cuts off (blocked says which). Client
// calls carry no node id and always pass.
func DropPartitioned(blocked func(node ids.NodeID) bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, fromNodeKey); len(v) > 0 {
			if from, err := strconv.ParseUint(v[0], 10, 64); err == nil && blocked(ids.NodeID(from)) {
				return nil, status.Errorf(codes.Unavailable, "partitioned from node %d (fault injection)", from)
			}
		}
		return handler(ctx, req)
	}
}

// clusterKey is the metadata key carrying the calling node's cluster id
// on node-to-node calls.
const clusterKey = "concord-cluster"

// StampCluster returns the client interceptor of node-to-node connections
// that names the calling node's cluster, cluster(), once it has one (a
// joining node has none).
func StampCluster(cluster func() uint64) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if id := cluster(); id != 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, clusterKey, strconv.FormatUint(id, 16))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// RefuseOtherCluster returns the server interceptor that refuses, with
// FailedPrecondition, a node-to-node call from a node of another cluster:
// one that reached this node at an address its own cluster gave a member
// that is gone. Answered, a heartbeat would give it this cluster's address
// book and routes. The raft transport refuses such traffic the same way.
// Client calls carry no cluster id and always pass, as do calls while this
// node has none.
func RefuseOtherCluster(cluster func() uint64) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, clusterKey); len(v) > 0 {
			from, err := strconv.ParseUint(v[0], 16, 64)
			if own := cluster(); err != nil || (own != 0 && from != own) {
				return nil, status.Errorf(codes.FailedPrecondition,
					"a node of cluster %s called a node of cluster %x: the caller's address book is stale", v[0], own)
			}
		}
		return handler(ctx, req)
	}
}
