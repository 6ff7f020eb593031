package transport_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/transport"
)

// The receive path under attack: a real transport Server delivering into a
// real multiraft.Host on a real engine (an in-memory file system, so a
// restart finds exactly what was synced). The target is node 1 of a
// cluster whose address book knows nodes 1..3.
//
// Its shards:
//   - soloShard: one voter, replica 1 on node 1. It commits on its own, so
//     "the node still serves" is checkable with this one node.
//   - sharedShard: replicas 1, 2, 3 on nodes 1, 2, 3 (node 1's replica
//     never gets a quorum here; it is the target of peers' traffic).
//   - remoteShard: replicas 2, 3 on nodes 2, 3; node 1 hosts none.
const (
	targetCluster = 0xc0c0
	soloShard     = ids.ShardID(1)
	sharedShard   = ids.ShardID(2)
	remoteShard   = ids.ShardID(3)
)

func targetDescs() []*concordpb.ShardDescriptor {
	rd := func(id uint64) *concordpb.ReplicaDescriptor {
		return &concordpb.ReplicaDescriptor{ReplicaId: id, NodeId: id}
	}
	return []*concordpb.ShardDescriptor{
		{ShardId: uint64(soloShard), StartHash: 0, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 2, Replicas: []*concordpb.ReplicaDescriptor{rd(1)}},
		{ShardId: uint64(sharedShard), StartHash: 0, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 4, Replicas: []*concordpb.ReplicaDescriptor{rd(1), rd(2), rd(3)}},
		{ShardId: uint64(remoteShard), StartHash: 0, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 4, Replicas: []*concordpb.ReplicaDescriptor{rd(2), rd(3)}},
	}
}

// target is node 1: its engine, host and transport server.
type target struct {
	t     testing.TB
	fs    storage.FS
	eng   *storage.Engine
	host  *multiraft.Host
	tr    *transport.Transport
	ticks *multiraftest.ManualTicks

	mu     sync.Mutex
	fatals []error // guarded by mu
}

func newTarget(t testing.TB) *target {
	t.Helper()
	tg := &target{t: t, fs: storage.NewMemFS()}
	eng := tg.open()
	b := eng.NewBatch()
	for _, d := range targetDescs() {
		for _, r := range d.GetReplicas() {
			if r.GetNodeId() == 1 {
				check(t, storage.BootstrapReplica(b, d, ids.ReplicaID(r.GetReplicaId())))
			}
		}
	}
	check(t, storage.Commit(b, true))
	b.Close()
	check(t, eng.Close())
	check(t, tg.start())
	t.Cleanup(tg.stop)
	return tg
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (tg *target) open() *storage.Engine {
	eng, err := storage.OpenFS(tg.fs, "/node1")
	check(tg.t, err)
	return eng
}

// start opens the engine and starts a host and a transport over it, as a
// node (re)start does.
func (tg *target) start() error {
	tg.eng = tg.open()
	tg.ticks = multiraftest.NewManualTicks()
	cfg := multiraft.DefaultConfig(1)
	cfg.Ticks = tg.ticks
	cfg.Logger = discard
	cfg.Fatal = func(err error) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		tg.fatals = append(tg.fatals, err)
	}
	cfg.Placement = func(shard ids.ShardID) (*concordpb.ShardDescriptor, bool) {
		for _, d := range targetDescs() {
			if ids.ShardID(d.GetShardId()) == shard {
				return d, true
			}
		}
		return nil, true
	}
	tg.host = multiraft.New(cfg, tg.eng, sink{}, func(shard ids.ShardID) replica.StateMachine { return kv.New(uint64(shard)) })
	tg.tr = transport.New(transport.Config{ClusterID: targetCluster, NodeID: 1, Logger: discard,
		Resolve: func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n >= 1 && n <= 3 }}, tg.eng)
	tg.tr.SetReceiver(tg.host)
	if err := tg.host.Start(); err != nil {
		tg.host = nil
		check(tg.t, tg.eng.Close())
		return err
	}
	return nil
}

func (tg *target) stop() {
	if tg.host == nil {
		return
	}
	tg.host.Stop()
	tg.tr.Stop()
	check(tg.t, tg.eng.Close())
	tg.host = nil
}

// restart stops the node and starts it again from what it synced.
func (tg *target) restart() error {
	tg.stop()
	return tg.start()
}

func (tg *target) fatal() []error {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.fatals
}

// settle waits until the host has handled everything delivered so far: the
// first Do runs after the drain that stepped it, the second after that
// iteration's Ready.
func (tg *target) settle() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if err := tg.host.Do(ctx, func() {}); err != nil {
			return err
		}
	}
	return nil
}

// receive feeds batches to the transport server as one peer stream and
// waits until the host has handled them. It returns the stream's outcome.
func (tg *target) receive(batches ...*concordpb.RaftBatch) error {
	s := &fakeStream{in: batches}
	err := tg.tr.Server().Send(s)
	if serr := tg.settle(); serr != nil {
		tg.t.Fatalf("host no longer answers after the input: %v (fatal: %v)", serr, tg.fatal())
	}
	return err
}

