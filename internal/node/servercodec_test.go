package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/frame"
)

// TestNodeCountsRequestsBeforeDecode: the node's gRPC server uses
// grpcapi.ServerCodec, so a request of more elements than any bound
// allows is refused before it is decoded (before, proto.Unmarshal made
// gigabytes of a 64 MiB request first), and the node still serves.
func TestNodeCountsRequestsBeforeDecode(t *testing.T) {
	n := startSolo(t)
	conn, err := dial.Dial(n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := concordpb.NewKVClient(conn)
	_, err = kv.Batch(ctx, &concordpb.BatchRequest{Ops: make([]*concordpb.Op, frame.MaxStreamCalls+1)})
	if err == nil || !strings.Contains(err.Error(), "failed to unmarshal") {
		t.Fatalf("a batch of %d empty ops: %v; want it refused before it is decoded", frame.MaxStreamCalls+1, err)
	}
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("a put after the refused batch: %v", err)
	}
}
