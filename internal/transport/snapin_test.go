package transport

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// snapReceiver starts node 2's transport with cfg, staging snapshots in a
// Pebble of its own, and returns it and its address.
func snapReceiver(t *testing.T, cfg Config) (*Transport, string, *recorder) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(t, err)
	eng, err := storage.Open(t.TempDir())
	check(t, err)
	cfg.ClusterID, cfg.NodeID = 7, 2
	cfg.Resolve = func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }
	b := New(cfg, eng)
	rec := &recorder{}
	b.SetReceiver(rec)
	stop := serve(l, b)
	t.Cleanup(func() { stop(); b.Stop(); eng.Close() })
	return b, l.Addr().String(), rec
}

// receiving is how many snapshot streams t receives now.
func (t *Transport) receiving() int { return len(t.snapIn) }

// openSnapshot opens a snapshot stream to addr and sends its first chunk
// (shard 3 at 10/2, not done) unless bare; cancel ends it.
func openSnapshot(t *testing.T, addr string, bare bool) (s concordpb.RaftTransport_SendSnapshotClient, cancel func()) {
	t.Helper()
	conn, err := dial.Dial(addr)
	check(t, err)
	ctx, cancelCtx := context.WithTimeout(context.Background(), 5*time.Second)
	cancel = func() { cancelCtx(); conn.Close() }
	t.Cleanup(cancel)
	s, err = concordpb.NewRaftTransportClient(conn).SendSnapshot(ctx)
	check(t, err)
	if bare {
		return s, cancel
	}
	check(t, s.Send(firstChunk(t)))
	return s, cancel
}

// firstChunk is the first chunk openSnapshot sends.
func firstChunk(t *testing.T) *concordpb.SnapshotChunk {
	t.Helper()
	hdr, err := proto.Marshal(&pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2))}}})
	check(t, err)
	return &concordpb.SnapshotChunk{ClusterId: 7, FromNodeId: 1, ToNodeId: 2, ShardId: 3, RaftMessage: hdr,
		Kvs: []*concordpb.KeyValue{{Key: keys.User(3, []byte("k")), Value: []byte("v")}}}
}

// goodSnapshot sends a complete, well-formed snapshot of shard 3 to addr.
func goodSnapshot(t *testing.T, addr string) error {
	t.Helper()
	v, err := proto.Marshal(&storepb.AppliedState{Index: 10, Term: 2})
	check(t, err)
	return sendSnapshot(addr, 3, 10, 2, &concordpb.KeyValue{Key: keys.Applied(3), Value: v},
		&concordpb.KeyValue{Key: keys.User(3, []byte("k")), Value: []byte("v")})
}

// TestStalledSnapshotStreamEnds (found by review): a snapshot stream had
// no idle timeout, so a sender that stopped sending (before its first
// chunk or in the middle) held a receiver's goroutine, chunk buffers and
// staged file until its own 10-minute deadline. The receiver now ends a
// stream whose next chunk takes longer than SnapshotIdleTimeout, stages
// nothing of it, and takes the next snapshot.
func TestStalledSnapshotStreamEnds(t *testing.T) {
	const idle = 200 * time.Millisecond
	b, addr, rec := snapReceiver(t, Config{SnapshotIdleTimeout: idle})
	for _, bare := range []bool{true, false} {
		s, _ := openSnapshot(t, addr, bare)
		start := time.Now()
		err := s.RecvMsg(&concordpb.SnapshotAck{}) // no CloseSend: the sender stalls
		// The client's own deadline (5 s) would end it too, with another message.
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "no snapshot chunk") {
			t.Fatalf("stalled stream (bare %v): %v after %v; want the receiver's idle deadline", bare, err, time.Since(start))
		}
	}
	waitFor(t, "no snapshot being received", func() bool { return b.receiving() == 0 })
	if err := goodSnapshot(t, addr); err != nil {
		t.Fatalf("a good snapshot after the stalled ones: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 1 {
		t.Fatalf("%d snapshots staged; want only the good one", len(rec.snaps))
	}
}

// TestInboundSnapshotsBounded (found by review): nothing bounded the
// snapshot streams a node received at once, each a goroutine, a staged
// file and a chunk or two of memory. Past MaxInboundSnapshots a new stream
// is refused (ResourceExhausted) before it is read; once one ends, a
// snapshot is taken again.
func TestInboundSnapshotsBounded(t *testing.T) {
	b, addr, rec := snapReceiver(t, Config{MaxInboundSnapshots: 2})
	_, cancelFirst := openSnapshot(t, addr, false)
	openSnapshot(t, addr, false)
	waitFor(t, "two snapshots being received", func() bool { return b.receiving() == 2 })
	if err := goodSnapshot(t, addr); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third snapshot stream: %v; want ResourceExhausted", err)
	}
	cancelFirst()
	waitFor(t, "the cancelled stream ended", func() bool { return b.receiving() == 1 })
	if err := goodSnapshot(t, addr); err != nil {
		t.Fatalf("a snapshot within the bound: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 1 {
		t.Fatalf("%d snapshots staged; want only the one within the bound", len(rec.snaps))
	}
}

