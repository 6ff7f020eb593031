package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// The node's own records, outside every shard: its identity, its address
// book and the set of peers it has heard from (see keys: \x01 ident, addr,
// seen). internal/node owns their meaning; storage owns their keys.

// Ident returns the node's identity; false if the node has none yet.
func (e *Engine) Ident() (*storepb.NodeIdent, bool, error) {
	id := &storepb.NodeIdent{}
	found, err := GetProto(e.db, keys.Ident(), id)
	if err != nil || !found {
		return nil, false, err
	}
	return id, true, nil
}

// SetIdent writes the node's identity into w.
func SetIdent(w pebble.Writer, id *storepb.NodeIdent) error { return SetProto(w, keys.Ident(), id) }

// Addresses returns the address book: every node descriptor recorded here.
func (e *Engine) Addresses() ([]*concordpb.NodeDescriptor, error) {
	lo, hi := keys.AddressSpan()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var out []*concordpb.NodeDescriptor
	for ok := it.First(); ok; ok = it.Next() {
		d := &concordpb.NodeDescriptor{}
		if err := proto.Unmarshal(it.Value(), d); err != nil {
			it.Close()
			return nil, err
		}
		out = append(out, d)
	}
	return out, it.Close()
}

// SetAddress writes node descriptor d into w.
func SetAddress(w pebble.Writer, d *concordpb.NodeDescriptor) error {
	return SetProto(w, keys.Address(d.GetNodeId()), d)
}

// SaveAddresses records ds in the address book, durably: a restarted node
// reaches its peers through it before it hears from the placement leader.
func (e *Engine) SaveAddresses(ds []*concordpb.NodeDescriptor) error {
	b := e.db.NewBatch()
	defer b.Close()
	for _, d := range ds {
		if err := SetAddress(b, d); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// Seen reports whether the node has recorded receiving raft traffic from node.
func (e *Engine) Seen(node ids.NodeID) (bool, error) {
	_, closer, err := e.db.Get(keys.Seen(uint64(node)))
	if err == pebble.ErrNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}

// MarkSeen durably records that the node has received raft traffic from node.
func (e *Engine) MarkSeen(node ids.NodeID) error {
	return e.db.Set(keys.Seen(uint64(node)), nil, pebble.Sync)
}

// JoinToken returns the join token recorded here; nil if there is none.
func (e *Engine) JoinToken() ([]byte, error) {
	v, closer, err := e.db.Get(keys.JoinToken())
	if err == pebble.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetJoinToken durably records the join token: it must survive a crash
// between the join attempt that registered it and the answer's arrival.
func (e *Engine) SetJoinToken(token []byte) error {
	return e.db.Set(keys.JoinToken(), token, pebble.Sync)
}

// ClusterVersion returns the highest cluster version recorded here
// (package version; 0 if none).
func (e *Engine) ClusterVersion() (uint32, error) {
	v, closer, err := e.db.Get(keys.ClusterVersion())
	if err == pebble.ErrNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 4 {
		return 0, fmt.Errorf("storage: cluster version record of %d bytes, want 4", len(v))
	}
	return binary.BigEndian.Uint32(v), nil
}

// SetClusterVersion records v as the highest cluster version this node
// has learned. It is synced: a node restarted on an older binary must find
// it, before it applies anything of the newer version.
func (e *Engine) SetClusterVersion(v uint32) error {
	return e.db.Set(keys.ClusterVersion(), binary.BigEndian.AppendUint32(nil, v), pebble.Sync)
}

// Restoring reports whether a restore's load began here and did not
// complete (MarkRestoring): the user shards may hold part of a backup.
func (e *Engine) Restoring() (bool, error) {
	_, closer, err := e.db.Get(keys.Restoring())
	if err == pebble.ErrNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, closer.Close()
}

// MarkRestoring durably records that a restore's load begins; it must be
// on disk before any of the backup's keys, so that no part of a load can
// be found without it.
func (e *Engine) MarkRestoring() error {
	return e.db.Set(keys.Restoring(), nil, pebble.Sync)
}

// ClearRestoring deletes the record of a load under way into w: in the
// batch that completes the load, so the record goes exactly when the whole
// backup is in.
func ClearRestoring(w pebble.Writer) error { return w.Delete(keys.Restoring(), nil) }

// SetRestored records into w the digest of the backup file the bootstrap
// in w loads: a start that finds that file still staged (the process
// stopped before removing it) tells it from a file staged later by hand.
func SetRestored(w pebble.Writer, digest []byte) error { return w.Set(keys.Restored(), digest, nil) }

// Restored returns the digest SetRestored recorded, nil if none.
func (e *Engine) Restored() ([]byte, error) {
	v, closer, err := e.db.Get(keys.Restored())
	if err == pebble.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// DiskUsage is the bytes the database's files take on disk (`concord node
// list`'s DISK): Pebble's disk usage (its sstables, obsolete and zombie
// ones too, the MANIFEST and OPTIONS files, compactions in progress)
// with, for the WAL, the sizes of the WAL files in the database directory
// (walBytes) instead of Pebble's figures. Those undercount: a WAL Pebble
// created counts 0 while it is live and the bytes written into it once it
// is not, while on disk each is allocated in full, 73.8 MB, from its first
// write (sizedWALFS), so a fresh node showed 2.9K beside a `du` of 71M.
// It reads metrics and the directory's listing, not data; 0 once the
// engine is closed. Only status shows it: the placement scheduler sizes
// shards with ShardDiskUsage and fits them by free bytes.
func (e *Engine) DiskUsage() uint64 {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return 0
	}
	m := e.db.Metrics()
	return m.DiskSpaceUsage() - m.WAL.PhysicalSize - m.WAL.ObsoletePhysicalSize + e.walBytes()
}

// walBytes is the sum of the sizes of the WAL files (NNNNNN.log) in the
// database directory, live and kept for recycling: what they take on disk,
// since sizedWALFS gives each the size of what it allocated. A file gone
// between the listing and its stat counts 0.
func (e *Engine) walBytes() uint64 {
	names, err := e.fs.List(e.dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		if fi, err := e.fs.Stat(e.fs.PathJoin(e.dir, name)); err == nil && fi.Mode().IsRegular() {
			n += uint64(fi.Size())
		}
	}
	return n
}

// ShardDiskUsage is Pebble's estimate of the bytes shard's state (its
// keys.StateSpan: what a snapshot of the shard carries) takes in the
// database's sstables on disk, compressed as stored. Data still only in a
// memtable (and the WAL) is not counted, so a shard written to lately
// reads smaller than it is, and an unflushed one 0. It reads file
// metadata, not data (BenchmarkShardDiskUsage), and gives 0 once the
// engine is closed.
func (e *Engine) ShardDiskUsage(shard ids.ShardID) uint64 {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return 0
	}
	lo, hi := keys.StateSpan(uint64(shard))
	n, err := e.db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return 0
	}
	return n
}
