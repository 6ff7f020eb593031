package replica

import (
	"log/slog"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// solo is the smallest fixture for a Replica's own bookkeeping: a shard
// whose only voter is replica 1, on its own engine. It elects itself, and
// nothing it proposes commits until the test runs a Ready cycle, so tests
// can hold work pending for as long as they like. Whole groups driven by
// the real multiraft loop are in internal/multiraft/multiraftest.
type solo struct {
	t   *testing.T
	eng *storage.Engine
	r   *Replica
	ids uint64
	// now is the host time the test passes to FlushReads and Step.
	now int64
}

const soloShard = 1

func newSolo(t *testing.T) *solo {
	t.Helper()
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	d := &concordpb.ShardDescriptor{ShardId: soloShard, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 2,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1)}}
	b := eng.NewBatch()
	defer b.Close()
	if err := storage.BootstrapReplica(b, d, 1); err != nil {
		t.Fatal(err)
	}
	if err := storage.Commit(b, true); err != nil {
		t.Fatal(err)
	}
	return startSolo(t, eng, 1000)
}

// startSolo loads the solo replica from eng, with a fresh state machine
// (as a restarted process has), and makes it leader. Command ids start
// after ids.
func startSolo(t *testing.T, eng *storage.Engine, ids uint64) *solo {
	t.Helper()
	r, err := Load(eng, Config{NodeID: 1, Shard: soloShard, ReplicaID: 1, ElectionTicks: 10, HeartbeatTicks: 1,
		MaxSizePerMsgBytes: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedBytes: 64 << 20,
		PendingTimeoutTicks: 10000, Logger: slog.New(slog.DiscardHandler)}, kv.New(soloShard))
	if err != nil {
		t.Fatal(err)
	}
	s := &solo{t: t, eng: eng, r: r, ids: ids}
	if err := r.Campaign(); err != nil {
		t.Fatal(err)
	}
	for r.HasReady() {
		s.cycle()
	}
	if !r.IsLeader() {
		t.Fatal("the only voter did not become leader")
	}
	return s
}

// cycle runs one Ready cycle as the multiraft loop does.
func (s *solo) cycle() { s.cycleInspect(nil) }

// cycleInspect runs one Ready cycle, handing the batch to inspect (if not
// nil) just before it is committed.
func (s *solo) cycleInspect(inspect func(*pebble.Batch)) {
	s.t.Helper()
	rd := s.r.Ready()
	if !raft.IsEmptySnap(rd.Snapshot) {
		s.t.Fatal("a lone voter got a snapshot")
	}
	b := s.eng.NewIndexedBatch()
	defer b.Close()
	if err := s.r.Persist(b, rd); err != nil {
		s.t.Fatal(err)
	}
	if err := s.r.Apply(b, rd); err != nil {
		s.t.Fatal(err)
	}
	if inspect != nil {
		inspect(b)
	}
	if err := storage.Commit(b, rd.MustSync); err != nil {
		s.t.Fatal(err)
	}
	s.r.Advance(rd)
}

// proposal returns a proposal of a put of k.
func (s *solo) proposal(k, v string) *Proposal {
	s.ids++
	cmd := &storepb.Command{Id: s.ids, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v)}}}}}
	data, err := proto.Marshal(cmd)
	if err != nil {
		s.t.Fatal(err)
	}
	return &Proposal{ID: s.ids, Data: data, Done: make(chan Outcome, 1)}
}

// propose hands a put to raft (queued and flushed), without running a cycle.
func (s *solo) propose(k, v string) *Proposal {
	p := s.proposal(k, v)
	s.r.Propose(p)
	s.r.FlushProposals()
	return p
}

// read queues a linearizable read on the replica.
func (s *solo) read() *Read {
	rd := &Read{Done: make(chan error, 1)}
	s.r.ReadIndex(rd)
	return rd
}

// stage writes an empty staged snapshot of the solo shard.
func (s *solo) stage() *storage.StagedSnapshot {
	s.t.Helper()
	w, err := s.eng.NewSnapshotWriter(soloShard)
	if err != nil {
		s.t.Fatal(err)
	}
	staged, err := w.Finish()
	if err != nil {
		s.t.Fatal(err)
	}
	return staged
}
