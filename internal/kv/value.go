package kv

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
)

// A stored user value is an envelope, so that a Get stays one point read:
//
//	0x00 <bytes>                                  no expiry
//	0x01 <expire at, 8 BE> <bytes>                expires at that Unix millisecond
//	0x02 <version, 8 BE> <bytes>                  no expiry, written at a version
//	0x03 <expire at, 8 BE> <version, 8 BE> <bytes> both
//
// A command written under version.Versions (KVCommand.versioned) stores
// its values with the version it was applied at (version.go); every other
// command, and a restore, the first two forms, whose version is 0.
//
// A key with an expiry also has an entry in the shard's expiry index
// (keys.Expiry), written in the same batch as the value: the sweep finds
// expired keys there without scanning the shard. Writes that read the key
// remove the entry of the expiry they replace; a blind PUT (blindPut) does
// not read, so it may leave a stale entry, which the sweep's
// DELETE_EXPIRED removes when its time comes.
const (
	tagPlain            = 0x00
	tagExpires          = 0x01
	tagVersioned        = 0x02
	tagExpiresVersioned = 0x03
)

// record is a user key's stored state.
type record struct {
	value    []byte
	expireAt int64  // Unix ms; 0: none
	version  uint64 // the version it was written at; 0: none (an unversioned write)
}

// live reports whether a record with this expiry is readable at nowMs.
func live(expireAt, nowMs int64) bool { return expireAt == 0 || expireAt > nowMs }

// envelopeLen is the length of the envelope before the value's bytes.
func envelopeLen(expireAt int64, version uint64) int {
	n := 1
	if expireAt != 0 {
		n += 8
	}
	if version != 0 {
		n += 8
	}
	return n
}

// putEnvelope writes the envelope of a value with expiry expireAt and
// version into dst, which is envelopeLen(expireAt, version) bytes.
func putEnvelope(dst []byte, expireAt int64, version uint64) {
	tag, n := byte(tagPlain), 1
	if expireAt != 0 {
		tag = tagExpires
		binary.BigEndian.PutUint64(dst[n:], uint64(expireAt))
		n += 8
	}
	if version != 0 {
		tag |= tagVersioned
		binary.BigEndian.PutUint64(dst[n:], version)
	}
	dst[0] = tag
}

// setValue writes value with expiry expireAt and version (0: none) under
// storage key k into b, the envelope built in the batch itself (Set would
// copy a built one).
func setValue(b *pebble.Batch, k, value []byte, expireAt int64, version uint64) error {
	n := envelopeLen(expireAt, version)
	op := b.SetDeferred(len(k), n+len(value))
	copy(op.Key, k)
	putEnvelope(op.Value, expireAt, version)
	copy(op.Value[n:], value)
	return op.Finish()
}

// encodeValue is the envelope of an unversioned value.
func encodeValue(value []byte, expireAt int64) []byte {
	n := envelopeLen(expireAt, 0)
	b := make([]byte, n, n+len(value))
	putEnvelope(b, expireAt, 0)
	return append(b, value...)
}

// decodeValue splits a stored envelope; value aliases v.
func decodeValue(v []byte) (value []byte, expireAt int64, version uint64, err error) {
	if len(v) == 0 || v[0] > tagExpiresVersioned {
		return nil, 0, 0, fmt.Errorf("kv: malformed stored value (%d bytes)", len(v))
	}
	n := envelopeLen(int64(v[0]&tagExpires), uint64(v[0]&tagVersioned))
	if len(v) < n {
		return nil, 0, 0, fmt.Errorf("kv: malformed stored value (%d bytes)", len(v))
	}
	i := 1
	if v[0]&tagExpires != 0 {
		expireAt, i = int64(binary.BigEndian.Uint64(v[i:])), i+8
	}
	if v[0]&tagVersioned != 0 {
		version = binary.BigEndian.Uint64(v[i:])
	}
	return v[n:], expireAt, version, nil
}

