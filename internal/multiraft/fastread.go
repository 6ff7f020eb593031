package multiraft

import (
	"sync/atomic"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
)

// Lease reads off the loop. A linearizable read that the loop serves by
// lease (replica/lease.go) pays an inbox hand-off, a loop wake-up, a turn
// and a wake-up of its handler; at 100 clients that was a large share of a
// get's cost. ReadIndex therefore first tries to serve the read on the
// caller's goroutine, from what the loop publishes:
//
//   - per replica, an immutable leaseSnap (term, expiry on the host clock)
//     behind an atomic pointer in its leaseSlot, stored only while the
//     replica holds a usable lease (replica.LeaseHeld) and has applied
//     everything committed (caughtUp), and voided (nil) as described below;
//   - for the whole engine, one storage.ReadView (h.view): the loop
//     withdraws it after every batch commit that changed the engine,
//     before any reply of that turn leaves, and the first fast read after
//     that takes a new one. Views are taken and withdrawn under viewMu, so
//     a view taken before a withdrawal is never published after it. Under
//     writes alone no view is taken at all.
//
// The read takes the snapshot, reads the host clock itself, requires
// now < renewAt (which is before expiry), borrows a reference to the
// current view (TryRetain: never a view already released), then checks
// that the slot still holds the very snapshot it validated; if any step
// fails it goes the loop's way.
//
// Why the read is linearizable, with now its clock reading (taken after
// the read began, so inside its interval):
//
//   - It includes every write acknowledged before it began. This leader
//     acknowledges a write only in Advance, after the batch applying it
//     was committed to Pebble and after handleReady withdrew the view
//     taken before that commit (refreshView runs before any Advance of the
//     turn). The read loads the view after it began, so it finds one taken
//     after that withdrawal, or none and takes one itself. Writes committed by earlier leaders are covered
//     because a snapshot is stored only while applied == commit, and a
//     lease exists only once a round of this term was answered, which
//     means this leader committed an entry of its term, after every
//     entry of earlier terms. No later leader can have acknowledged
//     anything before now: none can exist before the lease's expiry, and
//     now < expiry (the same check, on the same clock, as the loop's).
//   - It includes nothing a write invoked after it ended: the view was
//     taken before the read loaded it.
//   - Reads are monotonic: views replace one another in engine order (each
//     is taken after the withdrawal of the one before), and a view the
//     loop hands a read (serveByLease, serveReads) is taken after the
//     latest batch commit, when any view of an older state has already
//     been withdrawn; a later fast read loads or takes one at least as
//     new.
//
// The loop's lease read releases a read at raft's commit index at now,
// waiting for apply if needed; the fast read instead reads a view at an
// applied index that may be below the commit index at now. Entries in
// between were committed by this leader after the lease began and are
// not acknowledged yet (acknowledgement follows the view's replacement),
// so a linearization that puts them after the read is valid; earlier
// terms' entries are below the caughtUp publication, as said above.
//
// What voids the snapshot, always before its effect can reach a read or
// another node:
//
//   - After Apply and before any message of the Ready leaves, handleReady
//     asks the replica again (checkLease): a step-down or term change (the
//     SoftState raft reports), a MsgTimeoutNow or a transfer under way, a
//     membership change (its commit index leaves with those messages), a
//     removal all void it before the next message is sent. A step-down
//     that happened in Step earlier in the turn is harmless meanwhile: no
//     other leader can exist before expiry, whatever this node knows.
//   - Before a snapshot is installed (InstallSnapshot excises the shard's
//     data), and before destroyReplica excises a replica's data.
//   - A read that validated a snapshot and then lost the race to a void
//     sees the slot changed after taking its view and falls back; if the
//     slot is unchanged, the void had not happened when the view was
//     loaded (or taken), so the view predates any excise or snapshot and its state
//     is one this leader's lease covered. Views are open iterators, which
//     keep seeing excised data (storage.ReadView).
//
// Renewal: the loop renews a lease when a read finds less than half of it
// left. A fast read needs the loop for nothing, so from renewAt (half the
// lease before expiry) reads go the loop's way again: the loop serves
// them by lease and issues the renewal round, whose answer publishes a
// longer lease. Under steady load, reads leave the fast path for about one
// heartbeat round trip per half lease.
//
// Cost: the view is shared by every fast read until the engine changes;
// reads borrow its lent iterators (storage.ReadView), so no read opens a
// Pebble iterator of its own. With lease reads off, no slot and no view
// exist, and every read takes the loop's path.

// leaseSnap is one published lease, immutable once stored.
type leaseSnap struct {
	term uint64
	// expiry is when the lease runs out on the host clock (Config.Clock).
	expiry int64
	// renewAt is when the loop would renew it (half a lease before
	// expiry): fast reads stop there so that reads reach the loop again.
	renewAt int64
}

// leaseSlot is one replica's published lease and its fast-read count.
type leaseSlot struct {
	cur  atomic.Pointer[leaseSnap]
	fast atomic.Uint64 // reads served off the loop
	// reported is the part of fast already told to the Observer (loop-owned).
	reported uint64
}

// fastRead serves a linearizable read of shard off the loop if the local
// replica holds a published lease, returning a view with one reference for
// the caller, or nil: the read must go the loop's way.
func (h *Host) fastRead(shard ids.ShardID) *storage.ReadView {
	s, ok := h.leases.Load(shard)
	if !ok {
		return nil
	}
	slot := s.(*leaseSlot)
	snap := slot.cur.Load()
	if snap == nil {
		return nil
	}
	if now := h.cfg.Clock(); now >= snap.expiry || now >= snap.renewAt {
		if !mutant.Enabled || !mutant.On(mutant.LeaseIgnoresExpiry) {
			return nil
		}
	}
	if h.fastReadHook != nil {
		h.fastReadHook(shard)
	}
	v := h.borrowView()
	if v == nil {
		return nil
	}
	if slot.cur.Load() != snap { // voided (or replaced) meanwhile: see above
		v.Release()
		return nil
	}
	slot.fast.Add(1)
	return v
}

