package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// The records of which replicas a node hosts: one hosted record per shard
// with a replica here (its replica id), and a tombstone per shard a replica
// was removed from (the highest removed id, so that stale messages addressed
// to it cannot bring it back).

// HostedReplicas returns the replica id hosted here of every shard.
func (e *Engine) HostedReplicas() (map[ids.ShardID]ids.ReplicaID, error) {
	lo, hi := keys.HostedSpan()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	out := map[ids.ShardID]ids.ReplicaID{}
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Value()) != 8 {
			_ = it.Close()
			return nil, fmt.Errorf("storage: hosted record %x is corrupt", it.Key())
		}
		out[ids.ShardID(keys.ShardOfHosted(it.Key()))] = ids.ReplicaID(binary.BigEndian.Uint64(it.Value()))
	}
	return out, it.Close()
}

// SetHosted durably records that this node hosts replica id of shard.
func (e *Engine) SetHosted(shard ids.ShardID, id ids.ReplicaID) error {
	return e.db.Set(keys.Hosted(uint64(shard)), binary.BigEndian.AppendUint64(nil, uint64(id)), pebble.Sync)
}

// Tombstone returns the highest replica id of shard removed from this node;
// 0 if none was.
func (e *Engine) Tombstone(shard ids.ShardID) (ids.ReplicaID, error) {
	v, closer, err := e.db.Get(keys.Tombstone(uint64(shard)))
	if err == pebble.ErrNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("storage: tombstone of shard %d is corrupt", shard)
	}
	return ids.ReplicaID(binary.BigEndian.Uint64(v)), nil
}

// DestroyReplica removes replica id of shard from this node: it records the
// tombstone and drops the hosted record (durably, first, so that a crash
// never restarts a half-removed replica), then removes the shard's whole
// prefix (log, hard state, data). It is durable when it returns.
func (e *Engine) DestroyReplica(shard ids.ShardID, id ids.ReplicaID) error {
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.Set(keys.Tombstone(uint64(shard)), binary.BigEndian.AppendUint64(nil, uint64(id)), nil); err != nil {
		return err
	}
	if err := b.Delete(keys.Hosted(uint64(shard)), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	return e.exciseShard(shard)
}

func (e *Engine) exciseShard(shard ids.ShardID) error {
	start, end := keys.ShardSpan(uint64(shard))
	return e.db.Excise(context.Background(), pebble.KeyRange{Start: start, End: end})
}

// RemoveLeftovers removes the data of every shard this node tombstoned and
// no longer hosts: what a crash between DestroyReplica's two steps leaves
// behind (the tombstone durable, the data not yet excised). No replica
// owns that data, and one created for the shard later must start empty. A
// host calls it before it loads its replicas.
func (e *Engine) RemoveLeftovers() error {
	lo, hi := keys.TombstoneSpan()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var tombstoned []ids.ShardID
	for ok := it.First(); ok; ok = it.Next() {
		tombstoned = append(tombstoned, ids.ShardID(keys.ShardOfTombstone(it.Key())))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	for _, shard := range tombstoned {
		_, closer, err := e.db.Get(keys.Hosted(uint64(shard)))
		if err == nil {
			closer.Close()
			continue // hosted again, by a higher replica id
		}
		if err != pebble.ErrNotFound {
			return err
		}
		empty, err := e.shardEmpty(shard)
		if err != nil {
			return err
		}
		if empty {
			continue
		}
		if err := e.exciseShard(shard); err != nil {
			return fmt.Errorf("storage: remove leftovers of shard %d: %w", shard, err)
		}
	}
	return nil
}

// shardEmpty reports whether nothing is stored under shard's prefix.
func (e *Engine) shardEmpty(shard ids.ShardID) (bool, error) {
	start, end := keys.ShardSpan(uint64(shard))
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return false, err
	}
	found := it.First()
	return !found, errors.Join(it.Error(), it.Close())
}

// Every bootstrapped replica starts from the same state: a log truncated at
// (InitialIndex, InitialTerm), with nothing to replay. (internal/node has its
// own copy of these until it moves to BootstrapReplica.)
const (
	InitialIndex = 5
	InitialTerm  = 5
)

// BootstrapReplica writes into w the initial state of replica id of shard
// d, as a bootstrapping node does for each replica of the initial placement:
// hosted record, hard state, truncated log, applied state, conf state (the
// descriptor's replicas as voters) and descriptor. The meta shard's own
// records are the caller's (placement.Bootstrap).
func BootstrapReplica(w pebble.Writer, d *concordpb.ShardDescriptor, id ids.ReplicaID) error {
	var voters []uint64
	for _, r := range d.GetReplicas() {
		voters = append(voters, r.GetReplicaId())
	}
	shard := d.GetShardId()
	for _, kv := range []struct {
		key []byte
		m   proto.Message
	}{
		{keys.HardState(shard), &pb.HardState{Term: new(uint64(InitialTerm)), Commit: new(uint64(InitialIndex))}},
		{keys.Truncated(shard), &storepb.TruncatedState{Index: InitialIndex, Term: InitialTerm}},
		{keys.Applied(shard), &storepb.AppliedState{Index: InitialIndex, Term: InitialTerm}},
		{keys.ConfState(shard), &pb.ConfState{Voters: voters}},
		{keys.Descriptor(shard), d},
	} {
		if err := SetProto(w, kv.key, kv.m); err != nil {
			return err
		}
	}
	return w.Set(keys.Hosted(shard), binary.BigEndian.AppendUint64(nil, uint64(id)), nil)
}
