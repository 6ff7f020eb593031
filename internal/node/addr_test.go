package node

import (
	"context"
	"errors"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/storage"
)

// TestRestartAtAnotherAddrRefused: a node restarted on its data dir with
// an --addr other than the one the cluster records it at is refused,
// naming both and what to do, before it listens (the new address is busy
// here) or records anything
// (before: it served at the new address while the cluster kept it, up,
// at the old one, where nothing listened, and it received no writes).
// localhost is not 127.0.0.1: the strings are what peers dial. Restarted
// at its recorded address, it serves.
func TestRestartAtAnotherAddrRefused(t *testing.T) {
	n := startSolo(t)
	cfg := n.cfg
	n.Stop()
	before := dumpRecords(t, cfg.DataDir)
	_, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// The new address is held by another listener: a start that listened
	// before the check would fail with "address already in use" instead.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, addr := range []string{busy.Addr().String(), net.JoinHostPort("localhost", port)} {
		moved := cfg
		moved.Addr = addr
		m, err := New(moved)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = m.Start(ctx)
		cancel()
		if err == nil {
			m.Stop()
			t.Fatalf("a node recorded at %s started with --addr %s", cfg.Addr, addr)
		}
		for _, want := range []string{
			"holds node 1, which the cluster records at " + cfg.Addr + ", but it was started with --addr " + addr,
			"start it again with --addr " + cfg.Addr,
			"--join", "concord node remove 1",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("--addr %s: error %q does not contain %q", addr, err, want)
			}
		}
		if errors.Is(err, ErrRemoved) {
			t.Errorf("--addr %s: refused as removed (exit status 3): %v", addr, err)
		}
		if after := dumpRecords(t, cfg.DataDir); !maps.Equal(before, after) {
			t.Errorf("--addr %s: the refused start changed the data dir's records (%d before, %d after)", addr, len(before), len(after))
		}
	}
	n = startSolo(t, func(c *Config) { c.Addr, c.Peers, c.DataDir = cfg.Addr, cfg.Peers, cfg.DataDir })
	if n.ID() != 1 {
		t.Fatalf("restarted at its recorded address as node %d, want 1", n.ID())
	}
}

// dumpRecords returns every key and value of the database in dir.
func dumpRecords(t *testing.T, dir string) map[string]string {
	t.Helper()
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	out := map[string]string{}
	err = eng.Read(func(r storage.Reader) error {
		it, err := r.NewIter(nil)
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			out[string(it.Key())] = string(it.Value())
		}
		return it.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
