// Package ids defines Concord's typed identifiers. A node, a shard and a
// replica are all numbered with uint64s; giving each its own type makes the
// compiler catch an argument list such as (shard, replica, node) passed in
// the wrong order, which bare uint64 triples invite.
//
// The zero value of each type means "none" or "unknown": node ids, shard
// ids of user shards and replica ids start at 1. Shard 0 is the meta shard
// (the placement service), which is a real shard, so ShardID 0 is valid.
package ids

// NodeID identifies a Concord process (a node) within its cluster. Ids are
// allocated by the placement service and never reused.
type NodeID uint64

// ShardID identifies a shard: a hash range of the keyspace and its Raft
// group. Shard 0 is the meta shard.
type ShardID uint64

// ReplicaID identifies one replica within its shard; it is the replica's
// Raft id. A replica that lost its state comes back under a new id.
type ReplicaID uint64
