package transport

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
)

// TestFailedOnReceiveDropsTraffic protects node-id reuse detection: when the
// node cannot durably record that it heard from a peer (OnReceive fails),
// neither the batch nor the snapshot is delivered, and the stream ends with
// an error.
func TestFailedOnReceiveDropsTraffic(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := New(Config{ClusterID: 7, NodeID: 2, QueueLen: 8,
		Resolve:   func(ids.NodeID) (string, bool) { return "", false },
		OnReceive: func(ids.NodeID) error { return errors.New("fsync failed") }}, eng)
	rec := &recorder{}
	tr.SetReceiver(rec)
	srv := grpc.NewServer()
	concordpb.RegisterRaftTransportServer(srv, tr.Server())
	go srv.Serve(l)
	t.Cleanup(func() { srv.Stop(); tr.Stop(); eng.Close() })

	conn, err := dial.Dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := concordpb.NewRaftTransportClient(conn)

	s, err := client.Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := proto.Marshal(heartbeat(2))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&concordpb.RaftBatch{ClusterId: 7, FromNodeId: 1, ToNodeId: 2,
		Messages: []*concordpb.RaftEnvelope{{ShardId: 1, Message: hb}}})
	if _, err := s.CloseAndRecv(); err == nil {
		t.Fatal("a batch whose sender could not be recorded was acknowledged")
	}

	ss, err := client.SendSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2))}}}
	hdr, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	_ = ss.Send(&concordpb.SnapshotChunk{ClusterId: 7, FromNodeId: 1, ToNodeId: 2, ShardId: 3, RaftMessage: hdr,
		Kvs: []*concordpb.KeyValue{{Key: keys.User(3, []byte("k")), Value: []byte("v")}}, Done: true})
	if _, err := ss.CloseAndRecv(); err == nil {
		t.Fatal("a snapshot whose sender could not be recorded was acknowledged")
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.batches) != 0 || len(rec.snaps) != 0 {
		t.Fatalf("delivered %d batches and %d snapshots from an unrecorded peer, want none", len(rec.batches), len(rec.snaps))
	}
}
