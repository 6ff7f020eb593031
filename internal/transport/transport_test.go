package transport

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/portmux"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// recorder is a Receiver that records what arrives.
type recorder struct {
	mu          sync.Mutex
	batches     [][]*concordpb.RaftEnvelope
	snaps       []*storage.StagedSnapshot
	unreachable map[ids.NodeID]int
}

// Deliver keeps copies: the framed wire reuses envs and their bytes once
// it returns (Receiver.Deliver).
func (r *recorder) Deliver(_ context.Context, _ ids.NodeID, envs []*concordpb.RaftEnvelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := make([]*concordpb.RaftEnvelope, len(envs))
	for i, e := range envs {
		kept[i] = proto.Clone(e).(*concordpb.RaftEnvelope)
	}
	r.batches = append(r.batches, kept)
	return nil
}

func (r *recorder) DeliverSnapshot(_ context.Context, _ ids.NodeID, _ ids.ShardID, _ *pb.Message, snap *storage.StagedSnapshot) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, snap)
	return nil
}

func (r *recorder) ReportUnreachable(node ids.NodeID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unreachable == nil {
		r.unreachable = map[ids.NodeID]int{}
	}
	r.unreachable[node]++
}

func (r *recorder) messages() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.batches {
		n += len(b)
	}
	return n
}

// endpoint is one node's transport with its own gRPC server and Pebble.
type endpoint struct {
	t    *Transport
	recv *recorder
	addr string
	eng  *storage.Engine
}

// pair starts two transports (nodes 1 and 2) that know each other's
// address, sending over the default wire.
func pair(t *testing.T, blocked func(self, peer ids.NodeID) bool) (a, b *endpoint) {
	return pairWire(t, "", blocked)
}

// pairWire is pair with the wire the transports send over.
func pairWire(t *testing.T, wire string, blocked func(self, peer ids.NodeID) bool) (a, b *endpoint) {
	t.Helper()
	addrs := map[ids.NodeID]string{}
	var eps [2]*endpoint
	lis := make([]net.Listener, 2)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[ids.NodeID(i+1)] = l, l.Addr().String()
	}
	for i := range eps {
		self := ids.NodeID(i + 1)
		eng, err := storage.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{ClusterID: 7, NodeID: self, QueueLen: 8, Wire: wire,
			Resolve: func(n ids.NodeID) (string, bool) { a, ok := addrs[n]; return a, ok }}
		if blocked != nil {
			cfg.Blocked = func(peer ids.NodeID) bool { return blocked(self, peer) }
		}
		tr := New(cfg, eng)
		rec := &recorder{}
		tr.SetReceiver(rec)
		stop := serve(lis[i], tr)
		eps[i] = &endpoint{t: tr, recv: rec, addr: addrs[self], eng: eng}
		t.Cleanup(func() { stop(); tr.Stop(); eng.Close() })
	}
	return eps[0], eps[1]
}

// serve serves tr's receiving side on l as a node does: one port, a port
// mux sending gRPC to the RaftTransport service and framed connections to
// ServeConn. It returns the function that stops it.
func serve(l net.Listener, tr *Transport) (stop func()) {
	m := portmux.New(l, 5*time.Second)
	raft := m.Match(Magic)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(dial.MaxMsgBytes)) // as node serves it
	concordpb.RegisterRaftTransportServer(srv, tr.Server())
	go srv.Serve(m.GRPC())
	go func() {
		for {
			c, err := raft.Accept()
			if err != nil {
				return
			}
			go tr.ServeConn(c)
		}
	}()
	go m.Serve()
	return func() { srv.Stop(); m.Close() }
}

// wires are the two ways raft messages travel, for tests of both.
var wires = []string{WireTCP, WireGRPC}

func heartbeat(to uint64) *pb.Message {
	return &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(to), From: new(uint64(1)), Term: new(uint64(3))}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestFlushSendsOneBatch protects the batching contract: messages queued by
// Send leave only at Flush, and what was queued for a peer travels together.
func TestFlushSendsOneBatch(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) { testFlushSendsOneBatch(t, wire) })
	}
}

func testFlushSendsOneBatch(t *testing.T, wire string) {
	a, b := pairWire(t, wire, nil)
	for i := 0; i < 5; i++ {
		a.t.Send(2, ids.ShardID(i), heartbeat(2))
	}
	time.Sleep(50 * time.Millisecond) // nothing may arrive before Flush; absence cannot be polled
	if n := b.recv.messages(); n != 0 {
		t.Fatalf("%d messages arrived before Flush", n)
	}
	a.t.Flush()
	waitFor(t, "5 messages", func() bool { return b.recv.messages() == 5 })
	b.recv.mu.Lock()
	defer b.recv.mu.Unlock()
	if len(b.recv.batches) != 1 {
		t.Fatalf("5 messages flushed together arrived in %d batches, want 1", len(b.recv.batches))
	}
}

