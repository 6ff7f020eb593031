package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestRefusalsAreMarkedAnswered protects how a node that forwards a write
// with a unary call tells the leader's refusal from a connection that broke
// after sending it (grpcapi/forward.go): the node marks every error it
// answers, those of its interceptors included (a partition's refusal, which
// DropPartitioned answers before the handler), with the trailer
// concord-answered. Unmarked, a refusal would read as a write that may
// have applied (AMBIGUOUS over Redis).
func TestRefusalsAreMarkedAnswered(t *testing.T) {
	n := startSolo(t)
	n.partitionFrom(nil) // every peer cut off: calls stamped by node 9 are refused
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	kv := concordpb.NewKVClient(conn)
	calls := map[string]struct {
		ctx  context.Context
		req  *concordpb.PutRequest
		code codes.Code
		msg  string
	}{
		"partitioned": {metadata.AppendToOutgoingContext(context.Background(), "concord-from-node", "9"),
			&concordpb.PutRequest{Key: []byte("k")}, codes.Unavailable, "partitioned from node 9"},
		"bad input": {context.Background(), &concordpb.PutRequest{}, codes.InvalidArgument, ""},
	}
	for name, c := range calls {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		var tr metadata.MD
		_, err := kv.Put(ctx, c.req, grpc.Trailer(&tr))
		cancel()
		st := status.Convert(err)
		if st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Fatalf("%s: got %v %q, want %v %q", name, st.Code(), st.Message(), c.code, c.msg)
		}
		if len(tr.Get("concord-answered")) == 0 {
			t.Errorf("%s: the refusal %q carries no concord-answered trailer (trailer %v)", name, st.Message(), tr)
		}
	}
}
