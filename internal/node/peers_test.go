package node

import (
	"errors"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/ids"
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
