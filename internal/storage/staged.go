package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
)

// SnapshotSink is where a snapshot receiver writes: it stages a received
// shard state in a file the engine owns. *Engine implements it; the
// transport's receiver (and the in-process test transport) write into it.
type SnapshotSink interface {
	NewSnapshotWriter(shard ids.ShardID) (*SnapshotWriter, error)
}

var _ SnapshotSink = (*Engine)(nil)

// SnapshotWriter streams the pairs of a snapshot being received into an
// SSTable file in the aux dir, so the snapshot never sits in memory whole.
// Every key must lie in the shard's state span: the file later replaces the
// shard's data wholesale, and a key outside it would corrupt another shard.
type SnapshotWriter struct {
	sst    *SSTWriter
	shard  ids.ShardID
	lo, hi []byte
}

// NewSnapshotWriter starts a staged snapshot of shard.
func (e *Engine) NewSnapshotWriter(shard ids.ShardID) (*SnapshotWriter, error) {
	w, err := e.NewSSTWriter(fmt.Sprintf("snap-%d-%d.sst", shard, e.stagedSeq.Add(1)))
	if err != nil {
		return nil, err
	}
	lo, hi := keys.StateSpan(uint64(shard))
	return &SnapshotWriter{sst: w, shard: shard, lo: lo, hi: hi}, nil
}

// Set adds a pair; keys must arrive in strictly increasing order and lie in
// the shard's state span.
func (w *SnapshotWriter) Set(key, value []byte) error {
	if string(key) < string(w.lo) || string(key) >= string(w.hi) {
		return fmt.Errorf("storage: snapshot key %x outside shard %d", key, w.shard)
	}
	return w.sst.Set(key, value)
}

// Finish closes the file and hands it over as a StagedSnapshot. On error
// the file is removed.
func (w *SnapshotWriter) Finish() (*StagedSnapshot, error) {
	if err := w.sst.Finish(); err != nil {
		_ = w.sst.fs.Remove(w.sst.path)
		return nil, err
	}
	return &StagedSnapshot{fs: w.sst.fs, path: w.sst.path, shard: w.shard}, nil
}

// Abort removes the file.
func (w *SnapshotWriter) Abort() { w.sst.Abort() }

// StagedSnapshot is a received snapshot's data, waiting for raft to accept
// the snapshot. Exactly one of Engine.InstallSnapshot (which consumes it)
// and Discard ends it; files left by a crash are cleared by Open.
type StagedSnapshot struct {
	fs    vfs.FS
	path  string
	shard ids.ShardID
}

// Shard is the shard the data belongs to.
func (s *StagedSnapshot) Shard() ids.ShardID { return s.shard }

// Discard removes the data file. It is safe to call more than once, and
// after InstallSnapshot.
func (s *StagedSnapshot) Discard() { _ = s.fs.Remove(s.path) }
