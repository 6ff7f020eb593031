package client

import "testing"

// TestWindowedSessionFloor protects the floor a windowed call sends: every
// seq below it is done, none at or above it that is in flight is, and it
// moves only when the lowest in-flight call ends.
func TestWindowedSessionFloor(t *testing.T) {
	c := &Client{}
	w, s1, f1 := c.takeWindowed()
	_, s2, f2 := c.takeWindowed()
	_, s3, f3 := c.takeWindowed()
	if s1 != 1 || s2 != 2 || s3 != 3 || f1 != 1 || f2 != 1 || f3 != 1 {
		t.Fatalf("seqs %d %d %d floors %d %d %d; want 1 2 3, all floors 1", s1, s2, s3, f1, f2, f3)
	}
	c.doneWindowed(w, s2) // out of order: the floor stays below seq 1, in flight
	if _, _, f := c.takeWindowed(); f != 1 {
		t.Fatalf("floor %d with seq 1 in flight; want 1", f)
	}
	c.doneWindowed(w, s1) // 1 and 2 done: the floor passes both
	if _, s, f := c.takeWindowed(); f != 3 || s != 5 {
		t.Fatalf("seq %d floor %d after 1 and 2 are done; want seq 5, floor 3", s, f)
	}
}

// TestWindowedSessionRotates protects the bound: a call that stays in
// flight holds its session's floor, so after maxWindow seqs the client
// starts a new session instead of growing every shard's window.
func TestWindowedSessionRotates(t *testing.T) {
	c := &Client{}
	stuck, _, _ := c.takeWindowed()
	for i := 1; i < maxWindow; i++ {
		w, s, _ := c.takeWindowed()
		if w != stuck {
			t.Fatalf("new session after %d seqs; want one after %d", i, maxWindow)
		}
		c.doneWindowed(w, s)
	}
	w, s, f := c.takeWindowed()
	if w == stuck || w.id == stuck.id || s != 1 || f != 1 {
		t.Fatalf("after %d seqs above a stuck floor: same session %v, seq %d, floor %d; want a new session at 1", maxWindow, w == stuck, s, f)
	}
	c.doneWindowed(stuck, 1) // the stuck call ends: its session drains
	if stuck.floor != uint64(maxWindow)+1 {
		t.Fatalf("old session's floor %d after its last call; want %d", stuck.floor, maxWindow+1)
	}
}
