package replica

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// This file is a test harness: a 3-replica raft group in one process, each
// replica on its own Pebble engine, driven by a loop that does what
// multiraft's handleReady does, with an in-memory network that can cut nodes
// off. Node ids equal replica ids, as in the initial placement.

const (
	testShard    = 1
	initialIndex = 5 // as internal/node/bootstrap.go
	initialTerm  = 5
)

type member struct {
	id  uint64
	dir string
	eng *storage.Engine
	r   *Replica
}

type envelope struct {
	from, to uint64 // nodes
	m        *pb.Message
}

type group struct {
	t       *testing.T
	members []*member // index i holds node i+1
	net     []envelope
	cut     map[uint64]bool // nodes whose traffic is dropped both ways
	snaps   map[uint64]*pebble.Snapshot
	nextID  uint64
	desc    *concordpb.ShardDescriptor
}

// newGroup bootstraps and loads a 3-replica shard, one replica per engine.
func newGroup(t *testing.T) *group {
	t.Helper()
	g := &group{t: t, cut: map[uint64]bool{}, snaps: map[uint64]*pebble.Snapshot{}, nextID: 1000}
	g.desc = &concordpb.ShardDescriptor{ShardId: testShard, StartHash: 0, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 4}
	for id := uint64(1); id <= 3; id++ {
		g.desc.Replicas = append(g.desc.Replicas, &concordpb.ReplicaDescriptor{ReplicaId: id, NodeId: id})
	}
	for id := uint64(1); id <= 3; id++ {
		m := &member{id: id, dir: t.TempDir()}
		g.members = append(g.members, m)
		g.open(m)
		g.bootstrap(m)
		g.load(m)
	}
	t.Cleanup(func() {
		for _, s := range g.snaps {
			s.Close()
		}
		for _, m := range g.members {
			_ = m.eng.Close()
		}
	})
	return g
}

func (g *group) open(m *member) {
	eng, err := storage.Open(m.dir)
	if err != nil {
		g.t.Fatal(err)
	}
	m.eng = eng
}

// bootstrap writes what internal/node's bootstrapReplica writes.
func (g *group) bootstrap(m *member) {
	b := m.eng.DB.NewBatch()
	defer b.Close()
	voters := []uint64{1, 2, 3}
	for _, err := range []error{
		b.Set(keys.Hosted(testShard), binary.BigEndian.AppendUint64(nil, m.id), nil),
		storage.SetProto(b, keys.HardState(testShard), &pb.HardState{Term: new(uint64(initialTerm)), Commit: new(uint64(initialIndex))}),
		storage.SetProto(b, keys.Truncated(testShard), &storepb.TruncatedState{Index: initialIndex, Term: initialTerm}),
		storage.SetProto(b, keys.Applied(testShard), &storepb.AppliedState{Index: initialIndex, Term: initialTerm}),
		storage.SetProto(b, keys.ConfState(testShard), &pb.ConfState{Voters: voters}),
		storage.SetProto(b, keys.Descriptor(testShard), g.desc),
		b.Commit(pebble.Sync),
	} {
		if err != nil {
			g.t.Fatal(err)
		}
	}
}

// load (re)creates m's replica from its engine.
func (g *group) load(m *member) {
	cfg := Config{
		NodeID: m.id, Shard: testShard, ReplicaID: m.id,
		ElectionTicks: 10, HeartbeatTicks: 1,
		MaxSizePerMsgBytes: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedBytes: 64 << 20,
		PendingTimeoutTicks: 10000,
		Snapshot:            g.snapshotFunc(m),
		Logger:              slog.New(slog.DiscardHandler),
	}
	r, err := Load(m.eng, cfg, kv.New(testShard))
	if err != nil {
		g.t.Fatal(err)
	}
	m.r = r
}

