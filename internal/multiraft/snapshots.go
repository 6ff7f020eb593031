package multiraft

import (
	"encoding/binary"
	"errors"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// outgoingSnapshots holds the storage snapshots behind snapshot handles that
// raft put into MsgSnap messages, until the transport claims them. It also
// counts snapshots in flight, to bound how many stream at once.
type outgoingSnapshots struct {
	mu       sync.Mutex
	m        map[uint64]*outSnap // guarded by mu
	next     uint64              // guarded by mu
	inflight int                 // guarded by mu: reserved and not yet done
}

type outSnap struct {
	snap *storage.Snapshot
	made uint64 // the loop's tick count when raft built it
}

// reserve counts one more snapshot in flight, if fewer than limit are.
func (o *outgoingSnapshots) reserve(limit int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight >= limit {
		return false
	}
	o.inflight++
	return true
}

// done counts one snapshot fewer in flight.
func (o *outgoingSnapshots) done() {
	o.mu.Lock()
	o.inflight--
	o.mu.Unlock()
}

// put registers snap, built at tick now, and returns its handle.
func (o *outgoingSnapshots) put(snap *storage.Snapshot, now uint64) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	o.m[o.next] = &outSnap{snap: snap, made: now}
	return binary.BigEndian.AppendUint64(nil, o.next)
}

// take claims the snapshot of handle; the caller closes it and calls done.
func (o *outgoingSnapshots) take(handle []byte) *storage.Snapshot {
	if len(handle) != 8 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	id := binary.BigEndian.Uint64(handle)
	s, ok := o.m[id]
	if !ok {
		return nil
	}
	delete(o.m, id)
	return s.snap
}

// expire releases, at tick now, snapshots raft built more than ttl ticks
// ago but never sent.
func (o *outgoingSnapshots) expire(now, ttl uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, s := range o.m {
		if now-s.made > ttl {
			s.snap.Close()
			delete(o.m, id)
			o.inflight--
		}
	}
}

func (o *outgoingSnapshots) releaseAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, s := range o.m {
		s.snap.Close()
		delete(o.m, id)
	}
}

// snapshotFunc returns the raft.Storage Snapshot function of shard: a
// handle to a storage.Snapshot of the shard's state taken now, at the
// applied index. Called on the loop, after the last batch was committed, so
// the two agree; the metadata (applied index and term, conf state) is read
// from the snapshot itself. The snapshot keeps that state for the stream
// even if the replica here is destroyed or replaced meanwhile.
func (h *Host) snapshotFunc(shard ids.ShardID) func() (*pb.Snapshot, error) {
	return func() (*pb.Snapshot, error) {
		if !h.snaps.reserve(h.cfg.MaxOutgoingSnapshots) {
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		snap, err := h.eng.NewSnapshot(shard)
		if err != nil {
			h.snaps.done()
			return nil, err
		}
		var as storepb.AppliedState
		cs := &pb.ConfState{}
		_, err1 := snap.GetProto(keys.Applied(uint64(shard)), &as)
		_, err2 := snap.GetProto(keys.ConfState(uint64(shard)), cs)
		if err := errors.Join(err1, err2); err != nil {
			snap.Close()
			h.snaps.done()
			return nil, err
		}
		if mutant.Enabled && mutant.On(mutant.SnapshotDropsEntry) {
			// Label the snapshot with the next entry, if the log holds it.
			if r := h.replicas[shard]; r != nil {
				next := as.GetIndex() + 1
				if last, _ := r.RaftLog().LastIndex(); next <= last {
					if t, err := r.RaftLog().Term(next); err == nil {
						as.Index, as.Term = next, t
					}
				}
			}
		}
		handle := h.snaps.put(snap, h.ticks)
		return &pb.Snapshot{
			Data:     handle,
			Metadata: &pb.SnapshotMetadata{Index: new(as.GetIndex()), Term: new(as.GetTerm()), ConfState: cs},
		}, nil
	}
}
