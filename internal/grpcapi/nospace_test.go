package grpcapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
)

// TestSpaceAlarmRefusesWritesThatAddData: while the alarm is on, a Put, a
// CAS that stores and a batch holding one write that adds data are refused
// (ResourceExhausted, kv.NoSpaceMark and the reason) before anything is
// proposed; a Delete, a deleting CAS and reads go on, as does a batch a
// peer forwarded (its first node decided); with the alarm off a Put is
// proposed again.
func TestSpaceAlarmRefusesWritesThatAddData(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.echo = true
	s := NewKV(f, testLimits)
	ctx := context.Background()
	const reason = "node 2 has 0.8 GiB free, under its --reserve-disk-bytes of 1 GiB"
	s.SetNoSpace(reason)
	if s.NoSpace() == nil {
		t.Fatal("NoSpace is nil with the alarm on")
	}
	refused := func(what string, err error) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), kv.NoSpaceMark) || !strings.Contains(st.Message(), reason) {
			t.Fatalf("%s with the alarm on: %v; want ResourceExhausted %q...", what, err, kv.NoSpaceMark+reason)
		}
	}
	_, err := s.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	refused("Put", err)
	_, err = s.CompareAndSwap(ctx, &concordpb.CompareAndSwapRequest{Key: []byte("k"), Value: []byte("v"), ExpectAbsent: true})
	refused("a storing CAS", err)
	_, err = s.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{
		{Type: concordpb.OpType_OP_DELETE, Key: []byte("k")}, {Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1}}})
	refused("a batch of a DELETE and an INCR", err)
	if n := len(f.proposals); n != 0 {
		t.Fatalf("%d proposals made for refused writes", n)
	}

	if _, err := s.Delete(ctx, &concordpb.DeleteRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("Delete with the alarm on: %v", err)
	}
	if _, err := s.CompareAndSwap(ctx, &concordpb.CompareAndSwapRequest{Key: []byte("k"), Expected: []byte("v"), Delete: true}); err != nil {
		t.Fatalf("a deleting CAS with the alarm on: %v", err)
	}
	if _, err := s.Get(ctx, &concordpb.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("Get with the alarm on: %v", err)
	}
	fwd := &concordpb.BatchRequest{Header: &concordpb.RequestHeader{Hops: 1}, Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}}}
	if _, err := s.Batch(ctx, fwd); err != nil {
		t.Fatalf("a forwarded put with the alarm on: %v", err)
	}
	if n := len(f.proposals); n != 3 {
		t.Fatalf("%d proposals for the delete, the deleting CAS and the forwarded put; want 3", n)
	}

	s.SetNoSpace("")
	if s.NoSpace() != nil {
		t.Fatal("NoSpace is not nil with the alarm off")
	}
	if _, err := s.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("Put with the alarm off: %v", err)
	}
}