// borrowView returns the current shared view with a reference for the
// caller, taking one if none is published (the engine changed since the
// last was taken), or nil if none can be taken.
func (h *Host) borrowView() *storage.ReadView {
	if v := h.view.Load(); v != nil && v.TryRetain() {
		return v
	}
	// None, or released after the loop withdrew it: take one, under viewMu
	// so that the loop's withdrawal after its next commit cannot be
	// overtaken by a view taken before that commit.
	h.viewMu.Lock()
	defer h.viewMu.Unlock()
	if h.viewClosed {
		return nil
	}
	if v := h.view.Load(); v != nil && v.TryRetain() {
		return v // another read took one meanwhile
	}
	v, err := h.eng.NewReadView(2) // one reference published, one the caller's
	if err != nil {
		h.log.Debug("lease-read view not taken; the read goes through the loop", "err", err)
		return nil
	}
	h.viewsTaken.Add(1)
	h.view.Store(v)
	return v
}

// newLeaseSlot makes the slot of a replica being loaded, when leases are on.
func (h *Host) newLeaseSlot(shard ids.ShardID) {
	if h.cfg.LeaseDuration() <= 0 {
		return
	}
	slot := &leaseSlot{}
	h.slots[shard] = slot
	h.leases.Store(shard, slot)
}

// voidLease withdraws shard's published lease, if any.
func (h *Host) voidLease(shard ids.ShardID) {
	if slot := h.slots[shard]; slot != nil {
		slot.cur.Store(nil)
	}
}

// dropLeaseSlot voids and forgets shard's slot (its replica is being
// destroyed), reporting its last fast reads.
func (h *Host) dropLeaseSlot(shard ids.ShardID) {
	slot := h.slots[shard]
	if slot == nil {
		return
	}
	slot.cur.Store(nil)
	h.leases.Delete(shard)
	delete(h.slots, shard)
	h.reportFastReads(slot)
}

// checkLease voids r's published lease if r no longer holds it in the
// term it was published for: called after Apply and before r's messages
// leave (see above).
func (h *Host) checkLease(r *replica.Replica) {
	slot := h.slots[r.Shard()]
	if slot == nil {
		return
	}
	cur := slot.cur.Load()
	if cur == nil {
		return
	}
	if term, _, ok, _ := r.LeaseHeld(); !ok || term != cur.term {
		slot.cur.Store(nil)
	}
}

// publishLease stores r's lease for fast reads, or voids it if r holds
// none. A new snapshot needs everything committed to be applied; until
// then the published one (if any) stays.
func (h *Host) publishLease(r *replica.Replica) {
	slot := h.slots[r.Shard()]
	if slot == nil {
		return
	}
	term, expiry, ok, caughtUp := r.LeaseHeld()
	cur := slot.cur.Load()
	switch {
	case !ok:
		if cur != nil {
			slot.cur.Store(nil)
		}
		return
	case cur != nil && cur.term == term && cur.expiry == expiry:
		return // unchanged: in-flight reads that validated it stay valid
	case !caughtUp:
		return
	}
	slot.cur.Store(&leaseSnap{term: term, expiry: expiry, renewAt: expiry - int64(h.cfg.LeaseDuration())/2})
}

// dropView withdraws the published view (the next fast read takes a new
// one) and releases the loop's reference to it.
func (h *Host) dropView() {
	h.viewMu.Lock()
	old := h.view.Swap(nil)
	h.viewMu.Unlock()
	if old != nil {
		old.Release()
	}
}

// engineChanged records that the engine no longer matches h.view.
func (h *Host) engineChanged() { h.viewStale = true }

// refreshView runs after a batch commit, before any reply of the turn
// leaves: if the engine changed, the published view is withdrawn, so that
// every fast read from now on takes or finds one taken after the commit.
// A turn takes no view itself: under writes alone no view is ever taken
// (taking one per turn was 6 % of a follower's CPU under pipelined SET).
func (h *Host) refreshView() {
	if !h.viewStale {
		return
	}
	h.viewStale = false
	h.dropView()
}

// releaseView withdraws every published lease and the view, when the loop
// ends (before the engine may close).
func (h *Host) releaseView() {
	for _, slot := range h.slots {
		slot.cur.Store(nil)
	}
	h.viewMu.Lock()
	h.viewClosed = true // no read takes one after the loop: the engine may close
	h.viewMu.Unlock()
	h.dropView()
}

// reportFastReads tells the Observer the fast reads of slot not yet told.
func (h *Host) reportFastReads(slot *leaseSlot) {
	n := slot.fast.Load()
	if d := n - slot.reported; d > 0 {
		slot.reported = n
		if h.cfg.Observer != nil {
			h.cfg.Observer.Reads(0, d, 0)
		}
	}
}

// reportAllFastReads runs on every tick.
func (h *Host) reportAllFastReads() {
	for _, slot := range h.slots {
		h.reportFastReads(slot)
	}
}

// fastReads is the number of reads of shard's replica served off the loop.
func (h *Host) fastReads(shard ids.ShardID) uint64 {
	if s, ok := h.leases.Load(shard); ok {
		return s.(*leaseSlot).fast.Load()
	}
	return 0
}
