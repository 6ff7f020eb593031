package multiraft

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/concord-kv/concord/internal/storage"
)

// outgoingSnapshots holds the Pebble snapshots behind snapshot handles that
// raft put into MsgSnap messages, until the transport claims them. It also
// counts snapshots in flight, to bound how many stream at once.
type outgoingSnapshots struct {
	mu       sync.Mutex
	m        map[uint64]*outSnap // guarded by mu
	next     uint64              // guarded by mu
	inflight int                 // guarded by mu: reserved and not yet done
}

type outSnap struct {
	snap *storage.Snapshot
	made time.Time
}

// reserve counts one more snapshot in flight, if fewer than limit are.
func (o *outgoingSnapshots) reserve(limit int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight >= limit {
		return false
	}
	o.inflight++
	return true
}

// done counts one snapshot fewer in flight.
func (o *outgoingSnapshots) done() {
	o.mu.Lock()
	o.inflight--
	o.mu.Unlock()
}

// put registers snap and returns its handle.
func (o *outgoingSnapshots) put(snap *storage.Snapshot) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	o.m[o.next] = &outSnap{snap: snap, made: time.Now()}
	return binary.BigEndian.AppendUint64(nil, o.next)
}

// take claims the snapshot of handle; the caller closes it and calls done.
func (o *outgoingSnapshots) take(handle []byte) *storage.Snapshot {
	if len(handle) != 8 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	id := binary.BigEndian.Uint64(handle)
	s, ok := o.m[id]
	if !ok {
		return nil
	}
	delete(o.m, id)
	return s.snap
}

// expire releases snapshots raft built but never sent.
func (o *outgoingSnapshots) expire(age time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, s := range o.m {
		if time.Since(s.made) > age {
			s.snap.Close()
			delete(o.m, id)
			o.inflight--
		}
	}
}

func (o *outgoingSnapshots) releaseAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, s := range o.m {
		s.snap.Close()
		delete(o.m, id)
	}
}
