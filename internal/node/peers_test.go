package node

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// TestMarkSeenRefusesOnFailedWrite protects node-id reuse detection: if the
// durable record of a peer fails, mark reports it (so the transport drops the
// traffic) and the peer is not seen; a later mark writes again.
func TestMarkSeenRefusesOnFailedWrite(t *testing.T) {
	s := seenSet{m: map[ids.NodeID]*seenEntry{}}
	errDisk := errors.New("fsync: input/output error")
	if err := s.mark(3, func(ids.NodeID) error { return errDisk }); !errors.Is(err, errDisk) {
		t.Fatalf("mark with a failing write returned %v, want the write's error", err)
	}
	if s.has(3) {
		t.Fatal("a peer whose record failed to persist is seen")
	}
	writes := 0
	record := func(ids.NodeID) error { writes++; return nil }
	for i := 0; i < 3; i++ {
		if err := s.mark(3, record); err != nil {
			t.Fatal(err)
		}
	}
	if !s.has(3) || writes != 1 {
		t.Fatalf("after a good write: seen %v, %d writes; want seen after exactly 1", s.has(3), writes)
	}
}

// TestMarkSeenWaitsPerPeer protects incoming traffic from one slow fsync:
// while the first record of one peer is being written, another peer's mark
// (and the probe's has) do not wait for it.
func TestMarkSeenWaitsPerPeer(t *testing.T) {
	s := seenSet{m: map[ids.NodeID]*seenEntry{}}
	s.loaded(2)
	release, started := make(chan struct{}), make(chan struct{})
	slowDone := make(chan error, 1)
	go func() {
		slowDone <- s.mark(1, func(ids.NodeID) error { close(started); <-release; return nil })
	}()
	<-started
	fast := make(chan error, 1)
	go func() {
		if !s.has(2) {
			fast <- errors.New("peer 2, loaded as seen, is not seen")
			return
		}
		fast <- s.mark(3, func(ids.NodeID) error { return nil })
	}()
	select {
	case err := <-fast:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("marking peer 3 waited for peer 1's write")
	}
	close(release)
	if err := <-slowDone; err != nil || !s.has(1) || !s.has(3) {
		t.Fatalf("after both writes: err %v, seen 1: %v, seen 3: %v", err, s.has(1), s.has(3))
	}
}

// TestAddressBookReportsGoneNodesOnce protects the fast failover from a
// leader the placement service marked gone: an update that newly shows a
// node REPLACED, DEAD or REMOVED tells the host (LeaderGone) once, and the
// same state heard again in the next heartbeat answer tells it nothing
// (each report makes followers of that node forget it and campaign).
// atAddress finds the node a fresh process at an address takes over.
func TestAddressBookReportsGoneNodesOnce(t *testing.T) {
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	b := addressBook{m: map[ids.NodeID]*concordpb.NodeDescriptor{}}
	var gone []ids.NodeID
	b.setGone(func(id ids.NodeID) { gone = append(gone, id) })
	up := func(id uint64, addr string, st concordpb.NodeState) *concordpb.NodeDescriptor {
		return &concordpb.NodeDescriptor{NodeId: id, Address: addr, State: st}
	}
	first := []*concordpb.NodeDescriptor{up(1, "a:1", concordpb.NodeState_NODE_UP), up(2, "a:2", concordpb.NodeState_NODE_UP), up(3, "a:3", concordpb.NodeState_NODE_SUSPECT)}
	if err := b.update(eng, first); err != nil {
		t.Fatal(err)
	}
	if got := b.atAddress("a:3"); len(got) != 1 || got[0] != 3 {
		t.Fatalf("atAddress(a:3) = %v, want [3]", got)
	}
	next := []*concordpb.NodeDescriptor{up(1, "a:1", concordpb.NodeState_NODE_UP), up(2, "a:2", concordpb.NodeState_NODE_DEAD),
		up(3, "a:3", concordpb.NodeState_NODE_REPLACED), up(4, "a:3", concordpb.NodeState_NODE_UP)}
	for range 2 {
		if err := b.update(eng, next); err != nil {
			t.Fatal(err)
		}
	}
	if len(gone) != 2 || !slices.Contains(gone, 2) || !slices.Contains(gone, 3) {
		t.Fatalf("told of gone nodes %v, want 2 and 3 once each", gone)
	}
	if got := b.atAddress("a:3"); len(got) != 1 || got[0] != 4 {
		t.Fatalf("atAddress(a:3) after the replacement = %v, want [4] (not the REPLACED 3)", got)
	}
}