// snapshotFunc is multiraft's: a handle to a Pebble snapshot at the applied index.
func (g *group) snapshotFunc(m *member) func() (*pb.Snapshot, error) {
	return func() (*pb.Snapshot, error) {
		snap := m.eng.DB.NewSnapshot()
		var as storepb.AppliedState
		cs := &pb.ConfState{}
		if _, err := storage.GetProto(snap, keys.Applied(testShard), &as); err != nil {
			return nil, err
		}
		if _, err := storage.GetProto(snap, keys.ConfState(testShard), cs); err != nil {
			return nil, err
		}
		g.nextID++
		g.snaps[g.nextID] = snap
		return &pb.Snapshot{
			Data:     binary.BigEndian.AppendUint64(nil, g.nextID),
			Metadata: &pb.SnapshotMetadata{Index: new(as.GetIndex()), Term: new(as.GetTerm()), ConfState: cs},
		}, nil
	}
}

func (g *group) node(id uint64) *member { return g.members[id-1] }

// cycle runs one Ready cycle of m as multiraft's handleReady does. It
// reports whether there was one.
func (g *group) cycle(m *member) bool {
	if m.r.Removed() || !m.r.HasReady() { // multiraft destroys a removed replica
		return false
	}
	rd := m.r.Ready()
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := m.r.InstallSnapshot(rd); err != nil {
			g.t.Fatalf("node %d: install snapshot: %v", m.id, err)
		}
	}
	b := m.eng.DB.NewIndexedBatch()
	defer b.Close()
	if err := m.r.Persist(b, rd); err != nil {
		g.t.Fatalf("node %d: persist: %v", m.id, err)
	}
	if err := m.r.Apply(b, rd); err != nil {
		g.t.Fatalf("node %d: apply: %v", m.id, err)
	}
	early, late := m.r.Messages(rd)
	g.send(m, early)
	opts := pebble.NoSync
	if rd.MustSync {
		opts = pebble.Sync
	}
	if err := b.Commit(opts); err != nil {
		g.t.Fatal(err)
	}
	g.send(m, late)
	m.r.Advance(rd)
	return true
}

func (g *group) send(from *member, out []Outbound) {
	for _, ob := range out {
		g.net = append(g.net, envelope{from: from.id, to: ob.ToNode, m: ob.Msg})
	}
}

// deliver hands every queued message to its replica, marshalled and
// unmarshalled as by the transport. It reports whether there were any.
func (g *group) deliver() bool {
	msgs := g.net
	g.net = nil
	for _, env := range msgs {
		if g.cut[env.from] || g.cut[env.to] {
			if env.m.GetType() == pb.MsgSnap {
				g.node(env.from).r.ReportSnapshot(env.m.GetTo(), false)
			}
			continue
		}
		data, err := proto.Marshal(env.m)
		if err != nil {
			g.t.Fatal(err)
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(data, m); err != nil {
			g.t.Fatal(err)
		}
		to := g.nodeOrCreate(env.to, m)
		if to == nil {
			continue
		}
		if m.GetType() == pb.MsgSnap {
			g.stageSnapshot(to, m)
		}
		_ = to.r.Step(env.from, m) // errors are raft's to report, as in multiraft.step
		if m.GetType() == pb.MsgSnap {
			g.node(env.from).r.ReportSnapshot(m.GetTo(), true)
		}
	}
	return len(msgs) > 0
}

// nodeOrCreate returns node id, creating it empty (as multiraft's
// createReplica does) when a leader's message is the first to reach it.
func (g *group) nodeOrCreate(id uint64, m *pb.Message) *member {
	if int(id) <= len(g.members) {
		return g.node(id)
	}
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
	default:
		return nil
	}
	if int(id) != len(g.members)+1 || m.GetTo() != id {
		g.t.Fatalf("harness supports adding node %d with replica id %d only", len(g.members)+1, len(g.members)+1)
	}
	n := &member{id: id, dir: g.t.TempDir()}
	g.open(n)
	g.members = append(g.members, n)
	g.load(n)
	return n
}

// stageSnapshot streams the sender's state span into an SST on the receiver,
// as the transport does, and stages it.
func (g *group) stageSnapshot(to *member, m *pb.Message) {
	id := binary.BigEndian.Uint64(m.GetSnapshot().GetData())
	snap := g.snaps[id]
	delete(g.snaps, id)
	defer snap.Close()
	w, err := to.eng.NewSnapshotWriter(testShard)
	if err != nil {
		g.t.Fatal(err)
	}
	lo, hi := keys.StateSpan(testShard)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		g.t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := w.Set(it.Key(), it.Value()); err != nil {
			g.t.Fatal(err)
		}
	}
	if err := it.Close(); err != nil {
		g.t.Fatal(err)
	}
	staged, err := w.Finish()
	if err != nil {
		g.t.Fatal(err)
	}
	to.r.StageSnapshot(m.GetSnapshot().GetMetadata().GetIndex(), staged)
}

