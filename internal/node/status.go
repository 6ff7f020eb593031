package node

import (
	"context"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
)

// localStatus reports only this node's replicas, when the placement leader
// cannot be reached. A shard's size is its replica's here, as last
// measured for the heartbeats (0 until the first).
func (n *Node) localStatus() *concordpb.StatusResponse {
	resp := &concordpb.StatusResponse{ClusterId: n.ident.Load().GetClusterId(), AnsweredByNodeId: uint64(n.ID()),
		ClusterVersion: n.clusterVersion.Load()}
	for _, d := range n.book.all() {
		resp.Nodes = append(resp.Nodes, &concordpb.NodeStatus{Node: d, LastHeartbeatAgeSeconds: -1})
	}
	for _, info := range n.host.Infos() {
		resp.Shards = append(resp.Shards, &concordpb.ShardStatus{
			Shard: info.Desc, LeaderNodeId: uint64(info.LeaderNode), Term: info.Term,
			CommitIndex: info.Commit, AppliedIndex: info.Applied, IsMeta: info.Shard == routing.MetaShard,
			ApproxBytes: n.measuredBytes(info.Shard),
		})
	}
	sort.Slice(resp.Shards, func(i, j int) bool {
		return resp.Shards[i].GetShard().GetShardId() < resp.Shards[j].GetShard().GetShardId()
	})
	return resp
}

// clusterStatus is the placement leader's whole-cluster view: the placement
// state, with each node's last heartbeat report. A node's state is the
// scheduler's judgement as of now (the meta shard records it within a
// repair round), and each shard says whether it is under-replicated and
// its size as placement takes it (scheduler.ShardSizes).
//
// If linearizable, it first confirms this node's leadership of the meta
// shard (confirmPlacementLeader), as a heartbeat's answer does: a leader
// deposed without knowing it yet holds a placement state older than its
// successor's and hears no reports, so it would show every node silent
// (SUSPECT) and the states and descriptors its successor changed as they
// were. Unavailable if it cannot.
func (n *Node) clusterStatus(ctx context.Context, linearizable bool) (*concordpb.StatusResponse, error) {
	if linearizable {
		if err := n.confirmPlacementLeader(ctx); err != nil {
			return nil, err
		}
	}
	v, err := n.placementView()
	if err != nil {
		return nil, err
	}
	cv, err := n.readClusterVersion()
	if err != nil {
		return nil, err
	}
	leaders := scheduler.Leaders(v)
	states := scheduler.NodeStates(v)
	held := map[ids.NodeID]uint32{}
	for _, d := range v.Shards {
		for _, r := range d.GetReplicas() {
			held[ids.NodeID(r.GetNodeId())]++
		}
	}
	resp := &concordpb.StatusResponse{ClusterId: n.ident.Load().GetClusterId(), AnsweredByNodeId: uint64(n.ID()),
		ClusterVersion: uint32(cv)}
	for _, d := range v.Nodes {
		id := ids.NodeID(d.GetNodeId())
		ns := nodeStatus(v, d)
		if st, ok := states[id]; ok && st != d.GetState() {
			ns.Node = proto.CloneOf(d)
			ns.Node.State = st
		}
		ns.Replicas = held[id]
		l := n.placement.loadOf(id)
		ns.DiskBytes, ns.RequestRate, ns.Version = l.diskBytes, l.requestRate, uint32(l.version)
		ns.DiskFreeBytes, ns.DiskReserveBytes, ns.DiskLow = l.diskFree, l.diskReserve, l.diskLow
		ns.TentativeWrites = l.tentative
		resp.Nodes = append(resp.Nodes, ns)
	}
	under := map[ids.ShardID]bool{}
	for _, h := range scheduler.Health(v) {
		under[h.Shard] = h.UnderReplicated
	}
	sizes := scheduler.ShardSizes(v)
	for _, d := range v.Shards {
		ss := n.shardStatus(d, leaders[ids.ShardID(d.GetShardId())].Status)
		ss.UnderReplicated = under[ids.ShardID(d.GetShardId())]
		ss.ApproxBytes = sizes[ids.ShardID(d.GetShardId())]
		resp.Shards = append(resp.Shards, ss)
	}
	return resp, nil
}

// nodeStatus describes node d from its last report in v, if any: its age
// and, if fresh, the leaderships it claims (a silent node's old claims do
// not count).
func nodeStatus(v scheduler.View, d *concordpb.NodeDescriptor) *concordpb.NodeStatus {
	ns := &concordpb.NodeStatus{Node: d, LastHeartbeatAgeSeconds: -1}
	r, ok := v.Reports[ids.NodeID(d.GetNodeId())]
	if !ok {
		return ns
	}
	ns.LastHeartbeatAgeSeconds = v.Now.Sub(r.At).Seconds()
	if !r.Fresh(v.Now, v.Settings) {
		return ns
	}
	for _, rs := range r.Replicas {
		if rs.GetIsLeader() {
			ns.Leaders++
		}
	}
	return ns
}

// shardStatus describes shard d as its leader's report rs (nil if none)
// has it; a newer descriptor held here wins over the placement state's.
func (n *Node) shardStatus(d *concordpb.ShardDescriptor, rs *concordpb.ReplicaStatus) *concordpb.ShardStatus {
	ss := &concordpb.ShardStatus{Shard: d, IsMeta: ids.ShardID(d.GetShardId()) == routing.MetaShard}
	if rs == nil {
		return ss
	}
	ss.LeaderNodeId, ss.Term, ss.CommitIndex, ss.AppliedIndex = rs.GetNodeId(), rs.GetTerm(), rs.GetCommitIndex(), rs.GetAppliedIndex()
	if rs.GetDescriptorEpoch() > d.GetEpoch() {
		if cur, ok := n.host.Info(ids.ShardID(d.GetShardId())); ok && cur.Desc != nil {
			ss.Shard = proto.CloneOf(cur.Desc)
		}
	}
	return ss
}