// readRecord reads a user key's record, expired or not.
func readRecord(r pebble.Reader, k []byte) (record, bool, error) {
	v, found, err := get(r, k)
	if err != nil || !found {
		return record{}, false, err
	}
	value, expireAt, version, err := decodeValue(v)
	if err != nil {
		return record{}, false, fmt.Errorf("%w: key %x", err, k)
	}
	return record{value: value, expireAt: expireAt, version: version}, true, nil
}

// store is one user key during apply: its storage key, its stored record
// and whether it is readable on the shard's clock.
type store struct {
	b      *pebble.Batch
	d      *deferred // the batch's deferred records (deferred.go)
	shard  uint64
	key    []byte // the user key
	k      []byte // its storage key
	raw    record // what is stored, expired or not
	stored bool
	exists bool // stored and not expired
	// ver is the version the op's writes take (version.go; 0: none), and
	// tentative says it is a reconciled tentative write's.
	ver       uint64
	tentative bool
}

// unread is key's store before (or without) reading its record. The store
// and its storage key are the state machine's, reused by every op (Pebble
// copies the keys it is given), so a store is valid only until the next
// op's: an op allocates neither.
func (sm *StateMachine) unread(b *pebble.Batch, key []byte) *store {
	if sm.userPrefix == nil {
		sm.userPrefix = keys.User(sm.shard, nil)
	}
	k := append(append(sm.op.k[:0], sm.userPrefix...), key...)
	sm.op = store{b: b, d: &sm.deferred, shard: sm.shard, key: key, k: k, ver: sm.ver}
	return &sm.op
}

// load is key's store with its record: the batch's deferred one if an
// earlier op of the batch wrote it (deferred.go), else what b holds.
func (sm *StateMachine) load(b *pebble.Batch, key []byte, nowMs int64) (*store, error) {
	s := sm.unread(b, key)
	var err error
	if v, ok := s.d.deferredValue(s.k); ok {
		s.raw, s.stored = v.rec, v.stored
	} else {
		s.raw, s.stored, err = readRecord(b, s.k)
	}
	s.exists = s.stored && live(s.raw.expireAt, nowMs)
	return s, err
}

// cur is the live value and expiry (nil, 0 when absent or expired).
func (s *store) cur() record {
	if !s.exists {
		return record{}
	}
	return s.raw
}

// set stores value with expiry expireAt (0: none), keeping the index in step.
func (s *store) set(value []byte, expireAt int64) error {
	if s.stored && s.raw.expireAt != 0 && s.raw.expireAt != expireAt {
		if err := s.b.Delete(keys.Expiry(s.shard, s.raw.expireAt, s.key), nil); err != nil {
			return err
		}
	}
	if expireAt != 0 && (!s.stored || s.raw.expireAt != expireAt) {
		if err := s.b.Set(keys.Expiry(s.shard, expireAt, s.key), nil, nil); err != nil {
			return err
		}
	}
	s.raw, s.stored, s.exists = record{value: value, expireAt: expireAt, version: s.ver}, true, true
	s.d.deferValue(s.k, s.raw, true) // written by Flush
	return nil
}

// delete removes the key, expired or not, and its index entry, and
// records the delete in the key's delete bucket (version.go).
func (s *store) delete() error {
	if err := s.raiseBucket(); err != nil {
		return err
	}
	return s.remove()
}

// remove removes the key, expired or not, and its index entry: the
// sweep's delete of an expired key, which no writer made.
func (s *store) remove() error {
	if !s.stored {
		return nil
	}
	if s.raw.expireAt != 0 {
		if err := s.b.Delete(keys.Expiry(s.shard, s.raw.expireAt, s.key), nil); err != nil {
			return err
		}
	}
	s.raw, s.stored, s.exists = record{}, false, false
	s.d.deferValue(s.k, record{}, false) // deleted by Flush
	return nil
}
