package e2e

import (
	"context"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestAtMostOnce drives sessions by hand over raw gRPC: a resent mutation
// (same session and sequence number) is answered with its first result and
// not applied again, whichever node receives it; an older sequence number is
// refused with FailedPrecondition; a session without a positive sequence
// number is InvalidArgument.
func TestAtMostOnce(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	kv := c.KV(0)
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	const shard = 7
	k := testcluster.KeyInShard(rt, shard, "amo-")
	other := testcluster.KeyInShard(rt, shard, "amo-other-") // same shard: sessions are per shard
	session := rand.Uint64() | 1
	hdr := func(s, seq uint64) *concordpb.RequestHeader { return &concordpb.RequestHeader{SessionId: s, Seq: seq} }
	get := func() string {
		t.Helper()
		resp, err := kv.Get(ctx, &concordpb.GetRequest{Key: k})
		if err != nil {
			t.Fatal(err)
		}
		return string(resp.GetValue())
	}

	first := &concordpb.PutRequest{Header: hdr(session, 1), Key: k, Value: []byte("v1"), ReturnPrev: true}
	resp, err := kv.Put(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetPrevExists() {
		t.Fatalf("first put of %q says a previous value existed: %v", k, resp)
	}
	resp, err = kv.Put(ctx, &concordpb.PutRequest{Header: hdr(session+2, 1), Key: k, Value: []byte("v2"), ReturnPrev: true})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetPrevExists() || string(resp.GetPrevValue()) != "v1" {
		t.Fatalf("second put (another session) = %v, want previous value v1", resp)
	}

	// The exact first request again, to every node: the first answer, and
	// no second application (k stays v2).
	for i := 0; i < c.N(); i++ {
		resp, err := c.KV(i).Put(ctx, proto.CloneOf(first))
		if err != nil {
			t.Fatalf("resend of (session, seq 1) to node %d: %v", i, err)
		}
		if resp.GetPrevExists() || len(resp.GetPrevValue()) != 0 {
			t.Fatalf("resend of (session, seq 1) to node %d answered %v, want the original answer (no previous value)", i, resp)
		}
		if v := get(); v != "v2" {
			t.Fatalf("after resending the first put to node %d, %q = %q; the resend was applied again (want v2)", i, k, v)
		}
	}

	// seq 0 with a session: InvalidArgument.
	_, err = kv.Put(ctx, &concordpb.PutRequest{Header: hdr(session, 0), Key: k, Value: []byte("zero")})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("put with session and seq 0: %v, want InvalidArgument", err)
	}
	// seq 2, then seq 1 again: FailedPrecondition, nothing applied.
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Header: hdr(session, 2), Key: other, Value: []byte("s2")}); err != nil {
		t.Fatal(err)
	}
	_, err = kv.Put(ctx, proto.CloneOf(first))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("seq 1 after seq 2: %v, want FailedPrecondition", err)
	}
	_, err = kv.Put(ctx, &concordpb.PutRequest{Header: hdr(session, 1), Key: k, Value: []byte("stale-seq")})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a new request with seq 1 after seq 2: %v, want FailedPrecondition", err)
	}
	if v := get(); v != "v2" {
		t.Fatalf("after the refused requests %q = %q, want v2", k, v)
	}

	// A CAS retry answers "swapped" again, though a second application
	// would fail the comparison.
	cas := &concordpb.CompareAndSwapRequest{Header: hdr(session+4, 1), Key: other, Expected: []byte("s2"), Value: []byte("s3")}
	for try := 0; try < 2; try++ {
		resp, err := c.KV(try).CompareAndSwap(ctx, proto.CloneOf(cas))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetSucceeded() || string(resp.GetCurrentValue()) != "s2" {
			t.Fatalf("CAS attempt %d = %v, want the first answer (swapped, current s2)", try+1, resp)
		}
	}
	// A request without a session is never deduplicated.
	for try := 0; try < 2; try++ {
		resp, err := kv.Delete(ctx, &concordpb.DeleteRequest{Header: &concordpb.RequestHeader{}, Key: other})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetExisted() != (try == 0) {
			t.Fatalf("sessionless delete %d: existed=%v", try+1, resp.GetExisted())
		}
	}
}
