package grpcapi

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// keysInTwoShards returns two short keys that f routes to different shards.
func keysInTwoShards(t *testing.T, f *fakeNode) (a, b string, sa, sb ids.ShardID) {
	t.Helper()
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		if i == 0 {
			a, sa = k, f.shardOfKey(k)
		} else if s := f.shardOfKey(k); s != sa {
			return a, k, sa, s
		}
	}
	t.Fatal("no two keys in different shards")
	return
}

// batchErr is the error of a one-op Batch.
func batchErr(kv *KV, op *concordpb.Op) error {
	_, err := kv.Batch(context.Background(), &concordpb.BatchRequest{Ops: []*concordpb.Op{op}})
	return err
}

func put(k string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k)}
}

// TestInvalidRequestsAreRefusedWithTheirReason protects the texts clients
// (and tests/e2e) see for bad input, and that nothing bad reaches raft.
func TestInvalidRequestsAreRefusedWithTheirReason(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	kv, cl := NewKV(f, testLimits), NewCluster(f)
	ctx := context.Background()
	a, b, sa, sb := keysInTwoShards(t, f)
	tooMany := make([]*concordpb.Op, maxBatchOps+1)
	for i := range tooMany {
		tooMany[i] = put(a)
	}
	err := func(_ any, err error) error { return err }
	tests := []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"empty key", err(kv.Get(ctx, &concordpb.GetRequest{})), codes.InvalidArgument, "key is empty"},
		{"oversized key", err(kv.Put(ctx, &concordpb.PutRequest{Key: []byte("12345")})), codes.InvalidArgument,
			"key is 5 bytes; the limit is 4 (--max-key-bytes)"},
		{"oversized value", err(kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("123456789")})), codes.InvalidArgument,
			"value is 9 bytes; the limit is 8 (--max-value-bytes)"},
		{"oversized expected", err(kv.CompareAndSwap(ctx, &concordpb.CompareAndSwapRequest{Key: []byte("k"), Expected: []byte("123456789")})),
			codes.InvalidArgument, "value is 9 bytes; the limit is 8 (--max-value-bytes)"},
		{"empty batch", err(kv.Batch(ctx, &concordpb.BatchRequest{})), codes.InvalidArgument, "batch has no operations"},
		{"too many ops", err(kv.Batch(ctx, &concordpb.BatchRequest{Ops: tooMany})), codes.InvalidArgument,
			"batch has 1001 operations; the limit is 1000"},
		{"session without seq", err(kv.Delete(ctx, &concordpb.DeleteRequest{Header: &concordpb.RequestHeader{SessionId: 5}, Key: []byte("k")})),
			codes.InvalidArgument, "a request with a session must carry a positive sequence number"},
		{"floor without session", err(kv.Delete(ctx, &concordpb.DeleteRequest{Header: &concordpb.RequestHeader{Seq: 3, SessionFloor: 2}, Key: []byte("k")})),
			codes.InvalidArgument, "a session floor needs a session"},
		{"floor above seq", err(kv.Delete(ctx, &concordpb.DeleteRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 3, SessionFloor: 4}, Key: []byte("k")})),
			codes.InvalidArgument, "session floor 4 is above the request's sequence number 3"},
		{"batch across shards", err(kv.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{put(a), put(b)}})), codes.InvalidArgument,
			fmt.Sprintf("batch keys span shards %d and %d; a batch must stay within one shard", sa, sb)},
		{"unknown op", err(kv.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{{Type: 42, Key: []byte("k")}}})), codes.InvalidArgument,
			"operation 0: unknown type 42"},
		{"check skipping past the batch", err(kv.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{
			{Type: concordpb.OpType_OP_CHECK, Key: []byte("k"), ExpectAbsent: true, Skip: 2}, put("k")}})), codes.InvalidArgument,
			"operation 0: skip 2 goes past the end of the batch (1 ops after it)"},
		{"skip on a put", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Skip: 1}), codes.InvalidArgument,
			"operation 0: OP_PUT takes no skip"},
		{"negative put ttl", err(kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), TtlMs: -1})), codes.InvalidArgument,
			"ttl_ms -1 is negative: give a positive time to live, or 0 for none"},
		{"negative ttl of a batch's put", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), TtlMs: -1}), codes.InvalidArgument,
			"operation 0: ttl_ms and expire_at_unix_ms must not be negative"},
		{"negative expire_at", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_EXPIRE, Key: []byte("k"), ExpireAtUnixMs: -5}),
			codes.InvalidArgument, "operation 0: ttl_ms and expire_at_unix_ms must not be negative"},
		{"ttl and expire_at", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), TtlMs: 1, ExpireAtUnixMs: 1}),
			codes.InvalidArgument, "operation 0: at most one of ttl_ms and expire_at_unix_ms may be set"},
		{"ttl on incr", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), TtlMs: 1}),
			codes.InvalidArgument, "operation 0: OP_INCR takes no expiry"},
		{"return_prev on a get", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte("k"), ReturnPrev: true}),
			codes.InvalidArgument, "operation 0: OP_GET takes no return_prev: it is for PUT"},
		{"ttl on the sweep's delete", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: []byte("k"), TtlMs: 5}),
			codes.InvalidArgument, "operation 0: OP_DELETE_EXPIRED takes the index entry's time as expire_at_unix_ms, not a ttl_ms"},
		{"unknown condition", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Condition: 9}),
			codes.InvalidArgument, "operation 0: unknown condition 9"},
		{"GT on put", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Condition: concordpb.Condition_CONDITION_GT}),
			codes.InvalidArgument, "operation 0: OP_PUT takes no condition CONDITION_GT"},
		{"negative offset", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_SET_RANGE, Key: []byte("k"), Offset: -1}),
			codes.InvalidArgument, "operation 0: offset must not be negative"},
		{"set_range beyond the value limit", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_SET_RANGE, Key: []byte("k"), Offset: 6, Value: []byte("abc")}),
			codes.InvalidArgument, "operation 0: offset 6 plus 3 bytes is beyond the value size limit 8 (--max-value-bytes)"},
		{"NaN float delta", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("k"), FloatDelta: math.NaN()}),
			codes.InvalidArgument, "operation 0: float_delta must be a finite number"},
		{"repeat from a client", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1, Repeat: 2}),
			codes.InvalidArgument, "operation 0: repeat 2: repeat is set only by Concord nodes, once the cluster version allows it; send each INCR (or one by the sum)"},
		{"repeat on a put", batchErr(kv, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Repeat: 1}),
			codes.InvalidArgument, "operation 0: OP_PUT takes no repeat: it is for INCR"},
		{"scan backwards", err(kv.Scan(ctx, &concordpb.ScanRequest{Start: []byte("b"), End: []byte("a")})), codes.InvalidArgument,
			`scan start "b" is not before end "a"`},
		{"scan of a missing shard", err(kv.Scan(ctx, &concordpb.ScanRequest{OnlyShard: 99})), codes.NotFound, "shard 99 does not exist"},
		{"join without address", err(cl.Join(ctx, &concordpb.JoinRequest{})), codes.InvalidArgument, "join needs the joining node's address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(tt.err)
			if st.Code() != tt.code || st.Message() != tt.msg {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
	if n := f.proposalCount(); n != 0 {
		t.Fatalf("%d invalid requests reached raft", n)
	}
}

// TestValidRequestsPass protects the boundaries: a key or value exactly at
// its limit, and a batch of exactly maxBatchOps ops in one shard, are fine.
func TestValidRequestsPass(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.proposeResult.Results = make([]*concordpb.OpResult, 1)
	kv := NewKV(f, testLimits)
	ctx := context.Background()
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("1234"), Value: []byte("12345678")}); err != nil {
		t.Fatal(err)
	}
	ops := make([]*concordpb.Op, maxBatchOps)
	for i := range ops {
		ops[i] = put("k")
	}
	if err := (Limits{MaxKeyBytes: 4}).checkOp(0, put(strings.Repeat("x", 4)), opGates{}); err != nil {
		t.Fatal(err)
	}
	// A SET_RANGE ending exactly at the value size limit is fine.
	if err := testLimits.checkOp(0, &concordpb.Op{Type: concordpb.OpType_OP_SET_RANGE, Key: []byte("k"), Offset: 5, Value: []byte("abc")}, opGates{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Batch(ctx, &concordpb.BatchRequest{Ops: ops}); err != nil {
		t.Fatal(err)
	}
	if n := f.proposalCount(); n != 2 {
		t.Fatalf("%d proposals, want 2", n)
	}
}

// TestPutOfTheBatchBoundFits: a put whose key and value together are the
// batch bound passes the batch check, and one byte more is refused as a
// batch too large: with --max-value-bytes at its cap (8 MiB) a put's key
// and value must fit 8 MiB together (docs/operations.md).
func TestPutOfTheBatchBoundFits(t *testing.T) {
	shardOf := func([]byte) (ids.ShardID, error) { return 1, nil }
	const k = 1 << 10
	l := Limits{MaxKeyBytes: k, MaxValueBytes: DefaultMaxBatchBytes - k}
	op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: make([]byte, k), Value: make([]byte, DefaultMaxBatchBytes-k)}
	req := &concordpb.BatchRequest{Ops: []*concordpb.Op{op}}
	if _, err := l.checkBatch(req, shardOf, opGates{}); err != nil {
		t.Fatalf("a put of %d + %d bytes: %v", k, DefaultMaxBatchBytes-k, err)
	}
	l.MaxValueBytes++
	op.Value = append(op.Value, 0)
	if _, err := l.checkBatch(req, shardOf, opGates{}); err == nil || !strings.Contains(err.Error(), "batch is") {
		t.Fatalf("a put one byte over the batch bound: err = %v, want the batch's size refused", err)
	}
}
