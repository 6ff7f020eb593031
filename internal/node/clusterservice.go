package node

import (
	"context"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
)

// clusterService implements the Cluster gRPC service. Requests that need the
// placement service (Join, Heartbeat, Status) are served by the meta shard's
// leader; other nodes forward them there.
type clusterService struct {
	concordpb.UnimplementedClusterServer
	n *Node
}

func (s *clusterService) Probe(_ context.Context, req *concordpb.ProbeRequest) (*concordpb.ProbeResponse, error) {
	return s.n.answerProbe(req), nil
}

func (s *clusterService) ready() error {
	select {
	case <-s.n.ready:
		return nil
	default:
		return status.Error(codes.Unavailable, "node not initialized yet (waiting for its peers)")
	}
}

func (s *clusterService) Join(ctx context.Context, req *concordpb.JoinRequest) (*concordpb.JoinResponse, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	n := s.n
	if req.GetAddress() == "" {
		return nil, invalid("join needs the joining node's address")
	}
	if leader, local := n.leaderOf(routing.MetaShard); !local {
		c, fctx, err := n.clusterClientFor(ctx, n.metaLeaderHint(leader))
		if err != nil {
			return nil, err
		}
		return c.Join(fctx, req)
	}
	res, err := n.host.Propose(ctx, routing.MetaShard, &storepb.Command{
		UnixNanos: time.Now().UnixNano(), Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{Address: req.GetAddress()}},
	})
	if err != nil {
		return nil, toStatus(err)
	}
	n.log.Info("node joined", "node", res.GetNodeId(), "addr", req.GetAddress())
	_ = n.book.update(n.eng.DB, res.GetNodes())
	return &concordpb.JoinResponse{ClusterId: n.ident.Load().GetClusterId(), NodeId: res.GetNodeId(), Nodes: res.GetNodes()}, nil
}

func (s *clusterService) Heartbeat(ctx context.Context, req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	n := s.n
	if leader, local := n.leaderOf(routing.MetaShard); !local {
		c, fctx, err := n.clusterClientFor(ctx, n.metaLeaderHint(leader))
		if err != nil {
			return nil, err
		}
		return c.Heartbeat(fctx, req)
	}
	return n.handleHeartbeat(req)
}

func (s *clusterService) ChangeReplicas(ctx context.Context, req *concordpb.ChangeReplicasRequest) (*concordpb.ChangeReplicasResponse, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	n := s.n
	leader, local := n.leaderOf(req.GetShardId())
	if !local {
		c, fctx, err := n.clusterClientFor(ctx, leader)
		if err != nil {
			return nil, err
		}
		return c.ChangeReplicas(fctx, req)
	}
	d, err := n.host.ChangeReplicas(ctx, req.GetShardId(), req.GetRemoveReplicaId(), req.GetAddNodeId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &concordpb.ChangeReplicasResponse{Shard: d}, nil
}

func (s *clusterService) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	n := s.n
	resp := &concordpb.RoutingTableResponse{ClusterId: n.ident.Load().GetClusterId(), Nodes: n.book.all()}
	for _, d := range n.table().Shards() {
		leader, _ := n.leaderOf(d.GetShardId())
		resp.Shards = append(resp.Shards, &concordpb.ShardRoute{Shard: d, LeaderNodeId: leader})
	}
	return resp, nil
}

func (s *clusterService) Status(ctx context.Context, _ *concordpb.StatusRequest) (*concordpb.StatusResponse, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	n := s.n
	if leader, local := n.leaderOf(routing.MetaShard); !local {
		if c, fctx, err := n.clusterClientFor(ctx, n.metaLeaderHint(leader)); err == nil {
			if resp, err := c.Status(fctx, &concordpb.StatusRequest{}); err == nil {
				return resp, nil
			}
		}
		return n.localStatus(), nil // the placement leader is unreachable: say what this node sees
	}
	return n.clusterStatus()
}

// localStatus reports only this node's replicas, when the placement leader
// cannot be reached.
func (n *Node) localStatus() *concordpb.StatusResponse {
	resp := &concordpb.StatusResponse{ClusterId: n.ident.Load().GetClusterId(), AnsweredByNodeId: n.ID()}
	for _, d := range n.book.all() {
		resp.Nodes = append(resp.Nodes, &concordpb.NodeStatus{Node: d, LastHeartbeatAgeSeconds: -1})
	}
	for _, info := range n.host.Infos() {
		resp.Shards = append(resp.Shards, &concordpb.ShardStatus{
			Shard: info.Desc, LeaderNodeId: info.LeaderNode, Term: info.Term,
			CommitIndex: info.Commit, AppliedIndex: info.Applied, IsMeta: info.Shard == routing.MetaShard,
		})
	}
	sort.Slice(resp.Shards, func(i, j int) bool {
		return resp.Shards[i].GetShard().GetShardId() < resp.Shards[j].GetShard().GetShardId()
	})
	return resp
}

// clusterStatus is the placement leader's whole-cluster view.
func (n *Node) clusterStatus() (*concordpb.StatusResponse, error) {
	nodes, err := placement.Nodes(n.eng.DB)
	if err != nil {
		return nil, toStatus(err)
	}
	shards, err := placement.Shards(n.eng.DB)
	if err != nil {
		return nil, toStatus(err)
	}
	reports := n.meta.snapshot()
	resp := &concordpb.StatusResponse{ClusterId: n.ident.Load().GetClusterId(), AnsweredByNodeId: n.ID()}
	leaders := map[uint64]*concordpb.ReplicaStatus{}
	for _, d := range nodes {
		ns := &concordpb.NodeStatus{Node: d, LastHeartbeatAgeSeconds: -1}
		if r, ok := reports[d.GetNodeId()]; ok {
			ns.LastHeartbeatAgeSeconds = time.Since(r.at).Seconds()
			ns.Replicas = uint32(len(r.replicas))
			for _, rs := range r.replicas {
				if !rs.GetIsLeader() || time.Since(r.at) > n.reportMaxAge() {
					continue // a silent node's old claims do not count
				}
				ns.Leaders++
				if cur := leaders[rs.GetShardId()]; cur == nil || cur.GetTerm() <= rs.GetTerm() {
					leaders[rs.GetShardId()] = rs
				}
			}
		}
		resp.Nodes = append(resp.Nodes, ns)
	}
	for _, d := range shards {
		ss := &concordpb.ShardStatus{Shard: d, IsMeta: d.GetShardId() == routing.MetaShard}
		if rs, ok := leaders[d.GetShardId()]; ok {
			ss.LeaderNodeId, ss.Term, ss.CommitIndex, ss.AppliedIndex = rs.GetNodeId(), rs.GetTerm(), rs.GetCommitIndex(), rs.GetAppliedIndex()
			if rs.GetDescriptorEpoch() > d.GetEpoch() {
				if cur, ok := n.host.Info(d.GetShardId()); ok && cur.Desc != nil {
					ss.Shard = proto.CloneOf(cur.Desc)
				}
			}
		}
		resp.Shards = append(resp.Shards, ss)
	}
	return resp, nil
}

// metaLeaderHint picks the node to ask for placement requests: the meta
// shard's leader if known, else the last leader a heartbeat named, else any
// other known node (which forwards).
func (n *Node) metaLeaderHint(leader uint64) uint64 {
	if leader != 0 {
		return leader
	}
	if h := n.meta.lastLeader.Load(); h != 0 && h != n.ID() {
		return h
	}
	return n.nextCandidate()
}
