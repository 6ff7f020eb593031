package grpcapi

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/version"
)

// Cluster implements the Cluster gRPC service. Requests that need the
// placement service (Join, Heartbeat, Status) are served by the meta shard's
// leader; other nodes forward them there.
type Cluster struct {
	concordpb.UnimplementedClusterServer
	b ClusterBackend
}

// NewCluster returns the Cluster service of b.
func NewCluster(b ClusterBackend) *Cluster { return &Cluster{b: b} }

// Probe answers a fresh node deciding whether to bootstrap; it works before
// this node has an identity.
func (s *Cluster) Probe(_ context.Context, req *concordpb.ProbeRequest) (*concordpb.ProbeResponse, error) {
	return s.b.AnswerProbe(req), nil
}

// Join gives a node with an empty data dir a new node id.
func (s *Cluster) Join(ctx context.Context, req *concordpb.JoinRequest) (*concordpb.JoinResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if req.GetAddress() == "" {
		return nil, invalid("join needs the joining node's address")
	}
	// Before anything else: when the joiner replaces the meta shard's
	// leader, this is what lets the meta shard elect, and so the join
	// succeed, without waiting for an election timeout.
	s.b.AddressRejoining(req.GetAddress())
	if leader, local := s.b.Leader(routing.MetaShard); !local {
		node := s.placementLeaderHint(leader)
		return forward(ctx, node, func(ctx context.Context) (*concordpb.JoinResponse, error) {
			c, fctx, err := ClusterClientFor(ctx, s.b, node)
			if err != nil {
				return nil, err
			}
			return c.Join(fctx, req)
		})
	}
	if len(req.GetJoinToken()) > 64 {
		return nil, invalid("join token longer than 64 bytes")
	}
	if scheme := s.b.Table().Scheme(); scheme > req.GetMaxKeyHash() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"this cluster hashes keys by scheme %d (key_hash: hash tags), which the joining node's binary does not know (it knows up to %d): "+
				"run a newer binary on it; a node that hashed keys otherwise would make its replicas diverge", scheme, req.GetMaxKeyHash())
	}
	// Checked here too, under a lock against a raise of the version
	// (node.addNode).
	joiner := max(version.Base, version.Level(req.GetVersion()))
	if cv := s.b.ClusterVersion(); joiner < cv {
		return nil, status.Error(codes.FailedPrecondition, version.JoinRefusal(cv, joiner))
	}
	id, nodes, err := s.b.AddNode(ctx, req.GetAddress(), req.GetJoinToken(), joiner)
	if err != nil {
		return nil, toStatus(err)
	}
	return &concordpb.JoinResponse{ClusterId: s.b.ClusterID(), NodeId: uint64(id), Nodes: nodes}, nil
}

