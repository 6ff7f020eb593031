package kv

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// MaxCachedSessions bounds the session cache of one shard's state machine.
// Sessions idle for the session TTL are expired (ExpireSessions) and leave
// the cache with their records, so the live sessions usually fit; past the
// bound an arbitrary entry is dropped, and its session's next command reads
// its record from Pebble again. An entry is two integers in a map (about 40
// bytes), so the bound is about 2.5 MiB per shard.
const MaxCachedSessions = 1 << 16

// The state machine keeps in memory what it would otherwise read from
// Pebble on every command: the last sequence number applied per session
// (the at-most-once check) and the shard's clock. Both are caches of the
// records in the shard's state span, never a second truth: the records are
// written into the same batch as the data of the commands that change them
// (once per batch, by Flush: deferred.go; the clock goes into the
// applied-state record the replica writes), so durability and snapshots are
// unchanged, and a cache entry is set only together with such a write (or
// from a read of the record). Everything that changes those records behind
// the state machine's back must drop the caches: installing a raft snapshot
// does (SnapshotInstalled). A batch that fails to commit is fatal to the
// process, so the caches never run ahead of the state a live replica
// continues from.

// sessionSeq is the last sequence number applied for session: from the
// current batch's deferred record, the cache, or else its record in b
// (found false: none). The deferred record comes first, as the cache may
// have evicted it and b does not hold it yet.
func (sm *StateMachine) sessionSeq(b pebble.Reader, session uint64) (seq uint64, found bool, err error) {
	if s, ok := sm.deferred.sessions[session]; ok {
		return s.seq, true, nil
	}
	if seq, ok := sm.sessions[session]; ok {
		return seq, true, nil
	}
	if _, ok := sm.windows[session]; ok {
		return 0, false, errSessionMode
	}
	rec, found, err := sm.readSession(b, session)
	if err != nil || !found {
		return 0, false, err
	}
	if rec.GetFloor() != 0 {
		return 0, false, errSessionMode
	}
	sm.cacheSession(session, rec.GetSeq())
	return rec.GetSeq(), true, nil
}

// cacheSession records that session's last applied seq is seq.
func (sm *StateMachine) cacheSession(session, seq uint64) {
	if sm.sessions == nil {
		sm.sessions = make(map[uint64]uint64)
	}
	if _, ok := sm.sessions[session]; !ok && len(sm.sessions) >= MaxCachedSessions {
		for s := range sm.sessions { // an arbitrary one: the cache decides no result
			delete(sm.sessions, s)
			break
		}
	}
	sm.sessions[session] = seq
}

// shardClock is the cached shard clock: the highest stamp applied and the
// clock. loaded: it was read (or written) since the state machine started
// or last dropped its caches; found: the shard has a clock (a stamped
// command was applied); legacy: it was read from the record under
// keys.Clock, where the clock lived before it moved into the applied-state
// record (Flush deletes that record once it has written the clock there).
type shardClock struct {
	loaded, found, legacy bool
	high, now             int64
	versionHigh           uint64 // the highest version a write carries (version.go)
	versionsFrom          uint64 // the first version given (version.go); 0: none yet
}

// loadClock returns the shard's clock, reading it from b only the first
// time: from the applied-state record (keys.Applied, written by the replica
// with what Flush put in it), or, in state written before the clock moved
// there (an older data dir, or a snapshot an older node sent), from the
// legacy clock record.
func (sm *StateMachine) loadClock(b pebble.Reader) (shardClock, error) {
	if sm.clock.loaded {
		return sm.clock, nil
	}
	var as storepb.AppliedState
	if _, err := storage.GetProto(b, keys.Applied(sm.shard), &as); err != nil {
		return shardClock{}, fmt.Errorf("kv: shard %d applied state: %w", sm.shard, err)
	}
	c := shardClock{loaded: true}
	if rec := as.GetClock(); rec != nil {
		c.found, c.high, c.now = true, rec.GetHigh(), rec.GetNow()
		c.versionHigh, c.versionsFrom = rec.GetVersionHigh(), rec.GetVersionsFrom()
		sm.clock = c
		return c, nil
	}
	v, found, err := get(b, keys.Clock(sm.shard))
	if err != nil {
		return shardClock{}, err
	}
	if found {
		if len(v) != 16 {
			return shardClock{}, fmt.Errorf("kv: shard %d clock record of %d bytes", sm.shard, len(v))
		}
		c.found, c.legacy = true, true
		c.high, c.now = int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
	}
	sm.clock = c
	return c, nil
}

// SnapshotInstalled drops what the state machine keeps in memory about its
// shard's state: a raft snapshot replaced that state wholesale (session
// records and clock included), so every cached value may be stale. The
// replica calls it once the snapshot is installed, before applying any
// entry after it. Nothing is deferred then (the last batch was flushed);
// were anything, it would describe the replaced state too.
func (sm *StateMachine) SnapshotInstalled() {
	sm.sessions = nil
	sm.windows, sm.windowBytes = nil, 0
	sm.clock = shardClock{}
	sm.deferred = deferred{}
}
