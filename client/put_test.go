package client

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// prevNode answers a Put as a node does: the previous value "old" only when
// the request asks (return_prev). It records the requests.
type prevNode struct {
	fakeNode
	mu   sync.Mutex
	puts []*concordpb.PutRequest
}

func (f *prevNode) Put(_ context.Context, req *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	f.mu.Lock()
	f.puts = append(f.puts, req)
	f.mu.Unlock()
	if !req.GetReturnPrev() {
		return &concordpb.PutResponse{}, nil
	}
	return &concordpb.PutResponse{PrevExists: true, PrevValue: []byte("old")}, nil
}

// TestPutAsksForPrevOnlyWithReturnPrev protects the lean default: a Put
// does not ask for the previous value (the shard then reads nothing), and
// ReturnPrev asks and returns it.
func TestPutAsksForPrevOnlyWithReturnPrev(t *testing.T) {
	l := listen(t)
	f := &prevNode{fakeNode: fakeNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}}
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	ctx := context.Background()
	c, err := New(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if prev, existed, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil || existed || prev != nil {
		t.Fatalf("Put = %q, %v, %v; want no previous value", prev, existed, err)
	}
	if prev, existed, err := c.Put(ctx, []byte("k"), []byte("v"), ReturnPrev()); err != nil || !existed || string(prev) != "old" {
		t.Fatalf("Put with ReturnPrev = %q, %v, %v; want old", prev, existed, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.puts) != 2 || f.puts[0].GetReturnPrev() || !f.puts[1].GetReturnPrev() {
		t.Fatalf("the node received %v; want return_prev only on the second", f.puts)
	}
}

// TestOpErr protects what a Batch user learns of a failed op: nil for
// none, ErrResultTooLarge for an op past the batch's result budget (not
// to be read as a missing key), a named error for every other code.
func TestOpErr(t *testing.T) {
	if err := OpErr(&concordpb.OpResult{Ok: true}); err != nil {
		t.Fatalf("OpErr of a result without error = %v", err)
	}
	if err := OpErr(&concordpb.OpResult{Error: concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE}); !errors.Is(err, ErrResultTooLarge) {
		t.Fatalf("OpErr(RESULT_TOO_LARGE) = %v, want ErrResultTooLarge", err)
	}
	for code := range concordpb.OpError_name {
		e := concordpb.OpError(code)
		if err := OpErr(&concordpb.OpResult{Error: e}); e != concordpb.OpError_OP_ERROR_NONE && (err == nil || strings.Contains(err.Error(), "OP_ERROR")) {
			t.Fatalf("OpErr(%v) = %v, want an error in words", e, err)
		}
	}
}
