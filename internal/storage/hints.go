package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
)

// The node's hint log (keys: \x01 hint): the tentative writes of available
// mode this node holds, one record per user key. internal/hints owns what
// a record means; storage owns the keys. Each call checks that the engine
// is open (ErrClosed otherwise), since RPC handlers write hints and may
// outlive the engine by a moment at stop.

// SetHint durably records rec as the hint of user key, and clock as the
// hint log's clock (keys.HintClock), in one batch synced before it
// returns, since the write it holds is answered as taken.
func (e *Engine) SetHint(key, rec []byte, clock uint64) error {
	return e.whileOpen(func() error {
		b := e.db.NewBatch()
		defer b.Close()
		if err := b.Set(keys.Hint(key), rec, nil); err != nil {
			return err
		}
		if err := b.Set(keys.HintClock(), binary.BigEndian.AppendUint64(nil, clock), nil); err != nil {
			return err
		}
		return b.Commit(pebble.Sync)
	})
}

// HintClock returns the hint log's clock as SetHint last wrote it; 0 if
// it never did.
func (e *Engine) HintClock() (uint64, error) {
	var clock uint64
	err := e.Read(func(r Reader) error {
		v, closer, err := r.Get(keys.HintClock())
		if err == pebble.ErrNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		if len(v) != 8 {
			return fmt.Errorf("storage: hint clock record of %d bytes", len(v))
		}
		clock = binary.BigEndian.Uint64(v)
		return nil
	})
	return clock, err
}

// DeleteHint removes the hint of user key. Not synced: a hint found again
// after a crash is proposed again, and loses to the version it already
// gave the key (or to a newer one).
func (e *Engine) DeleteHint(key []byte) error {
	return e.whileOpen(func() error { return e.db.Delete(keys.Hint(key), pebble.NoSync) })
}

// Hint returns a copy of the hint record of user key; false if none.
func (e *Engine) Hint(key []byte) ([]byte, bool, error) {
	var rec []byte
	var found bool
	err := e.Read(func(r Reader) error {
		v, closer, err := r.Get(keys.Hint(key))
		if err == pebble.ErrNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		rec, found = bytes.Clone(v), true
		return closer.Close()
	})
	return rec, found, err
}

// ScanHints calls f with each hint at or after user key from, in key
// order, until f returns false. The slices f gets are valid only during
// the call.
func (e *Engine) ScanHints(from []byte, f func(key, rec []byte) bool) error {
	return e.Read(func(r Reader) error {
		lo, hi := keys.HintSpan()
		if len(from) > 0 {
			lo = keys.Hint(from)
		}
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			if !f(keys.UserKeyOfHint(it.Key()), it.Value()) {
				break
			}
		}
		return it.Close()
	})
}

// whileOpen runs f, a write, unless the engine is closed (ErrClosed):
// Pebble panics on use after Close, and Close waits for f.
func (e *Engine) whileOpen(f func() error) error {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	return f()
}
