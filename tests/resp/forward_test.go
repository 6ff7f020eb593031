package resp

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestForwardedWritesUseTheFramedWire protects node-to-node forwarding
// over the framed TCP wire (grpcapi/peerwire.go): pipelined SETs of keys
// in every shard, through every node, so that most land in shards the node
// does not lead and are forwarded, each answer OK and read back through
// another node; and the nodes report the forwarded calls as sent over the
// framed wire (concord_forwarded_calls_total{wire="tcp"}), none over gRPC,
// which every node here could fall back to but none needs.
func TestForwardedWritesUseTheFramedWire(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{HTTP: true})
	ctx := ctxT(t)
	const sets = 300
	for node := range 3 {
		pipe := client(t, c, node).Pipeline()
		var cmds []*redis.StatusCmd
		for j := range sets {
			cmds = append(cmds, pipe.Set(ctx, fmt.Sprintf("fwd:%d:%d", node, j), fmt.Sprintf("v%d", j), 0))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("node %d: pipeline: %v", node, err)
		}
		for j, cmd := range cmds {
			if v, err := cmd.Result(); err != nil || v != "OK" {
				t.Fatalf("node %d: SET %d answered %q, %v", node, j, v, err)
			}
		}
		other := client(t, c, (node+1)%3)
		for j := range sets {
			k := fmt.Sprintf("fwd:%d:%d", node, j)
			if got := must(other.Get(ctx, k).Result())(t, "GET "+k); got != fmt.Sprintf("v%d", j) {
				t.Fatalf("GET %s through node %d: %q, want v%d", k, (node+1)%3, got, j)
			}
		}
	}
	framed, grpc := 0, 0
	for i := range 3 {
		framed += scrapeCounter(t, c.HTTPAddr(i), `concord_forwarded_calls_total{wire="tcp"}`)
		grpc += scrapeCounter(t, c.HTTPAddr(i), `concord_forwarded_calls_total{wire="grpc"}`)
	}
	// 900 SETs in 16 shards, a node leading about a third of them: about
	// 600 are forwarded, in merged batches, plus the GETs read through
	// nodes that do not lead their shard.
	if framed == 0 || grpc != 0 {
		t.Fatalf("forwarded calls: %d over the framed wire, %d over gRPC; want some and none", framed, grpc)
	}
	t.Logf("%d calls forwarded over the framed wire", framed)
}
