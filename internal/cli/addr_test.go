package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/node"
)

// TestServerAtAnotherAddrExits2: `concord server` on a node's data dir
// with an --addr other than the one the cluster records it at exits with
// status 2 and an error naming the recorded address, and leaves the data
// dir (before: it served at the new address, which no peer knew).
func TestServerAtAnotherAddrExits2(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	old := freeAddr(t)
	cfg := node.DefaultConfig()
	cfg.Addr, cfg.Peers, cfg.DataDir = old, []string{old}, dir
	cfg.Shards, cfg.Replicas, cfg.ReserveDiskBytes = 1, 1, 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n.Stop()

	moved := freeAddr(t)
	args := []string{"server", "--addr", moved, "--data-dir", dir, "--reserve-disk-bytes=0", "--log-level", "error"}
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, &out, &out) }()
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT) // runServer's signal to stop
		<-done
		t.Fatalf("concord %s served", strings.Join(args, " "))
	}
	want := "which the cluster records at " + old + ", but it was started with --addr " + moved
	if code != 2 || !strings.Contains(out.String(), want) {
		t.Fatalf("concord %s: exit %d, output %q; want exit 2 and %q", strings.Join(args, " "), code, out.String(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "db")); err != nil {
		t.Fatalf("the refused start removed the node's data: %v", err)
	}
}
