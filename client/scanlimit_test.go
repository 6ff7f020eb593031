package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestScanNegativeLimitRefused protects Scan's bad input: a negative limit
// is an error, and no page is asked for. Before, it was read as no limit
// at all (the page size wrapped to 2^32-5, the server capped it), so
// `concord scan --limit -5` printed the whole keyspace.
func TestScanNegativeLimitRefused(t *testing.T) {
	f, c := scriptedNode(t, Options{Unary: true}, func(int, *concordpb.RequestHeader) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kvs, err := c.Scan(ctx, nil, nil, -5)
	if err == nil || !strings.Contains(err.Error(), "limit -5") {
		t.Fatalf("Scan with limit -5 = %d pairs, %v; want an error naming the limit", len(kvs), err)
	}
	if n := len(f.received()); n != 0 {
		t.Fatalf("Scan with limit -5 sent %d requests, want none", n)
	}
}
