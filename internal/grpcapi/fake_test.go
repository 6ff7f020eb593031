package grpcapi

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
)

// fakeNode is a Backend whose routing, leaders and data a test sets
// directly, and which records what the services asked of it.
type fakeNode struct {
	id      uint64
	readyC  chan struct{}
	descs   map[uint64]*concordpb.ShardDescriptor
	leaders map[uint64]uint64 // shard → leader node; missing means unknown
	addrs   map[uint64]string // guarded by mu: node → address of its front door
	blocked map[uint64]bool
	data    map[uint64][]*concordpb.KeyValue // shard → sorted keys
	hint    uint64                           // PlacementLeaderHint

	proposeResult *storepb.CommandResult
	proposeErr    error
	readIndexErr  error

	mu         sync.Mutex
	proposals  []*storepb.Command          // guarded by mu
	readIndex  []uint64                    // guarded by mu: shards asked for a barrier
	heartbeats []uint64                    // guarded by mu: nodes whose heartbeat arrived
	conns      map[string]*grpc.ClientConn // guarded by mu
	died       []bool                      // guarded by mu: Die calls
	partitions [][]string                  // guarded by mu: Partition calls
	heals      int                         // guarded by mu
}

// newFakeNode returns node id of a cluster with the meta shard and shards
// user shards, every shard led by leader, and ready.
func newFakeNode(t *testing.T, id uint64, shards int, leader uint64) *fakeNode {
	f := &fakeNode{id: id, readyC: make(chan struct{}), descs: map[uint64]*concordpb.ShardDescriptor{},
		leaders: map[uint64]uint64{}, addrs: map[uint64]string{}, blocked: map[uint64]bool{},
		data: map[uint64][]*concordpb.KeyValue{}, conns: map[string]*grpc.ClientConn{},
		proposeResult: &storepb.CommandResult{Results: []*concordpb.OpResult{{}}}}
	close(f.readyC)
	starts, ends := routing.Ranges(shards)
	f.descs[routing.MetaShard] = &concordpb.ShardDescriptor{ShardId: routing.MetaShard,
		Replicas: []*concordpb.ReplicaDescriptor{{ReplicaId: 1, NodeId: 1}}}
	for i := range starts {
		shard := uint64(i + 1)
		f.descs[shard] = &concordpb.ShardDescriptor{ShardId: shard, StartHash: starts[i], EndHash: ends[i],
			Replicas: []*concordpb.ReplicaDescriptor{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}}}
	}
	for shard := range f.descs {
		if leader != 0 {
			f.leaders[shard] = leader
		}
	}
	t.Cleanup(f.closeConns)
	return f
}

// shardOfKey is the shard the fake's routing puts key in.
func (f *fakeNode) shardOfKey(key string) uint64 {
	s, err := shardOf(f, []byte(key))
	if err != nil {
		panic(err)
	}
	return s
}

func (f *fakeNode) Ready() <-chan struct{} { return f.readyC }
func (f *fakeNode) ID() uint64             { return f.id }
func (f *fakeNode) ClusterID() uint64      { return 77 }

func (f *fakeNode) Descriptors() map[uint64]*concordpb.ShardDescriptor { return f.descs }

func (f *fakeNode) Leader(shard uint64) (uint64, bool) {
	l := f.leaders[shard]
	return l, l != 0 && l == f.id
}

func (f *fakeNode) Resolve(node uint64) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.addrs[node]
	return a, ok
}

func (f *fakeNode) Conn(addr string) (grpc.ClientConnInterface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(StampFromNode(f.ID)))
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

func (f *fakeNode) closeConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *fakeNode) Blocked(node uint64) bool { return f.blocked[node] }

func (f *fakeNode) HasReplica(shard uint64) bool {
	for _, r := range f.descs[shard].GetReplicas() {
		if r.GetNodeId() == f.id {
			return true
		}
	}
	return false
}

func (f *fakeNode) Propose(_ context.Context, _ uint64, cmd *storepb.Command) (*storepb.CommandResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposals = append(f.proposals, cmd)
	return f.proposeResult, f.proposeErr
}

func (f *fakeNode) ReadIndex(_ context.Context, shard uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readIndex = append(f.readIndex, shard)
	return f.readIndexErr
}

func (f *fakeNode) LocalGet(shard uint64, key []byte) ([]byte, bool, error) {
	for _, kv := range f.data[shard] {
		if bytes.Equal(kv.GetKey(), key) {
			return kv.GetValue(), true, nil
		}
	}
	return nil, false, nil
}

func (f *fakeNode) LocalScan(shard uint64, start, end []byte, limit int) ([]*concordpb.KeyValue, error) {
	var out []*concordpb.KeyValue
	for _, kv := range f.data[shard] {
		k := kv.GetKey()
		if bytes.Compare(k, start) >= 0 && (len(end) == 0 || bytes.Compare(k, end) < 0) && len(out) < limit {
			out = append(out, kv)
		}
	}
	return out, nil
}

func (f *fakeNode) Nodes() []*concordpb.NodeDescriptor {
	addr, _ := f.Resolve(f.id)
	return []*concordpb.NodeDescriptor{{NodeId: f.id, Address: addr}}
}

func (f *fakeNode) AnswerProbe(*concordpb.ProbeRequest) *concordpb.ProbeResponse {
	return &concordpb.ProbeResponse{NodeId: f.id}
}

func (f *fakeNode) PlacementLeaderHint() uint64 { return f.hint }

func (f *fakeNode) ChangeReplicas(_ context.Context, shard, _, _ uint64) (*concordpb.ShardDescriptor, error) {
	return f.descs[shard], nil
}

func (f *fakeNode) AddNode(context.Context, string) (uint64, []*concordpb.NodeDescriptor, error) {
	return 9, f.Nodes(), nil
}

func (f *fakeNode) HandleHeartbeat(req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, req.GetNode().GetNodeId())
	return &concordpb.HeartbeatResponse{MetaLeaderNodeId: f.id}, nil
}

func (f *fakeNode) ClusterStatus() (*concordpb.StatusResponse, error) {
	return &concordpb.StatusResponse{AnsweredByNodeId: f.id}, nil
}

func (f *fakeNode) LocalStatus() *concordpb.StatusResponse {
	return &concordpb.StatusResponse{AnsweredByNodeId: f.id}
}

func (f *fakeNode) RaftReceiver() concordpb.RaftTransportServer {
	return &concordpb.UnimplementedRaftTransportServer{}
}

func (f *fakeNode) Die(clean bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.died = append(f.died, clean)
}

func (f *fakeNode) Partition(reachable []string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partitions = append(f.partitions, reachable)
	return []uint64{3}
}

func (f *fakeNode) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heals++
}

func (f *fakeNode) proposalCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.proposals)
}

// testLimits are small, so tests can exceed them with short strings.
var testLimits = Limits{MaxKeyBytes: 4, MaxValueBytes: 8}

// serve runs f's front door on a real gRPC server on 127.0.0.1:0, records
// its address in each of peers' (and f's) address books as node f.id, and
// returns a client connection to it.
func serve(t *testing.T, f *fakeNode, peers ...*fakeNode) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(DropPartitioned(f.Blocked)))
	concordpb.RegisterKVServer(srv, NewKV(f, testLimits))
	concordpb.RegisterClusterServer(srv, NewCluster(f))
	concordpb.RegisterAdminServer(srv, NewAdmin(f, false))
	concordpb.RegisterRaftTransportServer(srv, NewRaftTransport(f))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	for _, p := range append(peers, f) {
		p.mu.Lock()
		p.addrs[f.id] = lis.Addr().String()
		p.mu.Unlock()
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
