package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/node"
)

// freeAddrs reserves n loopback ports by listening on port 0 and closing.
// A port could be taken again before a node binds it; on a test box that
// race is rare enough, and the benchmark then fails loudly in Start.
func freeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var addrs []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return addrs
}

// startInProcessCluster runs three nodes in this process, so that a CPU
// profile of the benchmark covers client, gRPC, raft and Pebble at once.
// Nodes start concurrently: each Start waits for its peers to bootstrap.
func startInProcessCluster(b *testing.B) []string {
	b.Helper()
	addrs := freeAddrs(b, 3)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodes := make([]*node.Node, len(addrs))
	errs := make([]error, len(addrs))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, a := range addrs {
		n, err := node.New(node.Config{Addr: a, DataDir: b.TempDir(), Peers: addrs, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = n
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.Start(ctx) }()
	}
	wg.Wait()
	b.Cleanup(func() {
		for _, n := range nodes {
			n.Stop()
		}
	})
	for i, err := range errs {
		if err != nil {
			b.Fatalf("node %d: %v", i+1, err)
		}
	}
	return addrs
}

// BenchmarkPut3Nodes measures 256-byte puts on one client against an
// in-process 3-node cluster, from 1 and from 16 goroutines. For the
// profiles in docs/benchmarks.md:
//
//	go test -run '^$' -bench 'Put3Nodes/clients=16' -benchtime 10000x -cpuprofile cpu.out ./internal/bench/
func BenchmarkPut3Nodes(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchOps(b, clients, false) })
	}
}

// BenchmarkGet3Nodes is BenchmarkPut3Nodes for linearizable gets of
// keys written in the warm-up.
func BenchmarkGet3Nodes(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchOps(b, clients, true) })
	}
}

// warmKeys is how many keys the warm-up writes; the timed ops use them.
const warmKeys = 1000

func benchOps(b *testing.B, clients int, gets bool) {
	addrs := startInProcessCluster(b)
	ctx := context.Background()
	t, err := DialConcord(ctx, client.Options{Endpoints: addrs}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	rng := testRNG()
	vals := newValuePool(256, rng)
	// Warm up: elections and leader discovery happen here, not in the timing.
	for i := range warmKeys {
		if err := t.Put(ctx, AppendKey(nil, i, 16), vals.next(rng)); err != nil {
			b.Fatalf("warm-up put: %v", err)
		}
	}
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(7, uint64(g))) // distinct keys per goroutine
			key := make([]byte, 0, 16)
			for left.Add(-1) >= 0 {
				key = AppendKey(key[:0], rng.IntN(warmKeys), 16)
				var err error
				if gets {
					var found bool
					if found, err = t.Get(ctx, key); err == nil && !found {
						err = fmt.Errorf("key %s written in the warm-up not found", key)
					}
				} else {
					err = t.Put(ctx, key, vals.next(rng))
				}
				if err != nil {
					b.Errorf("op: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
