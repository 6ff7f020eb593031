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
// data from open snapshots too; only open iterators keep seeing it.
//
// A point read borrows an iterator of the view (the base one first) and
// gives it back when done, re-bounded to its key by the next borrower:
// the reads a view is shared by, run one after another, cost one
// positioning each, and a view of one read costs no clone at all. Reads that run at the same time clone the base iterator
// (same memtables and sstables), so they run in parallel; clones are kept
// for later borrowers. Before lending, each read cloned the base: the
// clone (building a merging iterator over every memtable and level) was
// 13–15 % of server CPU at get c100 (docs/benchmarks.md, "Read path CPU").
//
// It is reference counted: NewReadView(n) holds n references, and each
// holder calls Release exactly once; the last one closes the iterators. A
// view pins memtables and sstables while it is open: hold it only for a read.
type ReadView struct {
	e  *Engine
	mu sync.Mutex // guards free; serializes Clone of base
	// base is the view's first iterator. Clone reads only what a DB
	// iterator fixes when it is made (read state, sequence number,
	// comparer), never its position or bounds, so base may be cloned while
	// a read holds it.
	base   *pebble.Iterator
	first  lentIter     // base, as lent
	free   []*lentIter  // iterators of the view no read holds
	buf    [2]*lentIter // free's first array: no allocation for few readers
	upper  [48]byte     // first's bound buffer: no allocation for short keys
	clones int          // clones of base made (guarded by mu; for tests)
	refs   atomic.Int64
}

// lentIter is an iterator of a view with the buffer of its upper bound; a
// point read holds it until Close gives it back.
type lentIter struct {
	v     *ReadView
	it    *pebble.Iterator
	upper []byte
}

// NewReadView returns a view of everything committed so far, with refs
// references (at least one).
func (e *Engine) NewReadView(refs int) (*ReadView, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	v := &ReadView{e: e, base: it}
	v.first = lentIter{v: v, it: it}
	v.first.upper = v.upper[:0]
	v.buf[0] = &v.first
	v.free = v.buf[:1]
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

// TryRetain takes one more reference to v, for a holder that found v
// published somewhere another goroutine may replace it and release its
// reference (multiraft's lease-read view): it reports false, taking
// nothing, once the last reference is gone (the view is closed, or being
// closed), and the caller must find the view that replaced it. A count
// never rises from zero again, so a closed view is never used.
func (v *ReadView) TryRetain() bool {
	for {
		n := v.refs.Load()
		if n <= 0 {
			return false
		}
		if v.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release gives up one reference; the last one closes the iterators (every
// read has given its iterator back by then: it held a reference). A view
// released after the engine closed needs nothing released.
func (v *ReadView) Release() {
	if v.refs.Add(-1) != 0 {
		return
	}
	v.e.closeMu.RLock()
	defer v.e.closeMu.RUnlock()
	if v.e.closed {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, l := range v.free {
		if l.it != v.base {
			_ = l.it.Close() // closed after use: its error was reported to its read
		}
	}
	v.free = nil
	_ = v.base.Close()
}

func (v *ReadView) clone(o *pebble.IterOptions) (*pebble.Iterator, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clones++
	return v.base.Clone(pebble.CloneOptions{IterOptions: o})
}

// borrow lends an iterator of the view bounded to [key, key+0x00), one no
// read holds or a new clone of base.
func (v *ReadView) borrow(key []byte) (*lentIter, error) {
	v.mu.Lock()
	if n := len(v.free); n > 0 {
		l := v.free[n-1]
		v.free = v.free[:n-1]
		v.mu.Unlock()
		l.upper = append(append(l.upper[:0], key...), 0)
		l.it.SetBounds(key, l.upper) // Pebble copies the bounds
		return l, nil
	}
	v.mu.Unlock()
	l := &lentIter{v: v, upper: append(append(make([]byte, 0, len(key)+1), key...), 0)}
	it, err := v.clone(&pebble.IterOptions{LowerBound: key, UpperBound: l.upper})
	if err != nil {
		return nil, err
	}
	l.it = it
	return l, nil
}

// Close gives the iterator back to its view: the value read through it is
// invalid from now on.
func (l *lentIter) Close() error {
	l.v.mu.Lock()
	l.v.free = append(l.v.free, l)
	l.v.mu.Unlock()
	return nil
}

// viewReader is a ReadView as a pebble.Reader, for kv.Get and kv.Scan.
type viewReader struct{ v *ReadView }

var _ pebble.Reader = viewReader{}

// Get reads key through an iterator of the view bounded to it (borrow);
// the closer gives the iterator back. It seeks with the key as the prefix,
// so that tables whose bloom filter rules the key out are skipped (a
// merging seek searched every level's index and data blocks: a third of a
// get's read cost, docs/benchmarks.md "Fixed costs of a read").
func (r viewReader) Get(key []byte) ([]byte, io.Closer, error) {
	l, err := r.v.borrow(key)
	if err != nil {
		return nil, nil, err
	}
	if !l.it.SeekPrefixGE(key) {
		err := l.it.Error()
		_ = l.Close() // the next positioning clears an error
		if err == nil {
			err = pebble.ErrNotFound
		}
		return nil, nil, err
	}
	val, err := l.it.ValueAndErr()
	if err != nil {
		_ = l.Close()
		return nil, nil, err
	}
	return val, l, nil
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
// one shard makes: the reader's Get positions one borrowed iterator anew for
// each key. The value Get returns is valid only until the next Get (callers
// copy it, as kv.Get does) and its closer does nothing; f must not use the
// reader from several goroutines.
func (v *ReadView) ReadPoints(f func(r Reader) error) error {
	return v.Read(func(Reader) error {
		pr := &pointReader{viewReader: viewReader{v}}
		err := f(pr)
		if pr.l != nil {
			_ = pr.l.Close()
		}
		return err
	})
}

// pointReader is a viewReader whose Get keeps one borrowed iterator,
// re-bounded to each key.
type pointReader struct {
	viewReader
	l *lentIter
}

func (r *pointReader) Get(key []byte) ([]byte, io.Closer, error) {
	if r.l == nil {
		l, err := r.v.borrow(key)
		if err != nil {
			return nil, nil, err
		}
		r.l = l
	} else {
		r.l.upper = append(append(r.l.upper[:0], key...), 0)
		r.l.it.SetBounds(key, r.l.upper)
	}
	it := r.l.it
	if !it.SeekPrefixGE(key) {
		if err := it.Error(); err != nil {
			return nil, nil, err
		}
		return nil, nil, pebble.ErrNotFound
	}
	val, err := it.ValueAndErr()
	if err != nil {
		return nil, nil, err
	}
	return val, noClose{}, nil
}

// noClose is the closer of a pointReader's value: the iterator stays
// borrowed until ReadPoints ends.
type noClose struct{}

func (noClose) Close() error { return nil }
