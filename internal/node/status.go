package node

import (
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
)

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

// clusterStatus is the placement leader's whole-cluster view: the placement
// state, with each node's last heartbeat report.
func (n *Node) clusterStatus() (*concordpb.StatusResponse, error) {
	nodes, err := placement.Nodes(n.eng.DB)
	if err != nil {
		return nil, err
	}
	shards, err := placement.Shards(n.eng.DB)
	if err != nil {
		return nil, err
	}
	reports := n.meta.snapshot()
	resp := &concordpb.StatusResponse{ClusterId: n.ident.Load().GetClusterId(), AnsweredByNodeId: n.ID()}
	leaders := map[uint64]*concordpb.ReplicaStatus{}
	for _, d := range nodes {
		resp.Nodes = append(resp.Nodes, n.nodeStatus(d, reports[d.GetNodeId()], leaders))
	}
	for _, d := range shards {
		resp.Shards = append(resp.Shards, n.shardStatus(d, leaders[d.GetShardId()]))
	}
	return resp, nil
}

// nodeStatus describes node d from its last report r (nil if none), and
// records in leaders the leaderships r claims, of two claims the higher term.
func (n *Node) nodeStatus(d *concordpb.NodeDescriptor, r *nodeReport, leaders map[uint64]*concordpb.ReplicaStatus) *concordpb.NodeStatus {
	ns := &concordpb.NodeStatus{Node: d, LastHeartbeatAgeSeconds: -1}
	if r == nil {
		return ns
	}
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
	return ns
}

// shardStatus describes shard d as its leader's report rs (nil if none)
// has it; a newer descriptor held here wins over the placement state's.
func (n *Node) shardStatus(d *concordpb.ShardDescriptor, rs *concordpb.ReplicaStatus) *concordpb.ShardStatus {
	ss := &concordpb.ShardStatus{Shard: d, IsMeta: d.GetShardId() == routing.MetaShard}
	if rs == nil {
		return ss
	}
	ss.LeaderNodeId, ss.Term, ss.CommitIndex, ss.AppliedIndex = rs.GetNodeId(), rs.GetTerm(), rs.GetCommitIndex(), rs.GetAppliedIndex()
	if rs.GetDescriptorEpoch() > d.GetEpoch() {
		if cur, ok := n.host.Info(d.GetShardId()); ok && cur.Desc != nil {
			ss.Shard = proto.CloneOf(cur.Desc)
		}
	}
	return ss
}
