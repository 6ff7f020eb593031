package storage

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
)

// SnapshotSink is where a snapshot receiver writes: it stages a received
// shard state in a file the engine owns. *Engine implements it; the
// transport's receiver writes into it.
type SnapshotSink interface {
	// ReserveSnapshot counts one more staged snapshot if fewer than max
	// are counted, and returns the count it found (nil: max or more).
	ReserveSnapshot(max int) (*SnapshotReservation, int)
	// StagingSpace is the space free for staged files, in bytes;
	// ErrSpaceUnknown if the file system cannot tell.
	StagingSpace() (uint64, error)
}

// ErrSpaceUnknown: the engine's file system does not report free space
// (an in-memory one).
var ErrSpaceUnknown = errors.New("storage: free space unknown")

var _ SnapshotSink = (*Engine)(nil)

// SnapshotWriter streams the pairs of a snapshot being received into
// SSTable files in the aux dir, so the snapshot never sits in memory whole.
// Every key must lie in the shard's state span: the files later replace
// the shard's data wholesale, and a key outside it would corrupt another
// shard.
//
// A file holds at most stagedFileKeys pairs and about stagedFileBytes;
// then the next one starts. Pebble's sstable writer keeps what it needs to
// finish a table in memory (four bytes of filter hash per key, an index
// entry per block), so one file for a whole stream, however long, let a big
// shard or an endless sender grow the receiver's heap without bound. The
// files' key ranges follow each other and install together.
type SnapshotWriter struct {
	e      *Engine
	seq    uint64 // names the writer's files
	sst    *SSTWriter
	bytes  int      // in the current file
	done   []string // the finished files
	shard  ids.ShardID
	lo, hi []byte
	// ended: Finish or Abort ran; the count passed to the StagedSnapshot
	// or was taken back, once.
	ended bool
}

// NewSnapshotWriter starts a staged snapshot of shard, counted whatever
// the count (a receiver bounding it uses ReserveSnapshot).
func (e *Engine) NewSnapshotWriter(shard ids.ShardID) (*SnapshotWriter, error) {
	r, _ := e.ReserveSnapshot(math.MaxInt)
	defer r.Release() // if the writer did not start
	return r.NewWriter(shard)
}

// ReserveSnapshot counts a staged snapshot before its writer starts, if
// fewer than max are counted; it returns nil and the count otherwise. The
// check and the count are one step: a receiver that read the count and
// counted only once its writer started (after the stream's first chunk)
// let streams arriving together all pass, past the bound.
func (e *Engine) ReserveSnapshot(max int) (*SnapshotReservation, int) {
	for {
		n := e.staged.Load()
		if n >= int64(max) {
			return nil, int(n)
		}
		if e.staged.CompareAndSwap(n, n+1) {
			return &SnapshotReservation{e: e, held: true}, int(n)
		}
	}
}

// SnapshotReservation is a staged snapshot counted ahead of its writer
// (ReserveSnapshot). NewWriter passes the count to the writer; Release
// gives it back if no writer took it. One goroutine uses it.
type SnapshotReservation struct {
	e    *Engine
	held bool // the count is the reservation's: no writer took it, no Release
}

// NewWriter starts the staged snapshot of shard the reservation counts,
// which takes the count over. If it fails the reservation keeps the count
// (for Release).
func (r *SnapshotReservation) NewWriter(shard ids.ShardID) (*SnapshotWriter, error) {
	if !r.held {
		return nil, errors.New("storage: snapshot reservation used or released already")
	}
	lo, hi := keys.StateSpan(uint64(shard))
	w := &SnapshotWriter{e: r.e, seq: r.e.stagedSeq.Add(1), shard: shard, lo: lo, hi: hi}
	if err := w.newFile(); err != nil {
		return nil, err
	}
	r.held = false
	return w, nil
}

// Release gives the count back unless a writer took it. It is safe to call
// more than once, and after NewWriter.
func (r *SnapshotReservation) Release() {
	if r.held {
		r.held = false
		r.e.staged.Add(-1)
	}
}

