package grpcapi

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// fakeNode is a Backend whose routing, leaders and data a test sets
// directly, and which records what the services asked of it.
type fakeNode struct {
	id      ids.NodeID
	readyC  chan struct{}
	descs   map[ids.ShardID]*concordpb.ShardDescriptor
	leaders map[ids.ShardID]ids.NodeID // shard → leader node; missing means unknown
	addrs   map[ids.NodeID]string      // guarded by mu: node → address of its front door
	blocked map[ids.NodeID]bool
	data    map[ids.ShardID][]*concordpb.KeyValue // shard → sorted keys
	expiry  map[string]int64                      // key → expiry LocalGet reports
	hint    ids.NodeID                            // PlacementLeaderHint
	// electing, when set, makes Leader report no leader for that many calls
	// and then electing.leader for every shard: an election that ends while
	// a request waits.
	electing *election

	proposeResult *storepb.CommandResult
	proposeErr    error
	dropFirst     int // guarded by mu: proposals raft drops before taking one
	lostFirst     int // guarded by mu: read barriers that fail as leadership moves
	readIndexErr  error
	readGate      chan struct{} // when set, each read barrier waits for a value from it
	reading       atomic.Int32  // read barriers asked for (counted before readGate)
	proposeGate   chan struct{} // when set, each proposal waits for a value from it
	proposing     atomic.Int32  // proposals that have arrived (counted before proposeGate)
	changeGate    chan struct{} // when set, each ChangeReplicas waits for a value from it
	changing      atomic.Int32  // ChangeReplicas calls that have arrived (counted before changeGate)
	removeGate    chan struct{} // when set, each RemoveNode waits for a value from it
	removing      atomic.Int32  // RemoveNode calls that have arrived (counted before removeGate)
	// echo, when set, answers a proposal with one result per op (the op's
	// key as its value), or refuses it whole (InvalidArgument) if a value is
	// "bad", as the state machine refuses a batch with a bad op.
	echo bool
	// sm, when set, applies each proposal (withStateMachine): a real
	// state machine's results.
	sm func(shard ids.ShardID, cmd *storepb.Command) *storepb.CommandResult
	// clusterVersion is what ClusterVersion reports (a version.Level);
	// 0: version.Binary.
	clusterVersion atomic.Uint32
	// versionReads counts ClusterVersion's calls.
	versionReads atomic.Int64
	// cluster is what ClusterID reports; 0: 77, every fake's cluster.
	cluster uint64
	// unstamped makes the node forward as a binary older than
	// StreamRequest.cluster_id does: without its cluster id.
	unstamped bool
	// dialOpts are added to the options of the connections Conn opens
	// (a test's small message limits).
	dialOpts []grpc.DialOption

	mu         sync.Mutex
	proposals  []*storepb.Command          // guarded by mu
	readIndex  []ids.ShardID               // guarded by mu: shards asked for a barrier
	heartbeats []uint64                    // guarded by mu: nodes whose heartbeat arrived
	rejoining  []string                    // guarded by mu: AddressRejoining calls
	conns      map[string]*grpc.ClientConn // guarded by mu
	died       []bool                      // guarded by mu: Die calls
	partitions [][]string                  // guarded by mu: Partition calls
	heals      int                         // guarded by mu
	diskLow    []bool                      // guarded by mu: DiskLow calls
	removals   int                         // guarded by mu: RemoveNode calls
	// diskLowErr is what DiskLow answers (a node whose guard is off).
	diskLowErr error
	// proposeLeft is how long the last proposal's context had left when
	// it arrived; 0: no deadline. Guarded by mu.
	proposeLeft time.Duration
}

