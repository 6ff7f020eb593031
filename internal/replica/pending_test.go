package replica

import (
	"errors"
	"os"
	"testing"
)

// TestPendingWorkTimesOut protects callers from waiting forever: a proposal
// and a read (in a round raft holds, and one still queued) that raft cannot
// finish end after PendingTimeoutTicks, while the replica still leads: the
// proposal as ErrAmbiguous (it may yet apply), the reads as ErrReadTimeout
// and never ErrAmbiguous (a read changes nothing, so its failure is
// definite).
func TestPendingWorkTimesOut(t *testing.T) {
	s := newSolo(t)
	s.r.cfg.PendingTimeoutTicks = 3
	p := s.propose("k", "v") // no Ready cycle runs, so it never commits
	rd := s.read()
	s.r.FlushReads(s.now) // a round raft answers, but no Ready cycle runs
	queued := s.read()
	for range 4 {
		if len(p.Done) > 0 {
			t.Fatalf("proposal ended before its timeout: %+v", <-p.Done)
		}
		s.r.Tick()
	}
	if o := <-p.Done; !errors.Is(o.Err, ErrAmbiguous) || !s.r.IsLeader() {
		t.Fatalf("timed-out proposal: %+v (leader %v), want ErrAmbiguous while still leader", o, s.r.IsLeader())
	}
	if err := <-rd.Done; !errors.Is(err, ErrReadTimeout) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("timed-out read: %v, want ErrReadTimeout, not ErrAmbiguous", err)
	}
	if err := <-queued.Done; !errors.Is(err, ErrReadTimeout) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("timed-out queued read: %v, want ErrReadTimeout, not ErrAmbiguous", err)
	}
}

// TestDestroyFailsEverything protects a removed replica's callers and disk:
// a queued proposal and reads (in a round, and queued for the next) end with
// ErrRemoved, a proposal raft already holds ends as ErrAmbiguous, and staged
// snapshot files are deleted.
func TestDestroyFailsEverything(t *testing.T) {
	s := newSolo(t)
	inflight := s.propose("a", "1")
	queued := s.proposal("b", "2")
	s.r.Propose(queued)
	rd := s.read()
	s.r.FlushReads(s.now)
	queuedRead := s.read()
	s.r.StageSnapshot(99, s.stage())
	s.r.Destroy()
	if o := <-inflight.Done; !errors.Is(o.Err, ErrAmbiguous) {
		t.Fatalf("in-flight proposal after Destroy: %+v, want ErrAmbiguous (raft had it)", o)
	}
	if o := <-queued.Done; !errors.Is(o.Err, ErrRemoved) {
		t.Fatalf("queued proposal after Destroy: %+v, want ErrRemoved (never reached raft)", o)
	}
	for _, r := range []*Read{rd, queuedRead} {
		if err := <-r.Done; !errors.Is(err, ErrRemoved) {
			t.Fatalf("read after Destroy: %v, want ErrRemoved", err)
		}
	}
	if n := auxFiles(t, s); n != 0 {
		t.Fatalf("%d staged snapshot files survived Destroy", n)
	}
}

// TestStageSnapshotReplacesFile protects the aux dir from leaks: staging
// new data for the same index discards the previous one.
func TestStageSnapshotReplacesFile(t *testing.T) {
	s := newSolo(t)
	s.r.StageSnapshot(7, s.stage())
	s.r.StageSnapshot(7, s.stage())
	if n := auxFiles(t, s); n != 1 {
		t.Fatalf("%d staged files after staging twice for one index, want 1", n)
	}
	s.r.DropStagedSnapshots()
	if n := auxFiles(t, s); n != 0 {
		t.Fatalf("%d staged files after DropStagedSnapshots", n)
	}
}

func auxFiles(t *testing.T, s *solo) int {
	t.Helper()
	ents, err := os.ReadDir(s.eng.AuxDir())
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
