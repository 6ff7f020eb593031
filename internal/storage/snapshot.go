package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
)

// Snapshot is a consistent, read-only view of the engine at one instant.
// The multiraft host takes one at a shard's applied index when raft asks for
// a snapshot; the transport then streams the shard's state span from it.
// Close releases it; an unclosed Snapshot pins old data in Pebble.
type Snapshot struct {
	snap *pebble.Snapshot
}

// NewSnapshot returns a view of everything committed so far.
func (e *Engine) NewSnapshot() *Snapshot { return &Snapshot{snap: e.db.NewSnapshot()} }

// GetProto reads key into m; it reports false if the key is absent.
func (s *Snapshot) GetProto(key []byte, m proto.Message) (bool, error) {
	return GetProto(s.snap, key, m)
}

// ScanState calls f with every pair of shard's state-machine span, in key
// order. f must copy what it keeps: key and value are only valid during the
// call.
func (s *Snapshot) ScanState(shard ids.ShardID, f func(key, value []byte) error) error {
	lo, hi := keys.StateSpan(uint64(shard))
	it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := f(it.Key(), it.Value()); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// Close releases the snapshot.
func (s *Snapshot) Close() error { return s.snap.Close() }

// SnapshotSource is what a snapshot sender reads: a shard's state span.
// *Snapshot implements it.
type SnapshotSource interface {
	ScanState(shard ids.ShardID, f func(key, value []byte) error) error
}

var _ SnapshotSource = (*Snapshot)(nil)
