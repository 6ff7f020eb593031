package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
)

// metaView is what the placement leader learns from heartbeats. It lives
// in memory only: a new placement leader rebuilds it within a heartbeat.
type metaView struct {
	mu       sync.Mutex
	nodes    map[uint64]*nodeReport // guarded by mu: the last report per node
	inflight map[uint64]bool        // guarded by mu: shards with a repair or descriptor update under way

	// lastLeader is the placement leader named by the last heartbeat answer.
	lastLeader atomic.Uint64
	rr         atomic.Uint64 // round-robin cursor for finding the placement leader
}

type nodeReport struct {
	at       time.Time
	replicas []*concordpb.ReplicaStatus
}

func (m *metaView) record(node uint64, replicas []*concordpb.ReplicaStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodes[node] = &nodeReport{at: time.Now(), replicas: replicas}
}

func (m *metaView) snapshot() map[uint64]*nodeReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint64]*nodeReport, len(m.nodes))
	for k, v := range m.nodes {
		out[k] = v
	}
	return out
}

// begin marks shard busy; it reports false if it already was.
func (m *metaView) begin(shard uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight == nil {
		m.inflight = map[uint64]bool{}
	}
	if m.inflight[shard] {
		return false
	}
	m.inflight[shard] = true
	return true
}

func (m *metaView) end(shard uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, shard)
}

// leaders returns the node leading each shard according to the reports no
// older than maxAge. A dead node's last report still claims its old
// leaderships, so stale reports are skipped, and of two claims the higher
// term wins.
func (m *metaView) leaders(maxAge time.Duration) map[uint64]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[uint64]uint64{}
	terms := map[uint64]uint64{}
	for node, r := range m.nodes {
		if time.Since(r.at) > maxAge {
			continue
		}
		for _, rs := range r.replicas {
			if rs.GetIsLeader() && rs.GetTerm() >= terms[rs.GetShardId()] {
				out[rs.GetShardId()], terms[rs.GetShardId()] = node, rs.GetTerm()
			}
		}
	}
	return out
}

// reportMaxAge is how old a heartbeat report may be to count: a few
// heartbeats, so one lost heartbeat does not hide a leader.
func (n *Node) reportMaxAge() time.Duration { return 3 * n.cfg.HeartbeatInterval }

// sendHeartbeat reports this node's replicas to the placement leader and
// learns the cluster's nodes and shards from the answer.
func (n *Node) sendHeartbeat(ctx context.Context) {
	req := &concordpb.HeartbeatRequest{Node: n.book.get(n.ID())}
	if req.Node == nil {
		req.Node = &concordpb.NodeDescriptor{NodeId: n.ID(), Address: n.cfg.Addr}
	}
	for _, info := range n.host.Infos() {
		req.Replicas = append(req.Replicas, &concordpb.ReplicaStatus{
			ShardId: info.Shard, ReplicaId: info.ReplicaID, NodeId: n.ID(), LeaderReplicaId: info.LeaderReplica,
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
	n.meta.lastLeader.Store(resp.GetMetaLeaderNodeId())
	if err := n.book.update(n.eng.DB, resp.GetNodes()); err != nil {
		n.log.Warn("update address book", "err", err)
	}
	routes := resp.GetShards()
	n.routes.Store(&routes)
}

// nextCandidate cycles through the other known nodes, to find the placement
// leader when no hint is known.
func (n *Node) nextCandidate() uint64 {
	nodes := n.book.all()
	for range nodes {
		d := nodes[int(n.meta.rr.Add(1))%len(nodes)]
		if d.GetNodeId() != n.ID() && d.GetState() == concordpb.NodeState_NODE_UP {
			return d.GetNodeId()
		}
	}
	return 0
}

// handleHeartbeat runs on the placement leader: it records the report,
// proposes any newer descriptor a shard leader sent, and answers with the
// nodes and the shard routes.
func (n *Node) handleHeartbeat(req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	n.meta.record(req.GetNode().GetNodeId(), req.GetReplicas())
	shards, err := placement.Shards(n.eng.DB)
	if err != nil {
		return nil, err
	}
	known := map[uint64]*concordpb.ShardDescriptor{}
	for _, d := range shards {
		known[d.GetShardId()] = d
	}
	for _, d := range req.GetLedDescriptors() {
		if cur := known[d.GetShardId()]; cur == nil || cur.GetEpoch() < d.GetEpoch() {
			n.recordDescriptor(d)
		}
	}
	nodes, err := placement.Nodes(n.eng.DB)
	if err != nil {
		return nil, err
	}
	leaders := n.meta.leaders(n.reportMaxAge())
	resp := &concordpb.HeartbeatResponse{Nodes: nodes, MetaLeaderNodeId: n.ID()}
	for _, d := range shards {
		resp.Shards = append(resp.Shards, &concordpb.ShardRoute{Shard: d, LeaderNodeId: leaders[d.GetShardId()]})
	}
	return resp, nil
}

// recordDescriptor proposes a newer shard descriptor to the placement
// state, in the background (a heartbeat must not wait on raft).
func (n *Node) recordDescriptor(d *concordpb.ShardDescriptor) {
	key := d.GetShardId() | 1<<63 // busy-key space apart from repairs
	if !n.meta.begin(key) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.meta.end(key)
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
func (n *Node) placementLeaderHint() uint64 {
	if h := n.meta.lastLeader.Load(); h != 0 && h != n.ID() {
		return h
	}
	return n.nextCandidate()
}