// TestQueueFullReportsUnreachable protects backpressure: Send never blocks,
// and a peer whose queue is full is reported unreachable (raft retransmits).
func TestQueueFullReportsUnreachable(t *testing.T) {
	a, _ := pair(t, nil)
	p, err := a.t.peer(2)
	if err != nil {
		t.Fatal(err)
	}
	close(p.stopC) // keep the sender from draining the queue
	for i := 0; i < 20; i++ {
		a.t.Send(2, 1, heartbeat(2))
	}
	a.recv.mu.Lock()
	defer a.recv.mu.Unlock()
	if a.recv.unreachable[2] == 0 {
		t.Fatal("a full queue (QueueLen 8, 20 sends) did not report the peer unreachable")
	}
}

// TestBlockedPeerCutBothWays protects the partition fault: a node that
// blocks a peer neither sends to it nor accepts from it.
func TestBlockedPeerCutBothWays(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) { testBlockedPeerCutBothWays(t, wire) })
	}
}

func testBlockedPeerCutBothWays(t *testing.T, wire string) {
	// Node 1 blocks node 2; node 2 blocks no one.
	a, b := pairWire(t, wire, func(self, peer ids.NodeID) bool { return self == 1 && peer == 2 })
	a.t.Send(2, 1, heartbeat(2))
	a.t.Flush()
	b.t.Send(1, 1, heartbeat(1))
	b.t.Flush()
	time.Sleep(200 * time.Millisecond) // absence cannot be polled
	if n := b.recv.messages(); n != 0 {
		t.Fatalf("blocked sender delivered %d messages", n)
	}
	if n := a.recv.messages(); n != 0 {
		t.Fatalf("blocking receiver accepted %d messages", n)
	}
}

// TestSnapshotKeysOutsideShardRefused protects the receiver: a snapshot
// stream may only carry keys of its own shard's state span.
func TestSnapshotKeysOutsideShardRefused(t *testing.T) {
	_, b := pair(t, nil)
	applied, err := proto.Marshal(&storepb.AppliedState{Index: 10, Term: 2})
	if err != nil {
		t.Fatal(err)
	}
	send := func(shard uint64, key []byte) error {
		return sendSnapshot(b.addr, shard, 10, 2, &concordpb.KeyValue{Key: keys.Applied(shard), Value: applied},
			&concordpb.KeyValue{Key: key, Value: []byte("v")})
	}
	if err := send(3, keys.User(4, []byte("k"))); err == nil {
		t.Fatal("a snapshot of shard 3 carrying a key of shard 4 was accepted")
	}
	if err := send(3, keys.User(3, []byte("k"))); err != nil {
		t.Fatalf("a well-formed snapshot was refused: %v", err)
	}
	b.recv.mu.Lock()
	defer b.recv.mu.Unlock()
	if len(b.recv.snaps) != 1 {
		t.Fatalf("receiver got %d snapshots, want exactly the well-formed one", len(b.recv.snaps))
	}
}

// TestSnapshotAppliedStateMismatchRefused protects the receiver: the data's
// applied state must be the one the header's MsgSnap names. Raft would
// accept the snapshot by its header, and installing data applied elsewhere
// (or nowhere) fails after the shard was replaced: a fatal error.
func TestSnapshotAppliedStateMismatchRefused(t *testing.T) {
	_, b := pair(t, nil)
	applied := func(index, term uint64) *concordpb.KeyValue {
		v, err := proto.Marshal(&storepb.AppliedState{Index: index, Term: term})
		if err != nil {
			t.Fatal(err)
		}
		return &concordpb.KeyValue{Key: keys.Applied(3), Value: v}
	}
	user := &concordpb.KeyValue{Key: keys.User(3, []byte("k")), Value: []byte("v")}
	for _, kvs := range [][]*concordpb.KeyValue{{user}, {applied(9, 2), user}, {applied(10, 1), user}} {
		if err := sendSnapshot(b.addr, 3, 10, 2, kvs...); err == nil {
			t.Errorf("a snapshot at 10/2 whose data holds %v was accepted", kvs)
		}
	}
	if err := sendSnapshot(b.addr, 3, 10, 2, applied(10, 2), user); err != nil {
		t.Fatalf("a well-formed snapshot was refused: %v", err)
	}
	b.recv.mu.Lock()
	defer b.recv.mu.Unlock()
	if len(b.recv.snaps) != 1 {
		t.Fatalf("receiver got %d snapshots, want exactly the well-formed one", len(b.recv.snaps))
	}
}

