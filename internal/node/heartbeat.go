package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// placementState is what the placement leader learns from heartbeats. It lives
// in memory only: a new placement leader rebuilds it within a heartbeat.
type placementState struct {
	mu       sync.Mutex
	reports  map[ids.NodeID]scheduler.Report // guarded by mu: the last report per node
	inflight map[ids.ShardID]bool            // guarded by mu: shards with a repair (key shard) or descriptor update (key shard|descriptorBusy) under way
	// observedSince is when this node, as placement leader, built its
	// first view (guarded by mu); zero while it does not lead. The
	// scheduler judges silence from it for nodes that have not reported
	// since, so a new placement leader declares nobody dead at once.
	observedSince time.Time

	// lastLeader is the placement leader named by the last heartbeat answer
	// (an ids.NodeID; atomic has no typed uint64).
	lastLeader atomic.Uint64
	rr         atomic.Uint64 // round-robin cursor for finding the placement leader
}

func (m *placementState) record(node ids.NodeID, replicas []*concordpb.ReplicaStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reports == nil {
		m.reports = map[ids.NodeID]scheduler.Report{}
	}
	m.reports[node] = scheduler.Report{At: time.Now(), Replicas: replicas}
}

// view assembles the scheduler's input from the placement state (nodes,
// shards) and the reports and in-flight changes held here, as of now.
func (m *placementState) view(now time.Time, s scheduler.Settings, nodes []*concordpb.NodeDescriptor, shards []*concordpb.ShardDescriptor) scheduler.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.observedSince.IsZero() {
		m.observedSince = now
	}
	v := scheduler.View{Now: now, Settings: s, Nodes: nodes, Shards: shards, ObservedSince: m.observedSince,
		Reports: make(map[ids.NodeID]scheduler.Report, len(m.reports)), InFlight: map[ids.ShardID]bool{}}
	for node, r := range m.reports {
		v.Reports[node] = r
	}
	for shard := range m.inflight {
		if shard&descriptorBusy == 0 {
			v.InFlight[shard] = true
		}
	}
	return v
}

// stopObserving forgets when this node began observing: it no longer
// leads placement, and its reports will be stale if it leads again.
func (m *placementState) stopObserving() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observedSince = time.Time{}
}

// descriptorBusy marks the busy keys of descriptor updates, a key space
// apart from the shards' repairs.
const descriptorBusy = 1 << 63

// begin marks shard busy; it reports false if it already was.
func (m *placementState) begin(shard ids.ShardID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight == nil {
		m.inflight = map[ids.ShardID]bool{}
	}
	if m.inflight[shard] {
		return false
	}
	m.inflight[shard] = true
	return true
}

func (m *placementState) end(shard ids.ShardID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, shard)
}

// schedulerSettings are the scheduler's limits, derived from the node's
// configuration: a report counts for a few heartbeats, so one lost
// heartbeat does not hide a leader.
func (n *Node) schedulerSettings() scheduler.Settings {
	return scheduler.DefaultSettings(n.cfg.HeartbeatInterval)
}

// placementView is the scheduler's view of the cluster, read from the
// local meta replica's state and this node's heartbeat reports. It reads
// through Engine.Read: Heartbeat and Status handlers call it, and one that
// outlives Stop must get an error (Unavailable), not Pebble's panic.
func (n *Node) placementView() (scheduler.View, error) {
	var nodes []*concordpb.NodeDescriptor
	var shards []*concordpb.ShardDescriptor
	err := n.eng.Read(func(r storage.Reader) (err error) {
		if nodes, err = placement.Nodes(r); err != nil {
			return err
		}
		shards, err = placement.Shards(r)
		return err
	})
	if err != nil {
		return scheduler.View{}, readErr(err)
	}
	return n.placement.view(time.Now(), n.schedulerSettings(), nodes, shards), nil
}