// put proposes key=value on soloShard, ticking the host until it leads
// again if an input knocked it off leadership.
func (tg *target) put(key, value string) error {
	cmd := &storepb.Command{Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte(key), Value: []byte(value)}}}}}
	var err error
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = tg.host.Propose(ctx, soloShard, cmd)
		cancel()
		if err == nil {
			return nil
		}
		for range 25 { // more than an election timeout (10..20 ticks)
			if !tg.ticks.Tick() {
				return err
			}
		}
		if serr := tg.settle(); serr != nil {
			return serr
		}
	}
	return err
}

func (tg *target) get(key string) (string, bool) {
	var v []byte
	var ok bool
	err := tg.eng.Read(func(r storage.Reader) (err error) {
		v, _, ok, err = kv.Get(r, uint64(soloShard), []byte(key), 0)
		return err
	})
	check(tg.t, err)
	return string(v), ok
}

// serves checks that the node answers and commits on soloShard.
func (tg *target) serves(key string) {
	tg.t.Helper()
	if err := tg.put(key, "v-"+key); err != nil {
		tg.t.Fatalf("put on the healthy shard failed: %v (fatal: %v)", err, tg.fatal())
	}
	if v, ok := tg.get(key); !ok || v != "v-"+key {
		tg.t.Fatalf("get %q = %q, %v after a committed put", key, v, ok)
	}
}

var discard = slogDiscard()

// sink is the host's outgoing transport: it drops everything (the peers do
// not exist), failing snapshot sends.
type sink struct{}

func (sink) Send(ids.NodeID, ids.ShardID, *pb.Message) {}
func (sink) SendSnapshot(_ ids.NodeID, _ ids.ShardID, _ *pb.Message, _ *storage.Snapshot, done func(bool)) {
	done(false)
}
func (sink) Flush() {}

// fakeStream is a client stream of batches as the gRPC server hands it to
// Server.Send.
type fakeStream struct {
	grpc.ServerStream
	in []*concordpb.RaftBatch
}

func (s *fakeStream) Recv() (*concordpb.RaftBatch, error) {
	if len(s.in) == 0 {
		return nil, io.EOF
	}
	b := s.in[0]
	s.in = s.in[1:]
	return b, nil
}
func (s *fakeStream) SendAndClose(*concordpb.RaftAck) error { return nil }
func (s *fakeStream) Context() context.Context              { return context.Background() }
func (s *fakeStream) SetHeader(metadata.MD) error           { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error          { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)                {}

// batch wraps messages for shard from node from into a batch for node 1.
func batch(from ids.NodeID, shard ids.ShardID, msgs ...*pb.Message) *concordpb.RaftBatch {
	b := &concordpb.RaftBatch{ClusterId: targetCluster, FromNodeId: uint64(from), ToNodeId: 1}
	for _, m := range msgs {
		data, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		b.Messages = append(b.Messages, &concordpb.RaftEnvelope{ShardId: uint64(shard), Message: data})
	}
	return b
}

func cmdBytes(cmd *storepb.Command) []byte {
	data, err := proto.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	return data
}

// The four attacks of issue 10 (defect 2), as the messages that carried them.
var attacks = []struct {
	name  string
	batch *concordpb.RaftBatch
	// after checks, once the node restarted, that the attack did nothing.
	after func(t *testing.T, tg *target)
}{
	{
		// A snapshot on the normal stream: raft accepts it, nothing was
		// staged for it, InstallSnapshot fails, the loop's Fatal ends the
		// process.
		name: "MsgSnap on the raft stream",
		batch: batch(2, soloShard, &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(50)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1000)), Term: new(uint64(40)),
				ConfState: &pb.ConfState{Voters: []uint64{1, 2}}}}}),
	},
	{
		// To=0 for a shard not hosted here: Hosted=0 is persisted before raft
		// refuses id 0, and every later start fails to load it.
		name: "To=0 for a shard not hosted here",
		batch: batch(2, remoteShard, &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(0)), From: new(uint64(2)),
			Term: new(uint64(5))}),
		after: func(t *testing.T, tg *target) {
			if _, ok := tg.host.Info(remoteShard); ok {
				t.Error("a replica of the remote shard was created")
			}
		},
	},
	{
		// A message to a higher replica id than ours destroys and tombstones
		// ours before anything is checked; here it is not even a leader's
		// message, so nothing replaces it.
		name: "higher To destroys the replica",
		batch: batch(2, soloShard, &pb.Message{Type: pb.MsgVoteResp.Enum(), To: new(uint64(7)), From: new(uint64(2)),
			Term: new(uint64(5))}),
		after: func(t *testing.T, tg *target) {
			if i, ok := tg.host.Info(soloShard); !ok || i.ReplicaID != 1 {
				t.Errorf("replica of shard %d after restart: %+v, %v; want replica 1", soloShard, i, ok)
			}
		},
	},
	{
		// A MsgProp from a peer: the leader appends whatever it carries.
		name: "MsgProp from a peer",
		batch: batch(2, soloShard, &pb.Message{Type: pb.MsgProp.Enum(), To: new(uint64(1)), From: new(uint64(2)),
			Entries: []*pb.Entry{{Data: cmdBytes(&storepb.Command{Id: 77, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
				Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("planted"), Value: []byte("x")}}}}})}}}),
		after: func(t *testing.T, tg *target) {
			if v, ok := tg.get("planted"); ok {
				t.Errorf("a peer's MsgProp was applied: planted=%q", v)
			}
		},
	},
	{
		// A MsgProp carrying a conf change no leader would propose: applying
		// it (raft's ApplyConfChange) panics every replica.
		name: "MsgProp with a conf change",
		batch: batch(2, soloShard, &pb.Message{Type: pb.MsgProp.Enum(), To: new(uint64(1)), From: new(uint64(2)),
			Entries: []*pb.Entry{{Type: pb.EntryConfChangeV2.Enum(), Data: mustMarshal(&pb.ConfChangeV2{
				Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(1))}}})}}}),
	},
	{
		// A leader's message for a shard that does not exist: the replica
		// was recorded as hosted, and loaded at every start.
		name: "leader message for a shard that does not exist",
		batch: batch(2, 42, &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(5)), From: new(uint64(2)),
			Term: new(uint64(5))}),
		after: func(t *testing.T, tg *target) {
			if _, ok := tg.host.Info(42); ok {
				t.Error("a replica of shard 42, which does not exist, was created")
			}
		},
	},
	{
		// A leader's message to a higher replica id, from a node that hosts
		// no replica of the shard: it destroyed ours and created an empty
		// replica nobody leads.
		name: "higher To from a non-member",
		batch: batch(2, soloShard, &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(7)), From: new(uint64(2)),
			Term: new(uint64(50))}),
		after: func(t *testing.T, tg *target) {
			if i, ok := tg.host.Info(soloShard); !ok || i.ReplicaID != 1 {
				t.Errorf("replica of shard %d after restart: %+v, %v; want replica 1", soloShard, i, ok)
			}
		},
	},
	{
		// A heartbeat whose commit is beyond the follower's log: raft panics
		// ("tocommit out of range").
		name: "heartbeat commit beyond the log",
		batch: batch(2, sharedShard, &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(1)), From: new(uint64(2)),
			Term: new(uint64(6)), Commit: new(uint64(1 << 40))}),
	},
	{
		// Entries that do not follow m.Index: raft finds a "conflict" below
		// its commit index and panics.
		name: "append whose entries do not follow its index",
		batch: batch(2, sharedShard, &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(1)), From: new(uint64(2)),
			Term: new(uint64(6)), Index: new(uint64(storage.InitialIndex)), LogTerm: new(uint64(storage.InitialTerm)),
			Entries: []*pb.Entry{{Index: new(uint64(3)), Term: new(uint64(6))}}}),
	},
}

