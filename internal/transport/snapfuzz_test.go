package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// chunkStream is the receiving side of a snapshot stream whose chunks are
// in memory: Recv hands them out in turn, then io.EOF.
type chunkStream struct {
	grpc.ServerStream // not called by the handler
	chunks            []*concordpb.SnapshotChunk
	ack               *concordpb.SnapshotAck
}

func (s *chunkStream) Recv() (*concordpb.SnapshotChunk, error) {
	if len(s.chunks) == 0 {
		return nil, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

func (s *chunkStream) SendAndClose(a *concordpb.SnapshotAck) error { s.ack = a; return nil }

func (s *chunkStream) Context() context.Context { return context.Background() }

// splitChunks reads data as chunks, each a 2-byte big-endian length and
// that many bytes of a SnapshotChunk; one that does not unmarshal is
// dropped (the gRPC codec refuses it before the handler sees it).
func splitChunks(data []byte) []*concordpb.SnapshotChunk {
	var out []*concordpb.SnapshotChunk
	for len(data) >= 2 {
		n := min(int(binary.BigEndian.Uint16(data)), len(data)-2)
		c := &concordpb.SnapshotChunk{}
		if proto.Unmarshal(data[2:2+n], c) == nil {
			out = append(out, c)
		}
		data = data[2+n:]
	}
	return out
}

func joinChunks(tb testing.TB, chunks ...*concordpb.SnapshotChunk) []byte {
	var out []byte
	for _, c := range chunks {
		b, err := proto.Marshal(c)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(binary.BigEndian.AppendUint16(out, uint16(len(b))), b...)
	}
	return out
}

// snapFuzzSeeds: a good snapshot of shard 3 at 10/2 in one chunk and in
// two, one of another configuration than its header's, and two whose
// applied state is not its header's (another index, another term).
func snapFuzzSeeds(tb testing.TB) [][]byte {
	hdr := func(cs *pb.ConfState) []byte {
		b, err := proto.Marshal(&pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2)), ConfState: cs}}})
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	pair := func(k []byte, m proto.Message) *concordpb.KeyValue {
		v, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return &concordpb.KeyValue{Key: k, Value: v}
	}
	applied := pair(keys.Applied(3), &storepb.AppliedState{Index: 10, Term: 2})
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	conf := pair(keys.ConfState(3), cs)
	user := &concordpb.KeyValue{Key: keys.User(3, []byte("k")), Value: []byte("v")}
	first := func(cs *pb.ConfState, done bool, kvs ...*concordpb.KeyValue) *concordpb.SnapshotChunk {
		return &concordpb.SnapshotChunk{ClusterId: 7, FromNodeId: 1, ToNodeId: 2, ShardId: 3, RaftMessage: hdr(cs), Kvs: kvs, Done: done}
	}
	return [][]byte{
		joinChunks(tb, first(nil, true, applied, user)),
		joinChunks(tb, first(cs, false, applied), &concordpb.SnapshotChunk{ShardId: 3, Kvs: []*concordpb.KeyValue{conf, user}, Done: true}),
		joinChunks(tb, first(nil, true, applied, conf, user)),
		joinChunks(tb, first(nil, true, pair(keys.Applied(3), &storepb.AppliedState{Index: 9, Term: 2}), user)),
		joinChunks(tb, first(nil, true, pair(keys.Applied(3), &storepb.AppliedState{Index: 10, Term: 3}), user)),
	}
}

