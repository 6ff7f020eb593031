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

// BenchmarkPut3Nodes measures 256-byte puts from 16 goroutines on one
// client against an in-process 3-node cluster. For the profile in
// docs/benchmarks.md:
//
//	go test -run '^$' -bench Put3Nodes -benchtime 20000x -cpuprofile cpu.out ./internal/bench/
func BenchmarkPut3Nodes(b *testing.B) {
	addrs := startInProcessCluster(b)
	ctx := context.Background()
	t, err := DialConcord(ctx, addrs, false)
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	rng := testRNG()
	vals := newValuePool(256, rng)
	// Warm up: elections and leader discovery happen here, not in the timing.
	for i := range 100 {
		if err := t.Put(ctx, AppendKey(nil, i, 16), vals.next(rng)); err != nil {
			b.Fatalf("warm-up put: %v", err)
		}
	}
	b.SetParallelism(8) // 8 x GOMAXPROCS goroutines: 16 on a 2-core box
	b.ResetTimer()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(7, seq.Add(1))) // distinct keys per goroutine
		key := make([]byte, 0, 16)
		for pb.Next() {
			key = AppendKey(key[:0], rng.IntN(10000), 16)
			if err := t.Put(ctx, key, vals.next(rng)); err != nil {
				b.Error(fmt.Errorf("put: %w", err))
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}
