package grpcapi

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/transport"
)

// TestOversizedBatchRefused protects raft from entries it cannot ship: a
// Batch whose keys and values sum past the limit is refused with
// InvalidArgument and its size, and nothing is proposed. Before, nine values
// of 1 MiB each passed every check (each value is under --max-value-bytes)
// and a batch just under the 64 MiB gRPC limit made an entry no RaftBatch
// could carry: the shard stopped taking writes.
func TestOversizedBatchRefused(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	f.echo = true                                                     // a result per proposed op (same-key PUTs are absorbed)
	kv := NewKV(f, Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20}) // the node's defaults
	ctx := context.Background()
	batch := func(n int) *concordpb.BatchRequest {
		ops := make([]*concordpb.Op, n)
		for i := range ops {
			ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: bytes.Repeat([]byte{'v'}, 1<<20)}
		}
		return &concordpb.BatchRequest{Ops: ops}
	}
	_, err := kv.Batch(ctx, batch(9))
	want := fmt.Sprintf("batch is %d bytes of keys and values; the limit is %d", 9*(1+1<<20), DefaultMaxBatchBytes)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != want {
		t.Fatalf("a 9 MiB batch: got %v %q, want InvalidArgument %q", st.Code(), st.Message(), want)
	}
	if n := f.proposalCount(); n != 0 {
		t.Fatalf("an oversized batch was proposed (%d proposals)", n)
	}
	// At the limit is fine: 7 values of 1 MiB and their keys.
	if _, err := kv.Batch(ctx, batch(7)); err != nil {
		t.Fatalf("a 7 MiB batch was refused: %v", err)
	}
	// And the limit is exact.
	small := NewKV(f, Limits{MaxKeyBytes: 4, MaxValueBytes: 8, MaxBatchBytes: 18})
	ops := []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("12345678")},
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("12345678")}}
	if _, err := small.Batch(ctx, &concordpb.BatchRequest{Ops: ops}); err != nil {
		t.Fatalf("a batch of exactly MaxBatchBytes was refused: %v", err)
	}
	ops[1].Expected = []byte("x")
	if _, err := small.Batch(ctx, &concordpb.BatchRequest{Ops: ops}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch one byte over MaxBatchBytes (counting expected values): %v", err)
	}
}

// TestLargestBatchFitsOneRaftBatch protects the relation DefaultMaxBatchBytes
// documents: the largest batch a client may send, as the raft entry it
// becomes, inside a MsgApp, fits comfortably (in three quarters) in one
// RaftBatch, which is itself at most half the gRPC message limit.
func TestLargestBatchFitsOneRaftBatch(t *testing.T) {
	ops := make([]*concordpb.Op, maxBatchOps)
	per := DefaultMaxBatchBytes / maxBatchOps
	for i := range ops {
		ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_CAS, Key: bytes.Repeat([]byte{'k'}, 100),
			Value: bytes.Repeat([]byte{'v'}, per/2-100), Expected: bytes.Repeat([]byte{'e'}, per/2)}
	}
	cmd := &storepb.Command{Id: ^uint64(0), UnixNanos: 1 << 62, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: ^uint64(0), Seq: ^uint64(0), Ops: ops}}}
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(1 << 40)), From: new(uint64(1 << 40)), Term: new(^uint64(0)),
		LogTerm: new(^uint64(0)), Index: new(^uint64(0)), Commit: new(^uint64(0)),
		Entries: []*pb.Entry{{Term: new(^uint64(0)), Index: new(^uint64(0)), Type: pb.EntryNormal.Enum(), Data: data}}}
	msg, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	wire := proto.Size(&concordpb.RaftBatch{ClusterId: ^uint64(0), FromNodeId: ^uint64(0), ToNodeId: ^uint64(0),
		Messages: []*concordpb.RaftEnvelope{{ShardId: ^uint64(0), Message: msg}}})
	t.Logf("largest batch: %d bytes of keys and values, a %d-byte entry, a %d-byte RaftBatch (cap %d, gRPC limit %d)",
		DefaultMaxBatchBytes, len(data), wire, transport.DefaultMaxBatchBytes, dial.MaxMsgBytes)
	if wire > transport.DefaultMaxBatchBytes*3/4 || transport.DefaultMaxBatchBytes > dial.MaxMsgBytes/2 {
		t.Fatalf("the largest batch makes a %d-byte RaftBatch; want at most 3/4 of %d, itself at most half of %d",
			wire, transport.DefaultMaxBatchBytes, dial.MaxMsgBytes)
	}
}
