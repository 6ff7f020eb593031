package grpcapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestBatchRefusesAnOpWithAFieldTheServerDoesNotKnow: an op carrying a
// field this binary does not know (a newer client's, or a newer node's
// forward) is refused with InvalidArgument and nothing is proposed. The
// client's ops become the raft command as they are, unknown fields kept
// (proto preserves them), and every replica's CommandDecoder refuses such
// an entry (storepb.ErrUnknownFields), which stops its node: one request
// would stop every replica of the shard, again at each restart.
func TestBatchRefusesAnOpWithAFieldTheServerDoesNotKnow(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	f.echo = true
	kv := NewKV(f, Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}
	op.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
	// Over the wire, as a client sends it: the server's proto keeps the field.
	wire, err := proto.Marshal(&concordpb.BatchRequest{Ops: []*concordpb.Op{op}})
	if err != nil {
		t.Fatal(err)
	}
	var req concordpb.BatchRequest
	if err := proto.Unmarshal(wire, &req); err != nil {
		t.Fatal(err)
	}
	_, err = kv.Batch(context.Background(), &req)
	for _, cmd := range f.proposals {
		data, merr := proto.Marshal(cmd)
		if merr != nil {
			t.Fatal(merr)
		}
		var d storepb.CommandDecoder
		if _, derr := d.Decode(data); derr != nil {
			t.Fatalf("proposed a command every replica refuses to apply (%v): it stops every node of the shard", derr)
		}
	}
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "does not know") {
		t.Fatalf("an op with an unknown field: %v %q, want InvalidArgument saying the server does not know it", st.Code(), st.Message())
	}
	if n := f.proposalCount(); n != 0 {
		t.Fatalf("%d proposals, want none", n)
	}
}