func mustMarshal(m proto.Message) []byte {
	data, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return data
}

// TestRaftPortAttacks sends each attack to a serving node, then restarts
// the node: it must never have stopped (Fatal), must start again, must
// serve a put and get, and the attack must have left no trace.
func TestRaftPortAttacks(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			tg := newTarget(t)
			tg.serves("before")
			_ = tg.receive(a.batch) // the stream may be refused; the node must stay up
			tg.serves("during")
			if f := tg.fatal(); len(f) > 0 {
				t.Fatalf("the node stopped (Fatal): %v", f)
			}
			if err := tg.restart(); err != nil {
				t.Fatalf("the node does not start again: %v", err)
			}
			tg.serves("after")
			if v, ok := tg.get("before"); !ok || v != "v-before" {
				t.Errorf("before = %q, %v after restart", v, ok)
			}
			if a.after != nil {
				a.after(t, tg)
			}
			if f := tg.fatal(); len(f) > 0 {
				t.Fatalf("the node stopped (Fatal): %v", f)
			}
		})
	}
}

// TestUnknownSenderRefused: a stream from a node id with no address in the
// book is refused before anything is delivered.
func TestUnknownSenderRefused(t *testing.T) {
	tg := newTarget(t)
	hb := &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(9))}
	for _, from := range []ids.NodeID{0, 1, 77} {
		if err := tg.receive(batch(from, sharedShard, hb)); err == nil || !strings.Contains(err.Error(), "node") {
			t.Errorf("stream claiming node %d: err %v, want a refusal", from, err)
		}
	}
	if i, _ := tg.host.Info(sharedShard); i.Term >= 9 {
		t.Errorf("a refused stream's heartbeat reached raft (term %d)", i.Term)
	}
}

// TestSenderChangeMidStreamRefused: a stream's sender is fixed by its
// first batch.
func TestSenderChangeMidStreamRefused(t *testing.T) {
	tg := newTarget(t)
	hb := func(term uint64) *pb.Message {
		return &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(term)}
	}
	err := tg.receive(batch(2, sharedShard, hb(6)), batch(3, sharedShard, hb(9)))
	if err == nil {
		t.Fatal("a stream whose sender changed from node 2 to node 3 was accepted")
	}
	if i, _ := tg.host.Info(sharedShard); i.Term != 6 {
		t.Errorf("term %d after the stream; want 6 (the first batch only)", i.Term)
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
