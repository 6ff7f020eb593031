// Package hints is a node's hint log: the tentative writes of available
// mode (docs/architecture.md, "Available mode") that this node took while
// their shard could not commit them, kept in the node's own Pebble records
// (keys: \x01 hint <user key>) until the reconciler (internal/node) has
// proposed them through Raft.
//
// One hint per user key: the newest tentative write of the key taken here
// (an older one is superseded by it on this node as it would be in the
// shard: last writer wins by version). Each is synced before Hold returns,
// since the write it holds is answered as taken. A hint is removed only if
// its version is unchanged (Remove), so a newer tentative write of the key
// taken while the older was being reconciled is never lost.
//
// Versions come from the log's hybrid logical clock: Unix nanoseconds,
// moved on by one per write within a nanosecond, and never back (the wall
// clock may step back; the versions of hints held survive a restart).
//
// The log keeps its count and bytes in memory (recomputed by a scan at
// Open) and refuses a write past its bound (ErrFull).
package hints

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a tentative write does to its key.
type Kind byte

const (
	// Put stores the hint's value.
	Put Kind = 1
	// Delete removes the key.
	Delete Kind = 2
)

// Hint is one tentative write.
type Hint struct {
	Key     []byte
	Version uint64
	Kind    Kind
	Value   []byte // Put's; nil for Delete
}

// size is what the hint counts against the bound: its key and its record.
func (h Hint) size() int64 { return int64(len(h.Key) + recordHead + len(h.Value)) }

// recordHead is a record's bytes before the value: version (8), kind (1).
const recordHead = 9

func (h Hint) record() []byte {
	rec := make([]byte, 0, recordHead+len(h.Value))
	rec = binary.BigEndian.AppendUint64(rec, h.Version)
	return append(append(rec, byte(h.Kind)), h.Value...)
}

// decode parses key's record (copying what it keeps: rec may be reused).
func decode(key, rec []byte) (Hint, error) {
	if len(rec) < recordHead || (Kind(rec[8]) != Put && Kind(rec[8]) != Delete) {
		return Hint{}, fmt.Errorf("hints: corrupt record of key %q (%d bytes)", key, len(rec))
	}
	h := Hint{Key: bytes.Clone(key), Version: binary.BigEndian.Uint64(rec), Kind: Kind(rec[8])}
	if h.Kind == Put {
		h.Value = append([]byte{}, rec[recordHead:]...)
	}
	return h, nil
}

// Store is where the log keeps its records: the node's engine
// (storage.Engine's hint methods).
type Store interface {
	SetHint(key, rec []byte, clock uint64) error
	HintClock() (uint64, error)
	DeleteHint(key []byte) error
	Hint(key []byte) ([]byte, bool, error)
	ScanHints(from []byte, f func(key, rec []byte) bool) error
}

// ErrFull is Hold's error when the hint would take the log past its bound
// (--max-hint-bytes): nothing was recorded.
var ErrFull = errors.New("hints: the hint log is full (--max-hint-bytes)")

// Log is a node's hint log. Its methods are safe for concurrent use.
type Log struct {
	st    Store
	max   int64
	clock Clock
	// mu serializes the writes: a replacement's or removal's read of the
	// hint it changes, and the counts, stay one step with it.
	mu    sync.Mutex
	count atomic.Int64
	bytes atomic.Int64
	added chan struct{}
}

// Open returns the log kept in st, bounded to maxBytes (0: every Hold
// fails with ErrFull), with its count and bytes recomputed from a scan,
// and its clock above every version it gave (its persisted clock) and
// holds.
func Open(st Store, maxBytes int64) (*Log, error) {
	l := &Log{st: st, max: maxBytes, added: make(chan struct{}, 1)}
	high, err := st.HintClock()
	if err != nil {
		return nil, err
	}
	l.clock.Observe(high) // versions it gave for hints since reconciled too
	var bad error
	err = st.ScanHints(nil, func(key, rec []byte) bool {
		h, err := decode(key, rec)
		if err != nil {
			bad = err
			return false
		}
		l.count.Add(1)
		l.bytes.Add(h.size())
		l.clock.Observe(h.Version)
		return true
	})
	return l, errors.Join(err, bad)
}

