package replica

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestPendingWorkTimesOut protects callers from waiting forever: a proposal
// and a read that raft cannot finish end as ErrAmbiguous after
// PendingTimeoutTicks, before the election timeout would end them.
func TestPendingWorkTimesOut(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	for _, m := range g.members {
		m.r.cfg.PendingTimeoutTicks = 3
	}
	g.cut[2], g.cut[3] = true, true
	p := g.propose(leader, put("k", "v"))
	rd := &Read{Ctx: []byte("r"), Done: make(chan error, 1)}
	leader.r.ReadIndex(rd)
	for range 4 {
		if len(p.Done) > 0 {
			t.Fatalf("proposal ended before its timeout: %+v", <-p.Done)
		}
		leader.r.Tick()
	}
	if o := <-p.Done; !errors.Is(o.Err, ErrAmbiguous) || !leader.r.IsLeader() {
		t.Fatalf("timed-out proposal: %+v (leader %v), want ErrAmbiguous while still leader", o, leader.r.IsLeader())
	}
	if err := <-rd.Done; !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("timed-out read: %v, want ErrAmbiguous", err)
	}
}

// TestDestroyFailsEverything protects a removed replica's callers and disk:
// a queued proposal and a read end with ErrRemoved, a proposal raft already
// holds ends as ErrAmbiguous, and staged snapshot files are deleted.
func TestDestroyFailsEverything(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	inflight := g.propose(leader, put("a", "1"))
	queued := g.proposal(put("b", "2"))
	leader.r.Propose(queued)
	rd := &Read{Ctx: []byte("r"), Done: make(chan error, 1)}
	leader.r.ReadIndex(rd)
	staged := filepath.Join(leader.eng.AuxDir(), "staged.sst")
	if err := os.WriteFile(staged, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	leader.r.StageSnapshot(99, staged)
	leader.r.Destroy()
	if o := <-inflight.Done; !errors.Is(o.Err, ErrAmbiguous) {
		t.Fatalf("in-flight proposal after Destroy: %+v, want ErrAmbiguous (raft had it)", o)
	}
	if o := <-queued.Done; !errors.Is(o.Err, ErrRemoved) {
		t.Fatalf("queued proposal after Destroy: %+v, want ErrRemoved (never reached raft)", o)
	}
	if err := <-rd.Done; !errors.Is(err, ErrRemoved) {
		t.Fatalf("read after Destroy: %v, want ErrRemoved", err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Fatalf("staged snapshot file survived Destroy: %v", err)
	}
}

// TestStageSnapshotReplacesFile protects the aux dir from leaks: staging a
// new file for the same index removes the previous one.
func TestStageSnapshotReplacesFile(t *testing.T) {
	g := newGroup(t)
	r, dir := g.node(1).r, g.node(1).eng.AuxDir()
	a, b := filepath.Join(dir, "a.sst"), filepath.Join(dir, "b.sst")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.StageSnapshot(7, a)
	r.StageSnapshot(7, b)
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("replaced staged file still exists: %v", err)
	}
	r.DropStagedSnapshots()
	if _, err := os.Stat(b); !os.IsNotExist(err) {
		t.Fatalf("dropped staged file still exists: %v", err)
	}
}
