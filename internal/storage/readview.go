package storage

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// ErrClosed is returned by reads that arrive after the engine closed (a
// request still running while its node stops). Pebble itself panics on use
// after Close; every read from outside the host loop goes through Read or a
// ReadView, which check, so that such a read fails instead.
var ErrClosed = errors.New("storage: engine closed")

// Read calls f with a reader of the engine's committed state, or returns
// ErrClosed if the engine is closed. The engine does not close while f runs
// (Close waits), so f must not block on anything but its reads.
func (e *Engine) Read(f func(r Reader) error) error {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	return f(e.db)
}

// ReadView is a consistent, read-only view of the engine at one instant,
// shared by the linearizable reads a replica releases together: the host
// loop takes it once their read index is applied and the batch holding it
// committed, so each read sees exactly that state even if the replica is
// removed (its data destroyed) or replaced by a snapshot before the read
// runs.
//
// It is an open Pebble iterator, not a Pebble snapshot: Excise, with which
// DestroyReplica and InstallSnapshot replace a shard's data, removes the
// data from open snapshots too; only open iterators keep seeing it. Each
// read clones the iterator (same memtables and sstables), so reads of one
// view run in parallel.
//
// It is reference counted: NewReadView(n) holds n references, and each
// holder calls Release exactly once; the last one closes the iterator. A
// view pins memtables and sstables while it is open: hold it only for a read.
type ReadView struct {
	e    *Engine
	mu   sync.Mutex // serializes Clone of base
	base *pebble.Iterator
	refs atomic.Int64
}

// NewReadView returns a view of everything committed so far, with refs
// references (at least one).
func (e *Engine) NewReadView(refs int) (*ReadView, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	v := &ReadView{e: e, base: it}
	v.refs.Store(int64(max(refs, 1)))
	return v, nil
}

// Read calls f with a reader of the view, or returns ErrClosed if the engine
// is closed; as Engine.Read. The reader is valid only during f.
func (v *ReadView) Read(f func(r Reader) error) error {
	v.e.closeMu.RLock()
	defer v.e.closeMu.RUnlock()
	if v.e.closed {
		return ErrClosed
	}
	return f(viewReader{v})
}

// Release gives up one reference; the last one closes the iterator. A view
// released after the engine closed needs nothing released.
func (v *ReadView) Release() {
	if v.refs.Add(-1) != 0 {
		return
	}
	v.e.closeMu.RLock()
	defer v.e.closeMu.RUnlock()
	if !v.e.closed {
		_ = v.base.Close() // an unpositioned iterator has no error to report
	}
}

func (v *ReadView) clone(o *pebble.IterOptions) (*pebble.Iterator, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.base.Clone(pebble.CloneOptions{IterOptions: o})
}

// viewReader is a ReadView as a pebble.Reader, for kv.Get and kv.Scan.
type viewReader struct{ v *ReadView }

var _ pebble.Reader = viewReader{}

// Get reads key through an iterator bounded to it; the closer closes it.
func (r viewReader) Get(key []byte) ([]byte, io.Closer, error) {
	upper := append(append(make([]byte, 0, len(key)+1), key...), 0)
	it, err := r.v.clone(&pebble.IterOptions{LowerBound: key, UpperBound: upper})
	if err != nil {
		return nil, nil, err
	}
	if !it.First() {
		err := it.Close()
		if err == nil {
			err = pebble.ErrNotFound
		}
		return nil, nil, err
	}
	val, err := it.ValueAndErr()
	if err != nil {
		_ = it.Close()
		return nil, nil, err
	}
	return val, it, nil
}

func (r viewReader) NewIter(o *pebble.IterOptions) (*pebble.Iterator, error) {
	if o == nil {
		o = &pebble.IterOptions{}
	}
	return r.v.clone(o)
}

func (r viewReader) NewIterWithContext(_ context.Context, o *pebble.IterOptions) (*pebble.Iterator, error) {
	return r.NewIter(o)
}

// Close does nothing: the view is released with Release.
func (viewReader) Close() error { return nil }

// ReadPoints is Read for many point reads in a row, as a batch of GETs of
// one shard makes: the reader's Get positions one cloned iterator anew for
// each key instead of cloning one per key (a clone costs more than the read
// of a key in the memtable or block cache). The value Get returns is valid
// only until the next Get (callers copy it, as kv.Get does) and its closer
// does nothing; f must not use the reader from several goroutines.
func (v *ReadView) ReadPoints(f func(r Reader) error) error {
	return v.Read(func(Reader) error {
		pr := &pointReader{viewReader: viewReader{v}}
		err := f(pr)
		if pr.it != nil {
			if cerr := pr.it.Close(); err == nil {
				err = cerr
			}
		}
		return err
	})
}

// pointReader is a viewReader whose Get reuses one iterator, re-bounded to
// each key.
type pointReader struct {
	viewReader
	it    *pebble.Iterator
	upper []byte
}

func (r *pointReader) Get(key []byte) ([]byte, io.Closer, error) {
	r.upper = append(append(r.upper[:0], key...), 0)
	if r.it == nil {
		it, err := r.v.clone(&pebble.IterOptions{LowerBound: key, UpperBound: r.upper})
		if err != nil {
			return nil, nil, err
		}
		r.it = it
	} else {
		r.it.SetBounds(key, r.upper)
	}
	if !r.it.First() {
		if err := r.it.Error(); err != nil {
			return nil, nil, err
		}
		return nil, nil, pebble.ErrNotFound
	}
	val, err := r.it.ValueAndErr()
	if err != nil {
		return nil, nil, err
	}
	return val, noClose{}, nil
}

// noClose is the closer of a pointReader's value: the iterator stays open.
type noClose struct{}

func (noClose) Close() error { return nil }
