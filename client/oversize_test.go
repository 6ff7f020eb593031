package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
)

// TestRequestPastTheMessageLimitRefusedBeforeSending protects writes too
// large for any node's message limit (dial.MaxMsgBytes): a node refuses
// such a message whole, and on a stream breaks the stream, so the write
// came back ErrAmbiguous ("the request stream broke") though nothing
// could have applied. The client refuses it before sending, on every
// path, with InvalidArgument.
func TestRequestPastTheMessageLimitRefusedBeforeSending(t *testing.T) {
	big := make([]byte, dial.MaxMsgBytes+1)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			var seen atomic.Int32
			_, c := scriptedNode(t, p.opts, func(int, *concordpb.RequestHeader) error {
				seen.Add(1)
				return nil
			})
			calls := map[string]func(ctx context.Context) error{
				"put": func(ctx context.Context) error { _, _, err := c.Put(ctx, []byte("k"), big); return err },
				"cas": func(ctx context.Context) error {
					_, err := c.CompareAndSwap(ctx, []byte("k"), CAS{ExpectAbsent: true, Value: big})
					return err
				},
				"batch": func(ctx context.Context) error {
					_, err := c.Batch(ctx, []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: big}})
					return err
				},
				// Under the limit in keys and values, over it with each
				// op's own bytes.
				"batch of many ops": func(ctx context.Context) error {
					const n = 1 << 20
					value := make([]byte, maxRequestBytes/n-2)
					ops := make([]*concordpb.Op, n)
					for i := range ops {
						ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: value, TtlMs: 1 << 40}
					}
					if sz := proto.Size(&concordpb.BatchRequest{Ops: ops}); sz <= dial.MaxMsgBytes {
						t.Fatalf("the batch of many ops is %d bytes, within the message limit: not the case meant", sz)
					}
					_, err := c.Batch(ctx, ops)
					return err
				},
			}
			for name, call := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := call(ctx)
				cancel()
				if status.Code(err) != codes.InvalidArgument || errors.Is(err, ErrAmbiguous) {
					t.Errorf("%s of %d bytes: %v (code %v); want InvalidArgument, not ambiguous", name, len(big), err, status.Code(err))
				}
			}
			if n := seen.Load(); n != 0 {
				t.Errorf("the node saw %d requests; want none", n)
			}
		})
	}
}