// FuzzSnapshotStream feeds arbitrary chunk sequences to the snapshot
// receiver (Server.SendSnapshot, on a stream in memory, staging into a
// real Pebble engine). Properties: no panic, no hang; a refused stream
// leaves nothing staged; an accepted one is what its header says: a MsgSnap
// for this node, every pair in its shard's state span, its applied state
// the header's index and term (what the replica would otherwise fail to
// install after the shard was replaced).
func FuzzSnapshotStream(f *testing.F) {
	for _, seed := range snapFuzzSeeds(f) {
		f.Add(seed)
	}
	eng, err := storage.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { eng.Close() })
	tr := New(Config{ClusterID: 7, NodeID: 2, SnapshotIdleTimeout: 10 * time.Second, SnapshotStreamTimeout: time.Minute,
		Resolve: func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }}, eng)
	f.Cleanup(tr.Stop)
	rec := &recorder{}
	tr.SetReceiver(rec)
	f.Fuzz(func(t *testing.T, data []byte) {
		chunks := splitChunks(data)
		s := &chunkStream{chunks: chunks}
		err := tr.Server().SendSnapshot(s)
		snaps := rec.take()
		if err != nil {
			if len(snaps) != 0 || s.ack != nil {
				t.Fatalf("refused (%v), yet delivered %d snapshots, ack %v", err, len(snaps), s.ack)
			}
			if left := stagedFiles(t, tr); len(left) != 0 {
				t.Fatalf("refused (%v), yet staged files are left: %v", err, left)
			}
			return
		}
		if len(snaps) != 1 || !s.ack.GetApplied() {
			t.Fatalf("accepted, with %d snapshots delivered and ack %v", len(snaps), s.ack)
		}
		snaps[0].Discard()
		checkAccepted(t, chunks)
	})
}

// take returns the snapshots delivered so far and forgets them.
func (r *recorder) take() []*storage.StagedSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.snaps
	r.snaps = nil
	return s
}

// checkAccepted checks an accepted stream against its chunks, read apart
// from the receiver: the chunks up to the first done one carry this
// node's MsgSnap, keys of the header's shard's state span only, and the
// last applied state among them is the header's.
func checkAccepted(t *testing.T, chunks []*concordpb.SnapshotChunk) {
	first := chunks[0]
	m := &pb.Message{}
	if err := proto.Unmarshal(first.GetRaftMessage(), m); err != nil || m.GetType() != pb.MsgSnap ||
		first.GetClusterId() != 7 || first.GetToNodeId() != 2 || first.GetFromNodeId() != 1 {
		t.Fatalf("accepted a stream that opens with %v (message %v, %v)", first, m, err)
	}
	shard := first.GetShardId()
	lo, hi := keys.StateSpan(shard)
	applied := &storepb.AppliedState{}
	for _, c := range chunks {
		if c.GetShardId() != shard {
			t.Fatalf("accepted a chunk of shard %d in a stream of shard %d", c.GetShardId(), shard)
		}
		for _, kv := range c.GetKvs() {
			if bytes.Compare(kv.GetKey(), lo) < 0 || bytes.Compare(kv.GetKey(), hi) >= 0 {
				t.Fatalf("accepted key %x outside shard %d's span", kv.GetKey(), shard)
			}
			if bytes.Equal(kv.GetKey(), keys.Applied(shard)) {
				applied = &storepb.AppliedState{}
				if err := proto.Unmarshal(kv.GetValue(), applied); err != nil {
					t.Fatalf("accepted an applied state that does not unmarshal: %v", err)
				}
			}
		}
		if c.GetDone() {
			break
		}
	}
	md := m.GetSnapshot().GetMetadata()
	if applied.GetIndex() != md.GetIndex() || applied.GetTerm() != md.GetTerm() {
		t.Fatalf("accepted data applied at %d/%d under a header at %d/%d", applied.GetIndex(), applied.GetTerm(), md.GetIndex(), md.GetTerm())
	}
}

// TestSnapshotStreamSeeds keeps FuzzSnapshotStream's seeds what they are
// meant to be, so that the fuzzing starts from both outcomes: the first
// two are accepted, the others refused (another configuration than the
// header's; data applied at another index, at another term).
func TestSnapshotStreamSeeds(t *testing.T) {
	eng, err := storage.Open(t.TempDir())
	check(t, err)
	defer eng.Close()
	tr := New(Config{ClusterID: 7, NodeID: 2, Resolve: func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }}, eng)
	defer tr.Stop()
	rec := &recorder{}
	tr.SetReceiver(rec)
	for i, seed := range snapFuzzSeeds(t) {
		err := tr.Server().SendSnapshot(&chunkStream{chunks: splitChunks(seed)})
		for _, s := range rec.take() {
			s.Discard()
		}
		if (err == nil) != (i < 2) {
			t.Errorf("seed %d: err %v", i, err)
		}
	}
}