// newFakeNode returns node id of a cluster with the meta shard and shards
// user shards, every shard led by leader, and ready.
func newFakeNode(t testing.TB, id ids.NodeID, shards int, leader ids.NodeID) *fakeNode {
	f := &fakeNode{id: id, readyC: make(chan struct{}), descs: map[ids.ShardID]*concordpb.ShardDescriptor{},
		leaders: map[ids.ShardID]ids.NodeID{}, addrs: map[ids.NodeID]string{}, blocked: map[ids.NodeID]bool{},
		data: map[ids.ShardID][]*concordpb.KeyValue{}, conns: map[string]*grpc.ClientConn{},
		proposeResult: &storepb.CommandResult{Results: []*concordpb.OpResult{{}}}}
	close(f.readyC)
	starts, ends := routing.Ranges(shards)
	f.descs[routing.MetaShard] = &concordpb.ShardDescriptor{ShardId: uint64(routing.MetaShard),
		Replicas: []*concordpb.ReplicaDescriptor{{ReplicaId: 1, NodeId: 1}}}
	for i := range starts {
		shard := ids.ShardID(i + 1)
		f.descs[shard] = &concordpb.ShardDescriptor{ShardId: uint64(shard), StartHash: starts[i], EndHash: ends[i],
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
func (f *fakeNode) shardOfKey(key string) ids.ShardID {
	s, err := shardOf(f, []byte(key))
	if err != nil {
		panic(err)
	}
	return s
}

func (f *fakeNode) Ready() <-chan struct{} { return f.readyC }
func (f *fakeNode) ID() ids.NodeID         { return f.id }
func (f *fakeNode) ClusterID() uint64 {
	if f.cluster != 0 {
		return f.cluster
	}
	return 77
}

func (f *fakeNode) Descriptors() map[ids.ShardID]*concordpb.ShardDescriptor { return f.descs }

func (f *fakeNode) Table() *routing.Table {
	list := make([]*concordpb.ShardDescriptor, 0, len(f.descs))
	for _, d := range f.descs {
		list = append(list, d)
	}
	return routing.NewTable(list)
}

// election is an election in progress on a fakeNode.
type election struct {
	calls  int // guarded by fakeNode.mu: Leader calls left that see no leader
	leader ids.NodeID
}

func (f *fakeNode) Leader(shard ids.ShardID) (ids.NodeID, bool) {
	if e := f.electing; e != nil {
		f.mu.Lock()
		done := e.calls <= 0
		e.calls--
		f.mu.Unlock()
		if !done {
			return 0, false
		}
		return e.leader, e.leader == f.id
	}
	l := f.leaders[shard]
	return l, l != 0 && l == f.id
}

func (f *fakeNode) Resolve(node ids.NodeID) (string, bool) {
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
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(StampFromNode(f.ID))}, f.dialOpts...)
	c, err := grpc.NewClient(addr, opts...)
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

func (f *fakeNode) Blocked(node ids.NodeID) bool { return f.blocked[node] }

func (f *fakeNode) HasReplica(shard ids.ShardID) bool {
	for _, r := range f.descs[shard].GetReplicas() {
		if ids.NodeID(r.GetNodeId()) == f.id {
			return true
		}
	}
	return false
}

func (f *fakeNode) Propose(ctx context.Context, shard ids.ShardID, cmd *storepb.Command) (*storepb.CommandResult, error) {
	f.proposing.Add(1)
	if f.proposeGate != nil {
		<-f.proposeGate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposeLeft = 0
	if dl, ok := ctx.Deadline(); ok {
		f.proposeLeft = time.Until(dl)
	}
	f.proposals = append(f.proposals, cmd)
	if f.dropFirst > 0 {
		f.dropFirst--
		return nil, replica.ErrDropped
	}
	if f.echo {
		return echoResult(cmd), nil
	}
	if f.sm != nil {
		return f.sm(shard, cmd), nil
	}
	return f.proposeResult, f.proposeErr
}

func (f *fakeNode) ReadIndex(_ context.Context, shard ids.ShardID) (ShardView, error) {
	f.reading.Add(1)
	if f.readGate != nil {
		<-f.readGate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readIndex = append(f.readIndex, shard)
	if f.lostFirst > 0 {
		f.lostFirst--
		return nil, &replica.NotLeaderError{Shard: shard}
	}
	if f.readIndexErr != nil {
		return nil, f.readIndexErr
	}
	return fakeView{f: f, shard: shard}, nil
}

// fakeView reads the fake's data as LocalGet and LocalScan do.
type fakeView struct {
	f     *fakeNode
	shard ids.ShardID
}

func (v fakeView) Get(key []byte) ([]byte, int64, bool, error) { return v.f.LocalGet(v.shard, key) }
func (v fakeView) GetMany(keys [][]byte, budget *kv.Budget) ([]*concordpb.OpResult, error) {
	res := make([]*concordpb.OpResult, len(keys))
	for i, k := range keys {
		value, at, found, err := v.Get(k)
		if err != nil {
			return nil, err
		}
		if err := budget.Take(len(value)); err != nil {
			return nil, err
		}
		res[i] = &concordpb.OpResult{Ok: found, Value: value, ExpireAtUnixMs: at}
	}
	return res, nil
}
func (v fakeView) Scan(start, end []byte, page kv.Page) ([]*concordpb.KeyValue, bool, error) {
	return v.f.LocalScan(v.shard, start, end, page)
}
func (v fakeView) State() (uint64, *concordpb.ShardDescriptor, error) {
	return 1, v.f.Descriptors()[v.shard], nil
}

// Export returns the fake's keys of the shard at or after start, one per
// call, so that a stream of them has several chunks.
func (v fakeView) Export(start []byte, _ int, _ int64) ([]*concordpb.BackupRecord, bool, error) {
	kvs, _, err := v.f.LocalScan(v.shard, start, nil, kv.Page{Limit: 2})
	if err != nil || len(kvs) == 0 {
		return nil, false, err
	}
	kv := kvs[0]
	return []*concordpb.BackupRecord{{Key: kv.GetKey(), Value: kv.GetValue(), ExpireAtUnixMs: v.f.expiry[string(kv.GetKey())]}}, len(kvs) > 1, nil
}

func (v fakeView) Close() {}

func (f *fakeNode) LocalGet(shard ids.ShardID, key []byte) ([]byte, int64, bool, error) {
	for _, kv := range f.data[shard] {
		if bytes.Equal(kv.GetKey(), key) {
			return kv.GetValue(), f.expiry[string(key)], true, nil
		}
	}
	return nil, 0, false, nil
}

// ClusterVersion: every fake replica runs this binary, unless a test
// sets clusterVersion.
func (f *fakeNode) ClusterVersion() version.Level {
	f.versionReads.Add(1)
	if v := version.Level(f.clusterVersion.Load()); v != version.Unknown {
		return v
	}
	return version.Binary
}

func (f *fakeNode) LocalGetMany(shard ids.ShardID, keys [][]byte, budget *kv.Budget) ([]*concordpb.OpResult, error) {
	return fakeView{f: f, shard: shard}.GetMany(keys, budget)
}

// LocalScan pages through the shard's pairs as kv.Scan does (they are in
// key order: the fake keeps them sorted).
func (f *fakeNode) LocalScan(shard ids.ShardID, start, end []byte, page kv.Page) ([]*concordpb.KeyValue, bool, error) {
	var out []*concordpb.KeyValue
	size := 0
	for _, p := range f.data[shard] {
		k := p.GetKey()
		if bytes.Compare(k, start) < 0 || (len(end) > 0 && bytes.Compare(k, end) >= 0) {
			continue
		}
		if len(out) >= page.Limit || (page.MaxBytes > 0 && size >= page.MaxBytes) {
			return out, true, nil
		}
		if page.KeysOnly {
			p = &concordpb.KeyValue{Key: k}
		}
		size += len(p.GetKey()) + len(p.GetValue())
		out = append(out, p)
	}
	return out, false, nil
}

func (f *fakeNode) Nodes() []*concordpb.NodeDescriptor {
	addr, _ := f.Resolve(f.id)
	return []*concordpb.NodeDescriptor{{NodeId: uint64(f.id), Address: addr}}
}

func (f *fakeNode) AnswerProbe(*concordpb.ProbeRequest) *concordpb.ProbeResponse {
	return &concordpb.ProbeResponse{NodeId: uint64(f.id)}
}

func (f *fakeNode) PlacementLeaderHint() ids.NodeID { return f.hint }

func (f *fakeNode) ChangeReplicas(_ context.Context, c Change) (*concordpb.ShardDescriptor, error) {
	f.changing.Add(1)
	if f.changeGate != nil {
		<-f.changeGate
	}
	return f.descs[c.Shard], nil
}

func (f *fakeNode) TransferLeader(context.Context, ids.ShardID, uint64, ids.ReplicaID) error {
	return nil
}

func (f *fakeNode) AddNode(context.Context, string, []byte, version.Level) (ids.NodeID, []*concordpb.NodeDescriptor, error) {
	return 9, f.Nodes(), nil
}

func (f *fakeNode) AddressRejoining(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejoining = append(f.rejoining, addr)
}

// RemoveNode proposes to the meta shard, as the node's does: dropFirst
// and proposeErr apply to it too.
func (f *fakeNode) RemoveNode(_ context.Context, node ids.NodeID) (*concordpb.NodeDescriptor, error) {
	f.removing.Add(1)
	if f.removeGate != nil {
		<-f.removeGate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removals++
	if f.dropFirst > 0 {
		f.dropFirst--
		return nil, replica.ErrDropped
	}
	if f.proposeErr != nil {
		return nil, f.proposeErr
	}
	return &concordpb.NodeDescriptor{NodeId: uint64(node), State: concordpb.NodeState_NODE_LEAVING}, nil
}

func (f *fakeNode) HandleHeartbeat(_ context.Context, req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, req.GetNode().GetNodeId())
	return &concordpb.HeartbeatResponse{MetaLeaderNodeId: uint64(f.id)}, nil
}

func (f *fakeNode) ClusterStatus(context.Context, bool) (*concordpb.StatusResponse, error) {
	return &concordpb.StatusResponse{AnsweredByNodeId: uint64(f.id)}, nil
}

func (f *fakeNode) LocalStatus() *concordpb.StatusResponse {
	return &concordpb.StatusResponse{AnsweredByNodeId: uint64(f.id)}
}

func (f *fakeNode) RaftReceiver() concordpb.RaftTransportServer {
	return &concordpb.UnimplementedRaftTransportServer{}
}

func (f *fakeNode) Die(clean bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.died = append(f.died, clean)
}

func (f *fakeNode) Partition(reachable []string) []ids.NodeID {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partitions = append(f.partitions, reachable)
	return []ids.NodeID{3}
}

func (f *fakeNode) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heals++
}

func (f *fakeNode) DiskLow(low bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.diskLowErr != nil {
		return f.diskLowErr
	}
	f.diskLow = append(f.diskLow, low)
	return nil
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
	_, conn := serveOn(t, f, peers...)
	return conn
}

// serveGRPC is serve that returns the server, for a test that stops it.
func serveGRPC(t *testing.T, f *fakeNode, peers ...*fakeNode) *grpc.Server {
	t.Helper()
	srv, _ := serveOn(t, f, peers...)
	return srv
}

func serveOn(t *testing.T, f *fakeNode, peers ...*fakeNode) (*grpc.Server, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(MarkAnswered(), DropPartitioned(f.Blocked)))
	kv := NewKV(f, testLimits)
	concordpb.RegisterKVServer(srv, kv)
	concordpb.RegisterBackupServer(srv, NewBackup(kv))
	concordpb.RegisterClusterServer(srv, NewCluster(f))
	concordpb.RegisterAdminServer(srv, NewAdmin(f, false))
	concordpb.RegisterRaftTransportServer(srv, NewRaftTransport(f))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv, announce(t, f, lis.Addr().String(), peers)
}

// announce puts f's address addr into f's and peers' address books and
// returns a gRPC connection to it, closed when the test ends.
func announce(t *testing.T, f *fakeNode, addr string, peers []*fakeNode) *grpc.ClientConn {
	t.Helper()
	for _, p := range append(peers, f) {
		p.mu.Lock()
		p.addrs[f.id] = addr
		p.mu.Unlock()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func echoResult(cmd *storepb.Command) *storepb.CommandResult {
	res := &storepb.CommandResult{}
	for _, op := range cmd.GetKv().GetOps() {
		if string(op.GetValue()) == "bad" {
			return &storepb.CommandResult{ErrorCode: uint32(codes.InvalidArgument), ErrorMessage: "bad key"}
		}
		res.Results = append(res.Results, &concordpb.OpResult{Ok: true, Value: op.GetKey()})
	}
	return res
}
