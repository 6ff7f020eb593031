package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/storage"
)

// startSolo starts a one-node cluster of one user shard in this process,
// on 127.0.0.1 with a port the OS picked, and stops it when the test ends.
func startSolo(t *testing.T, mods ...func(*Config)) *Node {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // the node listens on it itself; its address must be known before it starts
	cfg := testConfig()
	cfg.Addr, cfg.Peers, cfg.DataDir = addr, []string{addr}, t.TempDir()
	cfg.Shards, cfg.Replicas = 1, 1
	cfg.TickInterval = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	for _, m := range mods {
		m(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// TestReadPastItsBarrierWhenStorageCloses protects shutdown from Pebble's
// panic on use after Close: a linearizable Get that has passed its barrier
// but not yet read when Stop closes storage (a handler that outlived Stop's
// wait for handlers) fails Unavailable instead of crashing the process.
func TestReadPastItsBarrierWhenStorageCloses(t *testing.T) {
	n := startSolo(t)
	n.drainTimeout = time.Millisecond // this handler is not tracked anyway: it is called directly
	kv := grpcapi.NewKV(n.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put never succeeded: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polls until the shard has elected its leader
	}
	pastBarrier, release := make(chan struct{}), make(chan struct{})
	n.afterReadIndex = func() { close(pastBarrier); <-release }
	got := make(chan error, 1)
	go func() {
		resp, err := kv.Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
		if err == nil {
			t.Errorf("Get after storage closed answered %v", resp)
		}
		got <- err
	}()
	<-pastBarrier
	n.Stop()
	close(release)
	if err := <-got; status.Code(err) != codes.Unavailable {
		t.Fatalf("Get that read after storage closed: %v, want Unavailable", err)
	}
}

// TestPlacementViewAfterStorageCloses protects the Heartbeat and Status
// handlers, which read the placement state: one that outlives Stop gets an
// error saying the node stopped, not Pebble's panic on use after Close.
func TestPlacementViewAfterStorageCloses(t *testing.T) {
	n := startSolo(t)
	if _, err := n.placementView(); err != nil {
		t.Fatalf("placement view of a running node: %v", err)
	}
	n.Stop()
	_, err := n.placementView()
	if !errors.Is(err, storage.ErrClosed) || !errors.Is(err, multiraft.ErrStopped) {
		t.Fatalf("placement view after Stop: %v; want storage.ErrClosed wrapped as multiraft.ErrStopped", err)
	}
}

// TestShutdownTellsPlacementItStops protects the first step of a clean
// stop: before it hands its leaderships off, the node tells the placement
// leader (here itself) that it is stopping, so that leader balancing does
// not move them back (scheduler.Report.Stopping); and the scheduler then
// judges it no target for leaderships.
func TestShutdownTellsPlacementItStops(t *testing.T) {
	n := startSolo(t)
	waitFor(t, 20*time.Second, func() error { // the node's own first report
		n.placement.mu.Lock()
		defer n.placement.mu.Unlock()
		if _, ok := n.placement.reports[n.ID()]; !ok {
			return errors.New("no report of the node yet")
		}
		return nil
	})
	n.placement.mu.Lock()
	before := n.placement.reports[n.ID()].Stopping
	n.placement.mu.Unlock()
	if before {
		t.Fatal("a running node reports that it is stopping")
	}
	start := time.Now()
	n.Shutdown(5 * time.Second)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("shutdown took %v", took)
	}
	n.placement.mu.Lock()
	r := n.placement.reports[n.ID()]
	n.placement.mu.Unlock()
	if !r.Stopping {
		t.Fatalf("the placement leader's last report of the stopping node says it is not stopping: %+v", r)
	}
}
