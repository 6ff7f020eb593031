package kv

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// The session records and the shard clock change with every command, but
// only their last value in a batch survives its commit: the raft loop
// commits one Pebble batch per turn, atomically, and nothing reads the
// committed state between two of its commands. So Apply keeps them here and
// Flush writes each touched session's record once per batch, and hands the
// clock to the replica, which writes it in the applied-state record it
// writes once per batch anyway (one skiplist node per batch for the clock
// and the applied index together). The committed state after every batch
// is what per-command writes gave, and a crash can only lose whole
// batches, so every state a restart can find is one the per-command writes
// could have left.
//
// Inside a batch these values are the truth, ahead of the batch's own
// contents: every read of a session or the clock looks here first
// (sessionSeq, retryResult, loadClock via sm.clock), and the one reader of
// the records themselves, expireSessions, flushes the sessions first.
//
// The same holds for a user key that ops which read it (INCR, APPEND, a
// conditional PUT, DELETE, EXPIRE, ...) write: its record waits here and
// Flush writes it once per batch. A pipeline of INCRs of one counter is a
// few hundred such ops in one entry, and each wrote a new version into the
// batch (a memtable insert at commit, on every replica) and read the last
// one back through the batch's and the engine's iterators; together over
// 40 % of a follower's CPU (docs/benchmarks.md, "Read-modify-writes of one
// key"). Every read of a user key during apply (store.load) looks here
// first. A blind PUT, which reads nothing, still writes straight into the
// batch and drops the key's deferred record, which it overwrites; a later
// op of the batch then reads the blind PUT's record from the batch.

// deferred is what Apply changed in the state span of batch b and Flush has
// not yet written.
type deferred struct {
	b        *pebble.Batch // nil: nothing deferred
	sessions map[uint64]session
	order    []uint64    // session ids in first-touched order: the writes are deterministic
	windows  []windowRef // the windowed sessions changed, in first-touched order
	rec      storepb.SessionRecord
	clock    storepb.ShardClock // what Flush hands the replica (no allocation a batch)
	// buf and key are reused for every record written (Set copies);
	// sessionPrefix starts every session key of the shard.
	buf, key, sessionPrefix []byte
	// values are the user keys' records written by ops that read them:
	// valueList in first-touched order (a key a blind PUT overwrote is
	// marked dropped, and listed again if written after), values the index
	// of each key's live entry by storage key.
	values    map[string]int
	valueList []deferredValue
}

// session is a session's record as its last command in the batch left it.
type session struct {
	seq    uint64
	result *storepb.CommandResult
	active int64 // LastActiveUnixNanos
}

// deferredValue is a user key's record as the last op of the batch that
// read it left it: stored false for deleted. Its value is its own, never
// changed once set (a result may alias it).
type deferredValue struct {
	k       string // the storage key
	rec     record
	stored  bool
	dropped bool // a blind PUT overwrote it in the batch
}

// begin checks that b is the batch the deferred writes belong to, or
// starts a new set of them for b. Applying into a second batch before the
// first was flushed would lose the first one's records: a caller bug,
// refused.
func (sm *StateMachine) begin(b *pebble.Batch) error {
	switch sm.deferred.b {
	case b:
	case nil:
		sm.deferred.b = b
	default:
		return fmt.Errorf("kv: shard %d: Apply into a new batch before Flush of the previous one", sm.shard)
	}
	return nil
}

// deferSession records s as id's record in the current batch.
func (sm *StateMachine) deferSession(id uint64, s session) {
	d := &sm.deferred
	if d.sessions == nil {
		d.sessions = make(map[uint64]session)
	}
	if _, ok := d.sessions[id]; !ok {
		d.order = append(d.order, id)
	}
	d.sessions[id] = s
}

// deferValue records k's record in the current batch (rec's value is
// copied: it may alias the command, or a buffer the next op reuses).
func (d *deferred) deferValue(k []byte, rec record, stored bool) {
	rec.value = append([]byte(nil), rec.value...)
	if i, ok := d.values[string(k)]; ok {
		d.valueList[i].rec, d.valueList[i].stored = rec, stored
		return
	}
	if d.values == nil {
		d.values = make(map[string]int)
	}
	ks := string(k)
	d.values[ks] = len(d.valueList)
	d.valueList = append(d.valueList, deferredValue{k: ks, rec: rec, stored: stored})
}