// StagedSnapshots is how many staged snapshots have files now (see
// Engine.staged).
func (e *Engine) StagedSnapshots() int { return int(e.staged.Load()) }

// StagingSpace is the space free to this process on the file system of the
// aux dir, where snapshots are staged (the data dir's).
func (e *Engine) StagingSpace() (uint64, error) {
	u, err := e.fs.GetDiskUsage(e.auxDir)
	if errors.Is(err, vfs.ErrUnsupported) {
		return 0, ErrSpaceUnknown
	}
	if err != nil {
		return 0, fmt.Errorf("storage: free space of %s: %w", e.auxDir, err)
	}
	return u.AvailBytes, nil
}

// newFile starts the writer's next file.
func (w *SnapshotWriter) newFile() error {
	name := fmt.Sprintf("snap-%d-%d.sst", w.shard, w.seq)
	if len(w.done) > 0 {
		name = fmt.Sprintf("snap-%d-%d-%d.sst", w.shard, w.seq, len(w.done))
	}
	sst, err := w.e.NewSSTWriter(name)
	if err != nil {
		return err
	}
	if w.sst != nil {
		sst.last = w.sst.last // the order holds across files
	}
	w.sst, w.bytes = sst, 0
	return nil
}

// Set adds a pair; keys must arrive in strictly increasing order and lie in
// the shard's state span.
func (w *SnapshotWriter) Set(key, value []byte) error {
	if string(key) < string(w.lo) || string(key) >= string(w.hi) {
		return fmt.Errorf("storage: snapshot key %x outside shard %d", key, w.shard)
	}
	if w.sst.Count() >= stagedFileKeys || w.bytes >= stagedFileBytes {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	if err := w.sst.Set(key, value); err != nil {
		return err
	}
	w.bytes += len(key) + len(value)
	return nil
}

// rotate finishes the current file and starts the next. It runs only when
// the next pair arrives, so no file is empty (but the only one of an empty
// snapshot).
func (w *SnapshotWriter) rotate() error {
	if err := w.sst.Finish(); err != nil {
		return err
	}
	w.done = append(w.done, w.sst.path)
	return w.newFile()
}

// Finish closes the last file and hands the files over as a
// StagedSnapshot. On error they are removed.
func (w *SnapshotWriter) Finish() (*StagedSnapshot, error) {
	s := &StagedSnapshot{e: w.e, fs: w.sst.fs, paths: append(w.done, w.sst.path), shard: w.shard}
	w.ended = true // the count is s's now
	if err := w.sst.Finish(); err != nil {
		s.Discard()
		return nil, err
	}
	return s, nil
}

// Abort removes the files. It is safe to call more than once.
func (w *SnapshotWriter) Abort() {
	w.sst.Abort()
	for _, p := range w.done {
		_ = w.sst.fs.Remove(p)
	}
	if !w.ended {
		w.ended = true
		w.e.staged.Add(-1)
	}
}

// StagedSnapshot is a received snapshot's data, waiting for raft to accept
// the snapshot. Exactly one of Engine.InstallSnapshot (which consumes it)
// and Discard ends it; files left by a crash are cleared by Open.
type StagedSnapshot struct {
	e     *Engine
	fs    vfs.FS
	paths []string
	shard ids.ShardID
	// gone: Discard ran (and uncounted the snapshot once); InstallSnapshot
	// and the loop may both discard it.
	gone atomic.Bool
}

// Shard is the shard the data belongs to.
func (s *StagedSnapshot) Shard() ids.ShardID { return s.shard }

// Discard removes the data files. It is safe to call more than once, and
// after InstallSnapshot.
func (s *StagedSnapshot) Discard() {
	for _, p := range s.paths {
		_ = s.fs.Remove(p)
	}
	if !s.gone.Swap(true) {
		s.e.staged.Add(-1)
	}
}

// stagedFileKeys and stagedFileBytes bound one staged file (variables for
// tests).
var stagedFileKeys, stagedFileBytes = 1 << 20, 64 << 20
