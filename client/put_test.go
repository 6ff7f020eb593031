package client

import (
	"context"
	"math"
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