// TestMembersLeaveOutNodesThatServeNothing: CONCORD.MEMBERS lists the
// addresses a node may be serving at. A REMOVED node is left out, and a
// REPLACED one's address is listed once, under its successor; a DEAD node
// (it may come back) and a LEAVING one (it still serves) stay.
func TestMembersLeaveOutNodesThatServeNothing(t *testing.T) {
	n := &Node{book: addressBook{m: map[ids.NodeID]*concordpb.NodeDescriptor{}}}
	for _, d := range []*concordpb.NodeDescriptor{
		{NodeId: 1, Address: "a:1", State: concordpb.NodeState_NODE_UP},
		{NodeId: 2, Address: "a:2", State: concordpb.NodeState_NODE_SUSPECT},
		{NodeId: 3, Address: "a:3", State: concordpb.NodeState_NODE_DEAD},
		{NodeId: 4, Address: "a:4", State: concordpb.NodeState_NODE_REMOVED},
		{NodeId: 5, Address: "a:5", State: concordpb.NodeState_NODE_LEAVING},
		{NodeId: 6, Address: "a:6", State: concordpb.NodeState_NODE_REPLACED, ReplacedBy: 7},
		{NodeId: 7, Address: "a:6", State: concordpb.NodeState_NODE_UP},
		{NodeId: 8, Address: "a:8", State: concordpb.NodeState_NODE_REPLACED, ReplacedBy: 9},
		{NodeId: 9, Address: "a:8", State: concordpb.NodeState_NODE_REMOVED},
	} {
		n.book.m[ids.NodeID(d.GetNodeId())] = d
	}
	got := redisBackend{n: n}.Members()
	slices.Sort(got)
	if want := []string{"a:1", "a:2", "a:3", "a:5", "a:6"}; !slices.Equal(got, want) {
		t.Fatalf("Members() = %v, want %v", got, want)
	}
}

// TestRemovedNodesGetNoRaftTraffic: the transport's address book
// (resolvePeer) has no address for a REMOVED node, nor for one REPLACED by
// a fresh process at its address, whose traffic would reach that process
// ("message for node 3 reached node 5", six times a second); a DEAD node
// (it may come back) and a LEAVING one (it still serves) keep theirs.
func TestRemovedNodesGetNoRaftTraffic(t *testing.T) {
	b := addressBook{m: map[ids.NodeID]*concordpb.NodeDescriptor{}}
	for _, d := range []*concordpb.NodeDescriptor{
		{NodeId: 1, Address: "a:1", State: concordpb.NodeState_NODE_UP},
		{NodeId: 2, Address: "a:2", State: concordpb.NodeState_NODE_DEAD},
		{NodeId: 3, Address: "a:3", State: concordpb.NodeState_NODE_REMOVED},
		{NodeId: 4, Address: "a:4", State: concordpb.NodeState_NODE_LEAVING},
		{NodeId: 5, Address: "a:3", State: concordpb.NodeState_NODE_UP},
		{NodeId: 6, Address: "a:6", State: concordpb.NodeState_NODE_REPLACED, ReplacedBy: 7},
		{NodeId: 7, Address: "a:6", State: concordpb.NodeState_NODE_UP},
	} {
		b.m[ids.NodeID(d.GetNodeId())] = d
	}
	for id, want := range map[ids.NodeID]string{1: "a:1", 2: "a:2", 3: "", 4: "a:4", 5: "a:3", 6: "", 7: "a:6", 8: ""} {
		got, ok := b.resolvePeer(id)
		if got != want || ok != (want != "") {
			t.Errorf("resolvePeer(%d) = %q, %v; want %q, %v", id, got, ok, want, want != "")
		}
	}
	if got, ok := b.resolve(3); !ok || got != "a:3" {
		t.Errorf("resolve(3) = %q, %v: the book itself still records removed node 3 at a:3", got, ok)
	}
}
