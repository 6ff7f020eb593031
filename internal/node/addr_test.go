package node

import (
	"context"
	"errors"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
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

// TestCheckAddrAtStartCases: only a node with an identity whose own
// descriptor records another address is refused; a new or restored data
// dir (no identity) takes any address, and a removed node is left to its
// own refusal (exit status 3: no address can bring it back).
func TestCheckAddrAtStartCases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ident   bool
		self    *concordpb.NodeDescriptor
		refused bool
	}{
		{"no identity", false, nil, false},
		{"no descriptor of its own", true, nil, false},
		{"same address", true, &concordpb.NodeDescriptor{NodeId: 2, Address: "10.0.0.2:7001"}, false},
		{"removed", true, &concordpb.NodeDescriptor{NodeId: 2, Address: "10.0.0.9:7001", State: concordpb.NodeState_NODE_REMOVED}, false},
		{"another address", true, &concordpb.NodeDescriptor{NodeId: 2, Address: "10.0.0.9:7001"}, true},
		{"a host name for it", true, &concordpb.NodeDescriptor{NodeId: 2, Address: "node2.example:7001"}, true},
	} {
		n := &Node{cfg: Config{Addr: "10.0.0.2:7001", DataDir: "/d"}}
		n.book.m = map[ids.NodeID]*concordpb.NodeDescriptor{
			1: {NodeId: 1, Address: "10.0.0.1:7001"},
		}
		if tc.ident {
			n.ident.Store(&storepb.NodeIdent{ClusterId: 7, NodeId: 2})
		}
		if tc.self != nil {
			n.book.m[2] = tc.self
		}
		err := n.checkAddrAtStart()
		if (err != nil) != tc.refused {
			t.Errorf("%s: err = %v, refused: want %v", tc.name, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "records at "+tc.self.GetAddress()+", but it was started with --addr 10.0.0.2:7001") {
			t.Errorf("%s: error %q does not name both addresses", tc.name, err)
		}
	}
}
