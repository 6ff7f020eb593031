package node

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestPartitionBlocksPeersOutsideReachable protects the partition state the
// transport and the front door both consult: a peer is cut off unless its
// address is reachable, an unknown peer is cut off, this node never is, and
// Heal restores everything.
func TestPartitionBlocksPeersOutsideReachable(t *testing.T) {
	n, err := New(Config{Addr: "127.0.0.1:7001", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n.ident.Store(&storepb.NodeIdent{NodeId: 1})
	for id, addr := range map[ids.NodeID]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"} {
		n.book.m[id] = &concordpb.NodeDescriptor{NodeId: uint64(id), Address: addr}
	}
	if n.blocked(2) || n.blocked(4) {
		t.Fatal("blocked without a partition")
	}
	if got := n.partitionFrom([]string{"127.0.0.1:7002"}); !slices.Equal(got, []ids.NodeID{3}) {
		t.Fatalf("partition blocked %v, want [3]", got)
	}
	for node, want := range map[ids.NodeID]bool{1: false, 2: false, 3: true, 4: true} {
		if n.blocked(node) != want {
			t.Fatalf("blocked(%d) = %v, want %v", node, !want, want)
		}
	}
	n.heal()
	if n.blocked(3) || n.blocked(4) {
		t.Fatal("blocked after heal")
	}
}