// TestSnapshotConfStateMismatchRefused (found in review): the data's
// configuration must be the one the header's MsgSnap names. Raft restores
// the header's and the replica stores the data's, so a stream whose two
// disagree (or whose data has none) left a replica running one
// configuration and restarting into another. The stream is refused, and
// nothing of it stays staged.
func TestSnapshotConfStateMismatchRefused(t *testing.T) {
	_, b := pair(t, nil)
	applied, err := proto.Marshal(&storepb.AppliedState{Index: 10, Term: 2})
	check(t, err)
	conf := func(cs *pb.ConfState) *concordpb.KeyValue {
		v, err := proto.Marshal(cs)
		check(t, err)
		return &concordpb.KeyValue{Key: keys.ConfState(3), Value: v}
	}
	header := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	user := &concordpb.KeyValue{Key: keys.User(3, []byte("k")), Value: []byte("v")}
	for _, kvs := range [][]*concordpb.KeyValue{
		{{Key: keys.Applied(3), Value: applied}, user},                                              // no configuration
		{{Key: keys.Applied(3), Value: applied}, conf(&pb.ConfState{Voters: []uint64{1, 2}}), user}, // another one
		{{Key: keys.Applied(3), Value: applied}, conf(&pb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}), user},
	} {
		if err := sendSnapshotConf(b.addr, 3, 10, 2, header, kvs...); err == nil || !strings.Contains(err.Error(), "configuration") {
			t.Errorf("a snapshot whose header says %v and whose data holds %v: %v; want refused", header, kvs[1:], err)
		}
	}
	if files := stagedFiles(t, b.t); len(files) != 0 {
		t.Errorf("refused snapshots left staged files: %v", files)
	}
	same := conf(&pb.ConfState{Voters: []uint64{3, 1, 2}, AutoLeave: new(false)}) // the same set, in another order
	if err := sendSnapshotConf(b.addr, 3, 10, 2, header, &concordpb.KeyValue{Key: keys.Applied(3), Value: applied}, same, user); err != nil {
		t.Fatalf("a well-formed snapshot was refused: %v", err)
	}
	b.recv.mu.Lock()
	defer b.recv.mu.Unlock()
	if len(b.recv.snaps) != 1 {
		t.Fatalf("receiver got %d snapshots, want exactly the well-formed one", len(b.recv.snaps))
	}
}

// sendSnapshot streams a snapshot of shard at index/term with kvs, from
// node 1 to node 2 at addr, and returns the outcome.
func sendSnapshot(addr string, shard, index, term uint64, kvs ...*concordpb.KeyValue) error {
	return sendSnapshotConf(addr, shard, index, term, nil, kvs...)
}

// sendSnapshotConf is sendSnapshot with cs as the header's configuration.
func sendSnapshotConf(addr string, shard, index, term uint64, cs *pb.ConfState, kvs ...*concordpb.KeyValue) error {
	conn, err := dial.Dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := concordpb.NewRaftTransportClient(conn).SendSnapshot(ctx)
	if err != nil {
		return err
	}
	m := &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: cs}}}
	hdr, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	// A stream the receiver ended already fails Send with io.EOF; its
	// status comes from CloseAndRecv.
	if err := s.Send(&concordpb.SnapshotChunk{ClusterId: 7, FromNodeId: 1, ToNodeId: 2, ShardId: shard, RaftMessage: hdr,
		Kvs: kvs, Done: true}); err != nil && err != io.EOF {
		return err
	}
	_, err = s.CloseAndRecv()
	return err
}

// TestWrongClusterRefused protects against cross-talk between clusters
// that reuse addresses: a batch for another cluster id ends the stream.
func TestWrongClusterRefused(t *testing.T) {
	_, b := pair(t, nil)
	conn, err := dial.Dial(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := concordpb.NewRaftTransportClient(conn).Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&concordpb.RaftBatch{ClusterId: 99, FromNodeId: 1, ToNodeId: 2})
	if _, err := s.CloseAndRecv(); err == nil {
		t.Fatal("a batch for cluster 99 was accepted by cluster 7")
	}
	if n := b.recv.messages(); n != 0 {
		t.Fatalf("%d messages delivered from another cluster", n)
	}
}
