package storage

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
)

// Snapshot is one shard's state-machine span as it was at one instant: what
// a raft snapshot of the shard carries. The multiraft host takes one on its
// loop, right after the last batch committed, when raft asks for a snapshot
// at the applied index; it reads the applied and conf state from it, and the
// transport then streams the span from it (ScanState), possibly for minutes.
//
// It is an open Pebble iterator over the span, not a Pebble snapshot: Excise,
// with which DestroyReplica and InstallSnapshot replace a shard's data,
// removes the data from open Pebble snapshots too (once it is flushed), so a
// stream still running when the sender's replica is removed, or replaced by
// a snapshot of its own, would carry a partial or empty shard, which the
// receiver would install at the snapshot's index: silent data loss. An open
// iterator keeps seeing exactly what it saw when created.
//
// The price: while a Snapshot is open, Pebble keeps the memtables and
// sstables it was created on (memory, and disk space that compactions would
// have freed), for the length of the stream. The host bounds how many are
// open (MaxOutgoingSnapshots) and how long an unsent one lives.
//
// A Snapshot is for one goroutine at a time (the loop, then the sender).
// Close releases it; the engine must not close while ScanState runs (a node
// stops its transport, which ends the streams, before closing storage).
type Snapshot struct {
	e     *Engine
	shard ids.ShardID
	it    *pebble.Iterator
}

// NewSnapshot returns shard's state-machine span as of everything committed
// so far.
func (e *Engine) NewSnapshot(shard ids.ShardID) (*Snapshot, error) {
	lo, hi := keys.StateSpan(uint64(shard))
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	return &Snapshot{e: e, shard: shard, it: it}, nil
}

// Shard is the shard the snapshot is of.
func (s *Snapshot) Shard() ids.ShardID { return s.shard }

// GetProto reads key, which must lie in the shard's state-machine span, into
// m; it reports false if the key is absent.
func (s *Snapshot) GetProto(key []byte, m proto.Message) (bool, error) {
	lo, hi := keys.StateSpan(uint64(s.shard))
	if bytes.Compare(key, lo) < 0 || bytes.Compare(key, hi) >= 0 {
		return false, fmt.Errorf("storage: key %x is outside the snapshot of shard %d", key, s.shard)
	}
	if !s.it.SeekGE(key) || !bytes.Equal(s.it.Key(), key) {
		return false, s.it.Error()
	}
	v, err := s.it.ValueAndErr()
	if err != nil {
		return false, err
	}
	if err := proto.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("storage: decode %x: %w", key, err)
	}
	return true, nil
}

// ScanState calls f with every pair of the snapshot's shard's state-machine
// span, in key order. f must copy what it keeps: key and value are only
// valid during the call.
func (s *Snapshot) ScanState(shard ids.ShardID, f func(key, value []byte) error) error {
	if shard != s.shard {
		return fmt.Errorf("storage: scan of shard %d from a snapshot of shard %d", shard, s.shard)
	}
	for ok := s.it.First(); ok; ok = s.it.Next() {
		v, err := s.it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := f(s.it.Key(), v); err != nil {
			return err
		}
	}
	return s.it.Error()
}

// Close releases the snapshot. One closed after the engine closed needs
// nothing released.
func (s *Snapshot) Close() error {
	s.e.closeMu.RLock()
	defer s.e.closeMu.RUnlock()
	if s.e.closed {
		return nil
	}
	return s.it.Close()
}

// SnapshotSource is what a snapshot sender reads: a shard's state span.
// *Snapshot implements it.
type SnapshotSource interface {
	ScanState(shard ids.ShardID, f func(key, value []byte) error) error
}

var _ SnapshotSource = (*Snapshot)(nil)