// Hold records a tentative write of key at the clock's next version,
// replacing the hint the key had, and returns it; first reports whether
// the log held no hint before. It is synced when Hold returns.
func (l *Log) Hold(key []byte, kind Kind, value []byte) (h Hint, first bool, err error) {
	if kind == Delete {
		value = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old, had, err := l.get(key)
	if err != nil {
		return Hint{}, false, err
	}
	h = Hint{Key: key, Kind: kind, Value: value}
	grow := h.size()
	if had {
		grow -= old.size()
	}
	if l.bytes.Load()+grow > l.max {
		return Hint{}, false, ErrFull
	}
	h.Version = l.clock.Now()
	if err := l.st.SetHint(key, h.record(), h.Version); err != nil {
		return Hint{}, false, err
	}
	first = l.count.Load() == 0
	if !had {
		l.count.Add(1)
	}
	l.bytes.Add(grow)
	select {
	case l.added <- struct{}{}:
	default:
	}
	return h, first, nil
}

// Get returns the hint of key; false if there is none.
func (l *Log) Get(key []byte) (Hint, bool, error) { return l.get(key) }

func (l *Log) get(key []byte) (Hint, bool, error) {
	rec, found, err := l.st.Hint(key)
	if err != nil || !found {
		return Hint{}, false, err
	}
	h, err := decode(key, rec)
	return h, err == nil, err
}

// List returns a page of hints in key order, from key from on (nil: the
// first): up to limit hints, and past the first no more than maxBytes of
// them (as the bound counts them; 0: no byte bound), so that a page of
// large values stays small in memory. more reports whether a hint follows
// the page: the next page starts after its last key.
func (l *Log) List(from []byte, limit int, maxBytes int64) (page []Hint, more bool, err error) {
	if limit <= 0 {
		return nil, false, nil
	}
	var bad error
	var size int64
	err = l.st.ScanHints(from, func(key, rec []byte) bool {
		// A hint's size is its key and record: known before decoding it.
		next := int64(len(key) + len(rec))
		if len(page) == limit || (len(page) > 0 && maxBytes > 0 && size+next > maxBytes) {
			more = true
			return false
		}
		h, err := decode(key, rec)
		if err != nil {
			bad = err
			return false
		}
		page, size = append(page, h), size+next
		return true
	})
	return page, more, errors.Join(err, bad)
}

// Remove removes key's hint if its version is still version, and reports
// whether it did: a newer tentative write of the key may have replaced it
// since it was read, and that one must still be reconciled.
func (l *Log) Remove(key []byte, version uint64) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, found, err := l.get(key)
	if err != nil || !found || h.Version != version {
		return false, err
	}
	if err := l.st.DeleteHint(key); err != nil {
		return false, err
	}
	l.count.Add(-1)
	l.bytes.Add(-h.size())
	return true, nil
}

// Count is the number of hints held.
func (l *Log) Count() int64 { return l.count.Load() }

// Bytes is the bytes the hints held count against the bound: their keys
// and records.
func (l *Log) Bytes() int64 { return l.bytes.Load() }

// MaxBytes is the log's bound.
func (l *Log) MaxBytes() int64 { return l.max }

// Added delivers (at most one pending) after a Hold: the reconciler's
// cue to look soon.
func (l *Log) Added() <-chan struct{} { return l.added }

// Clock is a hybrid logical clock: Now is the wall clock in Unix
// nanoseconds, or one above the last value it gave (or observed) if the
// wall clock has not passed it. The zero Clock reads time.Now.
type Clock struct {
	mu   sync.Mutex
	last uint64
	// Wall, if set, replaces time.Now().UnixNano() (tests).
	Wall func() int64
}

// Now returns a version above every one the clock gave or observed.
func (c *Clock) Now() uint64 {
	wall := time.Now().UnixNano()
	if c.Wall != nil {
		wall = c.Wall()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = max(c.last+1, uint64(max(wall, 0)))
	return c.last
}

// Observe makes every later Now return more than v.
func (c *Clock) Observe(v uint64) {
	c.mu.Lock()
	c.last = max(c.last, v)
	c.mu.Unlock()
}

// Clock is the log's clock, which stamps the hints it holds.
func (l *Log) Clock() *Clock { return &l.clock }