// tinyPairs is a shard 3 snapshot source of n pairs of the shortest user
// keys, applied at 10/2: the most pairs for the bytes.
type tinyPairs int

func (n tinyPairs) ScanState(_ ids.ShardID, f func(key, value []byte) error) error {
	v, err := proto.Marshal(&storepb.AppliedState{Index: 10, Term: 2})
	if err != nil {
		return err
	}
	if err := f(keys.Applied(3), v); err != nil {
		return err
	}
	for i := range int(n) {
		if err := f(keys.User(3, binary.BigEndian.AppendUint32(nil, uint32(i))), nil); err != nil {
			return err
		}
	}
	return nil
}

// TestSnapshotChunksBoundedInPairs: a receiver refuses a chunk of more
// than maxRecvChunkKVs pairs before decoding it (the node's gRPC codec;
// proto would make some eighty bytes of each two), so a sender must never
// send one: it cuts its chunks at maxChunkKVs pairs as well as at
// SnapshotChunkBytes. A snapshot of tiny pairs, more than a receiver takes
// in one chunk and within SnapshotChunkBytes, arrives whole.
func TestSnapshotChunksBoundedInPairs(t *testing.T) {
	_, addr, rec := snapReceiver(t, Config{})
	a := New(Config{ClusterID: 7, NodeID: 1, SnapshotChunkBytes: 64 << 20,
		Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	defer a.Stop()
	m := &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2))}}}
	if err := a.sendSnapshot(2, 3, m, tinyPairs(maxRecvChunkKVs+1)); err != nil {
		t.Fatalf("a snapshot of %d tiny pairs: %v", maxRecvChunkKVs+1, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 1 {
		t.Fatalf("%d snapshots staged, want 1", len(rec.snaps))
	}
}

// TestTricklingSnapshotStreamEnds (found in review): the idle deadline
// alone let a sender that sends a small chunk just inside it keep a
// receive slot, its goroutine and a growing staged file for as long as it
// liked (every legitimate sender gives up after snapshotSendTimeout), so
// MaxInboundSnapshots such streams shut the node out of snapshot catch-up.
// The receiver now ends a stream not done within SnapshotStreamTimeout,
// stages nothing of it, and takes the next snapshot.
func TestTricklingSnapshotStreamEnds(t *testing.T) {
	const total = 300 * time.Millisecond
	b, addr, rec := snapReceiver(t, Config{SnapshotIdleTimeout: 2 * time.Second, SnapshotStreamTimeout: total})
	s, _ := openSnapshot(t, addr, false)
	stop := make(chan struct{})
	trickled := make(chan int, 1)
	go func() { // one chunk every 10 ms, far inside the idle deadline
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		i := 0
		for ; ; i++ {
			select {
			case <-stop:
				trickled <- i
				return
			case <-tick.C:
			}
			kv := &concordpb.KeyValue{Key: keys.User(3, binary.BigEndian.AppendUint32([]byte("t"), uint32(i))), Value: []byte("v")}
			if s.Send(&concordpb.SnapshotChunk{ShardId: 3, Kvs: []*concordpb.KeyValue{kv}}) != nil {
				trickled <- i
				return
			}
		}
	}()
	start := time.Now()
	err := s.RecvMsg(&concordpb.SnapshotAck{})
	close(stop)
	n := <-trickled
	// The client's own deadline (5 s) would end it too, with another message.
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "not done after") {
		t.Fatalf("trickling stream (%d chunks): %v after %v; want the receiver's stream deadline", n, err, time.Since(start))
	}
	waitFor(t, "no snapshot being received", func() bool { return b.receiving() == 0 })
	if files := stagedFiles(t, b); len(files) != 0 {
		t.Fatalf("staged files left after the trickling stream ended: %v", files)
	}
	if err := goodSnapshot(t, addr); err != nil {
		t.Fatalf("a good snapshot after the trickling one: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.snaps) != 1 {
		t.Fatalf("%d snapshots staged; want only the good one", len(rec.snaps))
	}
}

// stagedFiles lists the files in the aux dir of the engine t stages into.
func stagedFiles(t *testing.T, b *Transport) []string {
	t.Helper()
	ents, err := os.ReadDir(b.sink.(*storage.Engine).AuxDir())
	check(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
