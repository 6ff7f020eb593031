package storage

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// SSTWriter streams sorted key/value pairs into an SSTable file, so a
// snapshot never has to sit in memory whole.
type SSTWriter struct {
	fs   vfs.FS
	path string
	w    *sstable.Writer
	last []byte
	n    int
}

// NewSSTWriter creates an SSTable file named name in the engine's aux dir.
func (e *Engine) NewSSTWriter(name string) (*SSTWriter, error) {
	path := filepath.Join(e.auxDir, name)
	f, err := e.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", path, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), e.opts.MakeWriterOptions(0, e.db.TableFormat()))
	return &SSTWriter{fs: e.fs, path: path, w: w}, nil
}

// Set adds a pair; keys must arrive in strictly increasing order.
func (s *SSTWriter) Set(k, v []byte) error {
	if s.last != nil && string(k) <= string(s.last) {
		return fmt.Errorf("storage: sstable keys out of order: %x after %x", k, s.last)
	}
	s.last = append(s.last[:0], k...)
	s.n++
	return s.w.Set(k, v)
}

// Finish closes the file; it is then ready to ingest.
func (s *SSTWriter) Finish() error { return s.w.Close() }

// Abort closes and removes the file.
func (s *SSTWriter) Abort() {
	_ = s.w.Close()
	_ = s.fs.Remove(s.path)
}

// Path is the file's path.
func (s *SSTWriter) Path() string { return s.path }

// Count is the number of pairs written.
func (s *SSTWriter) Count() int { return s.n }

// InstallSnapshot atomically replaces everything stored for shard (its Raft
// log, hard state and state machine) by the state-machine pairs of staged
// (all its files, in one ingestion), a
// hard state hs, and an empty log truncated at (index, term). It is durable
// when it returns, and it consumes staged whether or not it succeeds.
func (e *Engine) InstallSnapshot(shard ids.ShardID, staged *StagedSnapshot, hs *pb.HardState, index, term uint64) error {
	defer staged.Discard() // after a successful ingest the file is already gone
	if staged.shard != shard {
		return fmt.Errorf("storage: snapshot staged for shard %d installed into shard %d", staged.shard, shard)
	}
	raftSST, err := e.NewSSTWriter(fmt.Sprintf("raft-%d-%d.sst", shard, index))
	if err != nil {
		return err
	}
	defer func() { _ = e.fs.Remove(raftSST.Path()) }()
	// Keys must be sorted: "rh" (hard state) < "rt" (truncated state).
	if err := setProtoSST(raftSST, keys.HardState(uint64(shard)), hs); err != nil {
		raftSST.Abort()
		return err
	}
	if err := setProtoSST(raftSST, keys.Truncated(uint64(shard)), &storepb.TruncatedState{Index: index, Term: term}); err != nil {
		raftSST.Abort()
		return err
	}
	if err := raftSST.Finish(); err != nil {
		return err
	}
	start, end := keys.ShardSpan(uint64(shard))
	_, err = e.db.IngestAndExcise(context.Background(), append([]string{raftSST.Path()}, staged.paths...), nil, nil,
		pebble.KeyRange{Start: start, End: end})
	if err != nil {
		return fmt.Errorf("storage: shard %d: install snapshot at %d: %w", shard, index, err)
	}
	return nil
}

func setProtoSST(w *SSTWriter, key []byte, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return w.Set(key, v)
}