func (g *group) tick() {
	for _, m := range g.members {
		m.r.Tick()
	}
}

// runUntil runs the group (cycles, deliveries, and a tick whenever it is
// idle) until cond holds, failing after a bound on the steps taken.
func (g *group) runUntil(what string, cond func() bool) {
	g.t.Helper()
	for step := 0; step < 5000; step++ {
		if cond() {
			return
		}
		busy := false
		for _, m := range g.members {
			busy = g.cycle(m) || busy
		}
		busy = g.deliver() || busy
		if !busy || step%20 == 19 {
			g.tick()
		}
	}
	g.t.Fatalf("gave up waiting for %s", what)
}

// elect makes node id campaign and waits until every connected replica
// knows it as leader.
func (g *group) elect(id uint64) *member {
	g.t.Helper()
	if err := g.node(id).r.Campaign(); err != nil {
		g.t.Fatal(err)
	}
	g.waitLeader(id)
	return g.node(id)
}

func (g *group) waitLeader(id uint64) {
	g.t.Helper()
	g.runUntil(fmt.Sprintf("node %d to lead", id), func() bool {
		if !g.node(id).r.IsLeader() {
			return false
		}
		for _, m := range g.members {
			if !g.cut[m.id] && m.r.LeaderNode() != id {
				return false
			}
		}
		return true
	})
}

// propose queues a KV command of ops on m and flushes it into raft.
func (g *group) propose(m *member, ops ...*concordpb.Op) *Proposal {
	p := g.proposal(ops...)
	m.r.Propose(p)
	m.r.FlushProposals()
	return p
}

func (g *group) proposal(ops ...*concordpb.Op) *Proposal {
	g.nextID++
	cmd := &storepb.Command{Id: g.nextID, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops}}}
	data, err := proto.Marshal(cmd)
	if err != nil {
		g.t.Fatal(err)
	}
	return &Proposal{ID: g.nextID, Data: data, Done: make(chan Outcome, 1)}
}

// await runs the group until p has its outcome and returns it.
func (g *group) await(p *Proposal) Outcome {
	g.t.Helper()
	g.runUntil(fmt.Sprintf("outcome of proposal %d", p.ID), func() bool { return len(p.Done) > 0 })
	return <-p.Done
}

// converge runs until every connected replica applied as far as the leader
// committed, and returns that index.
func (g *group) converge(leader *member) uint64 {
	g.t.Helper()
	var commit uint64
	g.runUntil("replicas to apply everything committed", func() bool {
		commit = leader.r.Status().GetCommit()
		for _, m := range g.members {
			if !g.cut[m.id] && m.r.Applied() < commit {
				return false
			}
		}
		return true
	})
	return commit
}

// value asserts key's value on every node in ids (absent when want is nil).
func (g *group) value(key string, want []byte, ids ...uint64) {
	g.t.Helper()
	for _, id := range ids {
		got, found, err := kv.Get(g.node(id).eng.DB, testShard, []byte(key))
		if err != nil || found != (want != nil) || string(got) != string(want) {
			g.t.Fatalf("node %d: %q = %q (found %v, %v), want %q", id, key, got, found, err, want)
		}
	}
}

func put(k, v string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v)}
}

// putResult asserts o is a successful single Put that found prev (nil: none).
func putResult(t *testing.T, o Outcome, prev []byte) {
	t.Helper()
	if o.Err != nil || len(o.Result.GetResults()) != 1 {
		t.Fatalf("outcome %+v, want one op result", o)
	}
	r := o.Result.GetResults()[0]
	if r.GetOk() != (prev != nil) || string(r.GetValue()) != string(prev) {
		t.Fatalf("Put found %q (ok %v), want %q", r.GetValue(), r.GetOk(), prev)
	}
}

var all = []uint64{1, 2, 3}

func without(id uint64) []uint64 {
	return slices.DeleteFunc(slices.Clone(all), func(x uint64) bool { return x == id })
}
