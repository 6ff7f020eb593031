package node

import (
	"context"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestRouteViewCached protects the front door's fixed cost: the routing
// view is built once and reused while its inputs stand still, and rebuilt
// (with the same answers) when the placement leader's routes are replaced.
func TestRouteViewCached(t *testing.T) {
	n := startSolo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for n.routingTable().Lookup([]byte("k")) == nil {
		if ctx.Err() != nil {
			t.Fatal("the node never knew the shard of a key")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var v *routeView
	for v == nil || n.routeView() != v { // publications after start may still move it
		if ctx.Err() != nil {
			t.Fatal("the routing view never settled")
		}
		v = n.routeView()
		time.Sleep(50 * time.Millisecond)
	}
	if n.routeView() != v || n.routingTable() != v.table {
		t.Fatal("routing view rebuilt though nothing changed")
	}
	shard := v.table.Lookup([]byte("k")).GetShardId()

	routes := append([]*concordpb.ShardRoute(nil), deref(n.routes.Load())...)
	n.routes.Store(&routes)
	w := n.routeView()
	if w == v {
		t.Fatal("routing view kept after the routes were replaced")
	}
	if got := w.table.Lookup([]byte("k")).GetShardId(); got != shard {
		t.Fatalf("rebuilt view routes k to shard %d, was %d", got, shard)
	}
}

func deref(p *[]*concordpb.ShardRoute) []*concordpb.ShardRoute {
	if p == nil {
		return nil
	}
	return *p
}