// sendHeartbeat reports this node's replicas to the placement leader and
// learns the cluster's nodes and shards from the answer.
func (n *Node) sendHeartbeat(ctx context.Context) {
	req := &concordpb.HeartbeatRequest{Node: n.book.get(n.ID())}
	if req.Node == nil {
		req.Node = &concordpb.NodeDescriptor{NodeId: uint64(n.ID()), Address: n.cfg.Addr}
	}
	for _, info := range n.host.Infos() {
		req.Replicas = append(req.Replicas, &concordpb.ReplicaStatus{
			ShardId: uint64(info.Shard), ReplicaId: uint64(info.ReplicaID), NodeId: uint64(n.ID()), LeaderReplicaId: uint64(info.LeaderReplica),
			Term: info.Term, CommitIndex: info.Commit, AppliedIndex: info.Applied, IsLeader: info.IsLeader,
			DescriptorEpoch: info.Desc.GetEpoch(),
		})
		if info.IsLeader && info.Desc != nil {
			req.LedDescriptors = append(req.LedDescriptors, info.Desc)
		}
	}
	var resp *concordpb.HeartbeatResponse
	var err error
	if leader, local := n.leaderOf(routing.MetaShard); local {
		resp, err = n.handleHeartbeat(req)
	} else {
		target := leader
		if target == 0 {
			target = n.nextCandidate()
		}
		c, fctx, cerr := grpcapi.ClusterClientFor(ctx, n.backend(), target)
		if cerr != nil {
			return
		}
		resp, err = c.Heartbeat(fctx, req)
	}
	if err != nil {
		n.log.Debug("heartbeat failed", "err", err)
		return
	}
	n.placement.lastLeader.Store(resp.GetMetaLeaderNodeId())
	if err := n.book.update(n.eng, resp.GetNodes()); err != nil {
		n.log.Warn("update address book", "err", err)
	}
	routes := resp.GetShards()
	n.routes.Store(&routes)
}

// nextCandidate cycles through the other known nodes, to find the placement
// leader when no hint is known.
func (n *Node) nextCandidate() ids.NodeID {
	nodes := n.book.all()
	for range nodes {
		d := nodes[int(n.placement.rr.Add(1))%len(nodes)]
		if id := ids.NodeID(d.GetNodeId()); id != n.ID() && d.GetState() == concordpb.NodeState_NODE_UP {
			return id
		}
	}
	return 0
}

// handleHeartbeat runs on the placement leader: it records the report,
// proposes any newer descriptor a shard leader sent, and answers with the
// nodes and the shard routes.
func (n *Node) handleHeartbeat(req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	n.placement.record(ids.NodeID(req.GetNode().GetNodeId()), req.GetReplicas())
	v, err := n.placementView()
	if err != nil {
		return nil, err
	}
	known := map[ids.ShardID]*concordpb.ShardDescriptor{}
	for _, d := range v.Shards {
		known[ids.ShardID(d.GetShardId())] = d
	}
	for _, d := range req.GetLedDescriptors() {
		if cur := known[ids.ShardID(d.GetShardId())]; cur == nil || cur.GetEpoch() < d.GetEpoch() {
			n.recordDescriptor(d)
		}
	}
	leaders := scheduler.Leaders(v)
	resp := &concordpb.HeartbeatResponse{Nodes: v.Nodes, MetaLeaderNodeId: uint64(n.ID())}
	for _, d := range v.Shards {
		leader := leaders[ids.ShardID(d.GetShardId())].Node
		resp.Shards = append(resp.Shards, &concordpb.ShardRoute{Shard: d, LeaderNodeId: uint64(leader)})
	}
	return resp, nil
}

// recordDescriptor proposes a newer shard descriptor to the placement
// state, in the background (a heartbeat must not wait on raft).
func (n *Node) recordDescriptor(d *concordpb.ShardDescriptor) {
	key := ids.ShardID(d.GetShardId()) | descriptorBusy
	if !n.placement.begin(key) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.placement.end(key)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := n.host.Propose(ctx, routing.MetaShard, &storepb.Command{UnixNanos: time.Now().UnixNano(),
			Kind: &storepb.Command_UpdateDescriptor{UpdateDescriptor: &storepb.UpdateDescriptor{Shard: proto.CloneOf(d)}}})
		if err != nil {
			n.log.Debug("record shard descriptor", "shard", d.GetShardId(), "err", err)
		}
	}()
}

// placementLeaderHint names the node to ask for placement requests when the
// meta shard's leader is unknown: the last leader a heartbeat named, else
// any other known node (which forwards).
func (n *Node) placementLeaderHint() ids.NodeID {
	if h := ids.NodeID(n.placement.lastLeader.Load()); h != 0 && h != n.ID() {
		return h
	}
	return n.nextCandidate()
}
