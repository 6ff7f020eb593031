package client

import (
	"crypto/rand"
	"encoding/binary"
)

// callKind says what a call is, and so which session it takes.
type callKind int

const (
	// read takes no session.
	read callKind = iota
	// mutate takes a session of its own from the pool for the call (one
	// request at a time per session): for mutations whose results carry
	// values (CAS, batches, a put with ReturnPrev), which a shard keeps
	// for a retry.
	mutate
	// blindWrite takes a sequence number of the client's windowed session:
	// for mutations whose results are a few bytes (a put without
	// ReturnPrev, a delete). However many of them are in flight, a shard
	// then writes one session record per batch, not one per request (the
	// Raft dissertation's §6.3; internal/kv/window.go).
	blindWrite
)

// maxWindow bounds the sequence numbers a windowed session hands out above
// its floor: a call that stays in flight that long (a stalled node, a long
// deadline) must not make every shard keep the results of all the calls
// after it, so the client starts a new session and the old one drains. A
// shard refuses a window past kv.MaxSessionWindow (1,024); this stays
// below it.
const maxWindow = 512

// winSession is a windowed session: seqs handed out in order, answered in
// any order. Its fields are guarded by the client's winMu.
type winSession struct {
	id uint64
	// floor is the lowest seq not yet done (next when none is in flight);
	// done[s%maxWindow] marks the seqs in [floor, next) that are done.
	floor, next uint64
	done        [maxWindow]bool
}

func newWinSession() *winSession {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &winSession{id: binary.BigEndian.Uint64(b[:]) | 1, floor: 1, next: 1}
}

// takeWindowed hands out the next seq of the client's windowed session, a
// new one when the current one's window is full, with the session's floor:
// every seq below it is done, so no call will send it again. The floor is
// never above seq, which is in flight until doneWindowed.
func (c *Client) takeWindowed() (w *winSession, seq, floor uint64) {
	c.winMu.Lock()
	defer c.winMu.Unlock()
	w = c.win
	if w == nil || w.next-w.floor >= maxWindow {
		w = newWinSession()
		c.win = w
	}
	seq = w.next
	w.next++
	return w, seq, w.floor
}

// doneWindowed notes that the call holding seq of w is over: answered or
// given up, it sends seq no more.
func (c *Client) doneWindowed(w *winSession, seq uint64) {
	c.winMu.Lock()
	defer c.winMu.Unlock()
	w.done[seq%maxWindow] = true
	for w.floor < w.next && w.done[w.floor%maxWindow] {
		w.done[w.floor%maxWindow] = false
		w.floor++
	}
}

// windowFloor is w's floor now: every seq below it is done. A call whose
// seq is in flight may send it on a retry (it is never above that seq).
func (c *Client) windowFloor(w *winSession) uint64 {
	c.winMu.Lock()
	defer c.winMu.Unlock()
	return w.floor
}
