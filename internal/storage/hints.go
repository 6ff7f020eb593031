package storage

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
)

// The node's hint log (keys: \x01 hint): the tentative writes of available
// mode this node holds, one record per user key. internal/hints owns what
// a record means; storage owns the keys. Each call checks that the engine
// is open (ErrClosed otherwise), since RPC handlers write hints and may
// outlive the engine by a moment at stop.

// SetHint durably records rec as the hint of user key: synced before it
// returns, since the write it holds is answered as taken.
func (e *Engine) SetHint(key, rec []byte) error {
	return e.whileOpen(func() error { return e.db.Set(keys.Hint(key), rec, pebble.Sync) })
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
