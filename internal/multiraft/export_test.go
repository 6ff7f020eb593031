package multiraft

import (
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// PublishedLease returns the lease h publishes for fast reads of shard
// (fastread.go); ok is false when none is.
func PublishedLease(h *Host, shard ids.ShardID) (term uint64, expiry int64, ok bool) {
	s, found := h.leases.Load(shard)
	if !found {
		return 0, 0, false
	}
	snap := s.(*leaseSlot).cur.Load()
	if snap == nil {
		return 0, 0, false
	}
	return snap.term, snap.expiry, true
}

// SetFastReadHook makes every fast read of h call f between the checks of
// its lease and the borrowing of the view. Set it before any read.
func SetFastReadHook(h *Host, f func(shard ids.ShardID)) { h.fastReadHook = f }

// BorrowView returns the view fast reads of h borrow now (nil: none), with
// a reference for the caller.
func BorrowView(h *Host) *storage.ReadView { return h.borrowView() }

// ViewsTaken is the number of views fast reads of h have taken.
func ViewsTaken(h *Host) uint64 { return h.viewsTaken.Load() }

// InboxBytes is what h counts of the raft messages its inbox holds.
func InboxBytes(h *Host) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inboxBytes
}