// RemoveNode starts draining a node, at the placement leader.
func (s *Cluster) RemoveNode(ctx context.Context, req *concordpb.RemoveNodeRequest) (*concordpb.RemoveNodeResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if req.GetNodeId() == 0 {
		return nil, invalid("remove node needs a node id")
	}
	// Like a write (KV.Batch), the mark is proposed again, routed afresh,
	// when raft dropped it: it never reached the log, so nothing applied.
	// The scheduler moves the meta shard's leadership about on its own
	// (balancing leaders onto a node that just came up, say), and raft
	// drops every proposal while a transfer is under way.
	retryUntil := time.Now().Add(leaderWait)
	for {
		if leader, local := s.b.Leader(routing.MetaShard); !local {
			// A request forwarded as far as it may go was sent here as
			// the leader's: the leadership is moving (a transfer just
			// ended, and this node has not yet seen itself lead, or the
			// sender's view lags). Wait for it to settle rather than
			// refuse at once.
			if incomingHops(ctx) >= maxHops && time.Now().Before(retryUntil) && pause(ctx, leaderPoll) {
				continue
			}
			node := s.placementLeaderHint(leader)
			return forward(ctx, node, func(ctx context.Context) (*concordpb.RemoveNodeResponse, error) {
				c, fctx, err := ClusterClientFor(ctx, s.b, node)
				if err != nil {
					return nil, err
				}
				return c.RemoveNode(fctx, req)
			})
		}
		d, err := s.b.RemoveNode(ctx, ids.NodeID(req.GetNodeId()))
		if err != nil && refusedBeforeLog(err) && time.Now().Before(retryUntil) && pause(ctx, leaderPoll) {
			continue
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return &concordpb.RemoveNodeResponse{Node: d}, nil
	}
}

// Heartbeat takes a node's report to the placement leader.
func (s *Cluster) Heartbeat(ctx context.Context, req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if leader, local := s.b.Leader(routing.MetaShard); !local {
		node := s.placementLeaderHint(leader)
		return forward(ctx, node, func(ctx context.Context) (*concordpb.HeartbeatResponse, error) {
			c, fctx, err := ClusterClientFor(ctx, s.b, node)
			if err != nil {
				return nil, err
			}
			return c.Heartbeat(fctx, req)
		})
	}
	resp, err := s.b.HandleHeartbeat(ctx, req)
	return resp, toStatus(err)
}

// ChangeReplicas makes one membership change of a shard, at the shard's
// leader. The node's repair loop calls it directly when this node leads the
// shard.
func (s *Cluster) ChangeReplicas(ctx context.Context, req *concordpb.ChangeReplicasRequest) (*concordpb.ChangeReplicasResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	change, err := checkChange(req)
	if err != nil {
		return nil, err
	}
	leader, local, err := adminShardLeader(s.b, change.Shard)
	if err != nil {
		return nil, err
	}
	if !local {
		node := leader
		return forward(ctx, node, func(ctx context.Context) (*concordpb.ChangeReplicasResponse, error) {
			c, fctx, err := ClusterClientFor(ctx, s.b, node)
			if err != nil {
				return nil, err
			}
			return c.ChangeReplicas(fctx, req)
		})
	}
	d, err := s.b.ChangeReplicas(ctx, change)
	if err != nil {
		return nil, toStatus(err)
	}
	return &concordpb.ChangeReplicasResponse{Shard: d}, nil
}

// TransferLeader hands a shard's leadership to another voter, at the
// shard's leader; a target given by node is resolved there, against the
// descriptor the leader holds.
func (s *Cluster) TransferLeader(ctx context.Context, req *concordpb.TransferLeaderRequest) (*concordpb.TransferLeaderResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if err := checkTransfer(req); err != nil {
		return nil, err
	}
	shard := ids.ShardID(req.GetShardId())
	leader, local, err := adminShardLeader(s.b, shard)
	if err != nil {
		return nil, err
	}
	if !local {
		node := leader
		return forward(ctx, node, func(ctx context.Context) (*concordpb.TransferLeaderResponse, error) {
			c, fctx, err := ClusterClientFor(ctx, s.b, node)
			if err != nil {
				return nil, err
			}
			return c.TransferLeader(fctx, req)
		})
	}
	target, node, err := transferTarget(s.b.Descriptors()[shard], req)
	if err != nil {
		return nil, err
	}
	if err := s.b.TransferLeader(ctx, shard, req.GetPlannedEpoch(), target); err != nil {
		return nil, toStatus(err)
	}
	return &concordpb.TransferLeaderResponse{LeaderReplicaId: uint64(target), LeaderNodeId: uint64(node)}, nil
}

// adminShardLeader is the node an admin call on shard goes to. A shard
// this node does not know of is Unavailable saying so, and naming where the
// shards are listed: forwarding it to "leader 0" answered "placement leader
// unknown", an outage that was not one, for a mistyped id. Not NotFound,
// final: a node's list may lack shards for a while (just started, its
// heartbeats' routes not heard, only its own replicas known), and the
// client asks each node once, so a shard no node knows fails fast with
// this text. A shard with no known leader yet is Unavailable naming it.
func adminShardLeader(b ClusterBackend, shard ids.ShardID) (ids.NodeID, bool, error) {
	if _, ok := b.Descriptors()[shard]; !ok {
		return 0, false, status.Errorf(codes.Unavailable, "shard %d is not among the shards this node knows (concord shard list --meta lists them)", shard)
	}
	leader, local := b.Leader(shard)
	if leader == 0 {
		return 0, false, status.Errorf(codes.Unavailable, "shard %d: no leader known yet (election in progress?)", shard)
	}
	return leader, local, nil
}

// RoutingTable answers from this node's own view, without forwarding.
func (s *Cluster) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	resp := &concordpb.RoutingTableResponse{ClusterId: s.b.ClusterID(), Nodes: s.b.Nodes()}
	for _, d := range s.b.Table().Shards() {
		leader, _ := s.b.Leader(ids.ShardID(d.GetShardId()))
		resp.Shards = append(resp.Shards, &concordpb.ShardRoute{Shard: d, LeaderNodeId: uint64(leader)})
	}
	return resp, nil
}

// Status is the placement leader's view of the cluster. By default it is
// linearizable, as etcd's member list is: the placement leader confirms
// its leadership first, and a node that cannot reach a leader that can
// fails the call (Unavailable; the client asks another node). A stale
// request is answered without that confirmation, and with this node's own
// view when the placement leader cannot be reached.
func (s *Cluster) Status(ctx context.Context, req *concordpb.StatusRequest) (*concordpb.StatusResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if leader, local := s.b.Leader(routing.MetaShard); !local {
		node := s.placementLeaderHint(leader)
		resp, err := forward(ctx, node, func(ctx context.Context) (*concordpb.StatusResponse, error) {
			c, fctx, err := ClusterClientFor(ctx, s.b, node)
			if err != nil {
				return nil, err
			}
			return c.Status(fctx, &concordpb.StatusRequest{Stale: req.GetStale()})
		})
		switch {
		case err == nil:
			return resp, nil
		case req.GetStale():
			return s.b.LocalStatus(), nil // the placement leader is unreachable: say what this node sees
		default:
			return nil, status.Errorf(codes.Unavailable, "placement leader (node %d) not reached from node %d: %s (a stale status answers from this node's own view)",
				node, s.b.ID(), status.Convert(err).Message())
		}
	}
	resp, err := s.b.ClusterStatus(ctx, !req.GetStale())
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// placementLeaderHint picks the node to ask for placement requests: the meta
// shard's leader if known, else the node's best guess.
func (s *Cluster) placementLeaderHint(leader ids.NodeID) ids.NodeID {
	if leader != 0 {
		return leader
	}
	return s.b.PlacementLeaderHint()
}
