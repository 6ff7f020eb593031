package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestReplyTooLargeIsNotRetried protects what a batch of GETs past the
// read budget reports (docs/operations.md, "Size limits": it "fails
// ResourceExhausted"): the node's answer, at once, after one attempt.
// Every retry is answered the same, so the client retried it until the
// deadline (10 s by default) and then failed with "context deadline
// exceeded", code Unknown. A write answered ResourceExhausted other than
// a full window (gRPC's, for a reply over the message limit: it came after
// the write applied) stops at once too, as ErrAmbiguous keeping the code.
func TestReplyTooLargeIsNotRetried(t *testing.T) {
	tooLarge := status.Error(codes.ResourceExhausted, "reply too large: the read's results pass 67108864 bytes; read fewer or smaller keys at a time")
	gets := []*concordpb.Op{{Type: concordpb.OpType_OP_GET, Key: []byte("a")}, {Type: concordpb.OpType_OP_GET, Key: []byte("a")}}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			opts := p.opts
			opts.AttemptTimeout = 2 * time.Second // a refusal is never a timeout, even on a loaded machine
			f, c := scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error { return tooLarge })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := c.Batch(ctx, gets)
			if status.Code(err) != codes.ResourceExhausted || errors.Is(err, ErrAmbiguous) || len(f.received()) != 1 {
				t.Fatalf("a batch of GETs answered reply too large: %v (code %v) after %d attempts and %v; want a plain ResourceExhausted after 1",
					err, status.Code(err), len(f.received()), time.Since(start))
			}
			f, c = scriptedNode(t, opts, func(int, *concordpb.RequestHeader) error {
				return status.Error(codes.ResourceExhausted, "grpc: received message larger than max (70000000 vs. 67108864)")
			})
			_, _, err = c.Put(ctx, []byte("k"), []byte("v"))
			if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ErrAmbiguous) || len(f.received()) != 1 {
				t.Fatalf("a write answered gRPC's ResourceExhausted: %v (code %v) after %d attempts; want ErrAmbiguous keeping the code after 1",
					err, status.Code(err), len(f.received()))
			}
		})
	}
}
