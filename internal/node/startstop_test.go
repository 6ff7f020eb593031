package node

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestStopWhileStarting: a Stop that comes while Start runs (here: once
// the node has bootstrapped, before raft starts) must leave nothing
// running and Start must fail. Before, Stop closed storage under Start,
// which went on to start the raft host and the node's loops on the closed
// engine after Stop had returned, and returned nil.
func TestStopWhileStarting(t *testing.T) {
	addr := freeAddrs(t, 1)[0]
	cfg := testConfig()
	cfg.Addr, cfg.Peers, cfg.DataDir = addr, []string{addr}, t.TempDir()
	cfg.Shards, cfg.Replicas = 1, 1
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	n.testHooks.identified = func() {
		go func() { n.Stop(); close(stopped) }()
		<-n.stopC // Stop has begun
		select {
		case <-stopped: // Stop returned under Start: nothing may start now
		case <-time.After(time.Second): // Stop waits for Start
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	startErr := n.Start(ctx)
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return once Start had")
	}
	if startErr == nil {
		t.Fatal("Start returned nil although the node was stopped while it started")
	}
	if n.readyNow.Load() {
		t.Fatal("raft started on a node stopped while it started")
	}
}
