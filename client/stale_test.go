package client

import (
	"context"
	"math"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
)

// fakeNode answers RoutingTable with a fixed table and Get with its own name.
type fakeNode struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedClusterServer
	name string
	rt   *concordpb.RoutingTableResponse
}

func (f *fakeNode) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	return f.rt, nil
}

func (f *fakeNode) Get(context.Context, *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	return &concordpb.GetResponse{Found: true, Value: []byte(f.name)}, nil
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func serve(t *testing.T, l net.Listener, f *fakeNode) {
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(l)
}

// newServer is a gRPC server stopped when the test ends.
func newServer(t *testing.T) *grpc.Server {
	s := grpc.NewServer()
	t.Cleanup(s.Stop)
	return s
}

// TestStaleReadServedByAddressedNode: a stale read goes to the node the
// client was given (the CLI's `get --stale --endpoints X` reads X's
// replica), while a linearizable read goes straight to the shard's leader.
func TestStaleReadServedByAddressedNode(t *testing.T) {
	la, lb := listen(t), listen(t)
	rt := &concordpb.RoutingTableResponse{
		Nodes: []*concordpb.NodeDescriptor{{NodeId: 1, Address: la.Addr().String()}, {NodeId: 2, Address: lb.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{
			Shard:        &concordpb.ShardDescriptor{ShardId: 1, StartHash: 0, EndHash: math.MaxUint64},
			LeaderNodeId: 2,
		}},
	}
	serve(t, la, &fakeNode{name: "follower", rt: rt})
	serve(t, lb, &fakeNode{name: "leader", rt: rt})
	ctx := context.Background()
	c, err := New(ctx, la.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, _, err := c.Get(ctx, []byte("k")); err != nil || string(v) != "leader" {
		t.Fatalf("linearizable Get = %q, %v; want it served by the leader", v, err)
	}
	for range 10 {
		if v, _, err := c.Get(ctx, []byte("k"), Stale()); err != nil || string(v) != "follower" {
			t.Fatalf("stale Get = %q, %v; want it served by the node the client was given", v, err)
		}
	}
}