// deferredValue returns k's deferred record, if the batch has one.
func (d *deferred) deferredValue(k []byte) (deferredValue, bool) {
	if i, ok := d.values[string(k)]; ok {
		return d.valueList[i], true
	}
	return deferredValue{}, false
}

// dropValue forgets k's deferred record: a blind PUT overwrote it in the
// batch.
func (d *deferred) dropValue(k []byte) {
	if i, ok := d.values[string(k)]; ok {
		d.valueList[i].dropped = true
		delete(d.values, d.valueList[i].k)
	}
}

// flushValues writes the deferred user records into the current batch.
func (d *deferred) flushValues() error {
	for i := range d.valueList {
		v := &d.valueList[i]
		if v.dropped {
			continue
		}
		var err error
		if v.stored {
			err = setValue(d.b, []byte(v.k), v.rec.value, v.rec.expireAt, v.rec.version)
		} else {
			err = d.b.Delete([]byte(v.k), nil)
		}
		if err != nil {
			return err
		}
	}
	clear(d.values)
	clear(d.valueList) // holds no value past the batch
	d.valueList = d.valueList[:0]
	return nil
}

// Flush writes into b what the commands applied into it since the last
// Flush deferred (each touched session's record), and puts the shard clock
// into as, the applied-state record the replica writes into b next. The
// replica calls it once per batch that applies entries, after the batch's
// last command; nothing may be committed without it. The clock goes into
// every applied-state record, changed or not, since each replaces the last:
// as.Clock may point into the state machine until the next Flush.
func (sm *StateMachine) Flush(b *pebble.Batch, as *storepb.AppliedState) error {
	d := &sm.deferred
	if d.b != nil && d.b != b {
		return fmt.Errorf("kv: shard %d: Flush of another batch than the one applied into", sm.shard)
	}
	if err := sm.flushSessions(); err != nil {
		return err
	}
	if err := sm.flushWindows(); err != nil {
		return err
	}
	if err := d.flushValues(); err != nil {
		return err
	}
	d.b = nil
	sm.op = store{k: sm.op.k[:0]} // holds nothing of the batch past it
	c, err := sm.loadClock(b)
	if err != nil {
		return err
	}
	as.Clock = nil
	if !c.found {
		return nil
	}
	d.clock.High, d.clock.Now = c.high, c.now
	d.clock.VersionHigh, d.clock.VersionsFrom = c.versionHigh, c.versionsFrom
	as.Clock = &d.clock
	if c.legacy { // the clock now lives in as: the old record goes, once
		if err := b.Delete(keys.Clock(sm.shard), nil); err != nil {
			return err
		}
		sm.clock.legacy = false
	}
	return nil
}

// sessionKey is keys.Session(shard, id) in d.key, without an allocation
// (Set copies it).
func (d *deferred) sessionKey(shard, id uint64) []byte {
	if d.sessionPrefix == nil {
		d.sessionPrefix, _ = keys.SessionSpan(shard)
	}
	d.key = binary.BigEndian.AppendUint64(append(d.key[:0], d.sessionPrefix...), id)
	return d.key
}

// flushSessions writes the deferred session records into the current batch.
func (sm *StateMachine) flushSessions() error {
	d := &sm.deferred
	for _, id := range d.order {
		s := d.sessions[id]
		d.rec.Seq, d.rec.Result, d.rec.LastActiveUnixNanos = s.seq, s.result, s.active
		var err error
		d.buf, err = (proto.MarshalOptions{}).MarshalAppend(d.buf[:0], &d.rec)
		d.rec.Result = nil // not kept past the batch
		if err != nil {
			return err
		}
		if err := d.b.Set(d.sessionKey(sm.shard, id), d.buf, nil); err != nil {
			return err
		}
	}
	clear(d.sessions)
	d.order = d.order[:0]
	return nil
}
