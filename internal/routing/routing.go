// Package routing maps keys to shards. A key's position is the xxhash64 of the
// key, or of its hash tag (HashFor); shard i of S owns the i-th of S equal,
// contiguous slices of the 64-bit hash space. The hash function must never
// change once data exists: the scheme is fixed when a cluster is
// bootstrapped and recorded in every shard descriptor (key_hash).
//
// Shard 0 is the meta shard (the placement service) and owns no user keys;
// user shards are numbered 1..S.
package routing

import (
	"bytes"
	"math"
	"sort"

	"github.com/cespare/xxhash/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// MetaShard is the id of the placement service's shard.
const MetaShard ids.ShardID = 0

// Hash is the stable 64-bit position of key in the hash space under
// KeyHashWhole.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// Key hash schemes: a ShardDescriptor's key_hash.
const (
	// KeyHashWhole hashes the whole key: clusters bootstrapped before hash
	// tags keep it for good.
	KeyHashWhole uint32 = 0
	// KeyHashTags hashes a key's hash tag, as Redis Cluster does, so that
	// keys sharing a tag ("user:{42}:name", "user:{42}:mail") share a
	// shard, and MULTI, MSETNX and WATCH can span them. New clusters use it.
	KeyHashTags uint32 = 1
)

// KnownScheme reports whether this version knows the key hash scheme. A
// node must never guess at one it does not: the nodes that know it would
// place and accept keys differently, and a shard's replicas would diverge
// (a table of an unknown scheme finds no shard; the state machine refuses
// to apply, stopping the node).
func KnownScheme(scheme uint32) bool { return scheme <= KeyHashTags }

// HashFor is key's position in the hash space under scheme, a KnownScheme.
func HashFor(scheme uint32, key []byte) uint64 {
	if scheme == KeyHashTags {
		key = HashTag(key)
	}
	return xxhash.Sum64(key)
}

// HashTag is the part of key KeyHashTags hashes: Redis Cluster's rule, the
// bytes between the first '{' and the first '}' after it when there are
// any, else the whole key ("{user}.a" → "user", "a{}{b}" → "a{}{b}",
// "a{{b}}" → "{b").
func HashTag(key []byte) []byte {
	i := bytes.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	if j := bytes.IndexByte(key[i+1:], '}'); j > 0 {
		return key[i+1 : i+1+j]
	}
	return key
}

// Ranges splits the hash space into n contiguous inclusive ranges [start, end],
// the i-th for shard i+1.
func Ranges(n int) (starts, ends []uint64) {
	if n <= 0 {
		panic("routing: shard count must be positive")
	}
	step := math.MaxUint64/uint64(n) + 1
	if n == 1 {
		step = 0 // one shard owns everything; avoid the overflow below
	}
	for i := 0; i < n; i++ {
		start := uint64(i) * step
		end := uint64(math.MaxUint64)
		if i < n-1 {
			end = uint64(i+1)*step - 1
		}
		starts, ends = append(starts, start), append(ends, end)
	}
	return starts, ends
}

// Table finds the shard of a key among a set of user-shard descriptors.
// It is immutable once built.
type Table struct {
	shards []*concordpb.ShardDescriptor // sorted by start hash
	scheme uint32                       // the shards' key_hash (all the same)
}

// NewTable builds a Table from user-shard descriptors; the meta shard is ignored.
func NewTable(descs []*concordpb.ShardDescriptor) *Table {
	t := &Table{}
	for _, d := range descs {
		if ids.ShardID(d.GetShardId()) != MetaShard {
			t.shards = append(t.shards, d)
			t.scheme = d.GetKeyHash()
		}
	}
	sort.Slice(t.shards, func(i, j int) bool { return t.shards[i].GetStartHash() < t.shards[j].GetStartHash() })
	return t
}

// Lookup returns the descriptor of the shard that owns key, or nil if no
// shard covers its hash or the shards hash keys by a scheme this version
// does not know (KnownScheme).
func (t *Table) Lookup(key []byte) *concordpb.ShardDescriptor {
	if !KnownScheme(t.scheme) {
		return nil
	}
	return t.LookupHash(t.Hash(key))
}

// Scheme is the shards' key hash scheme (their key_hash).
func (t *Table) Scheme() uint32 { return t.scheme }

// Hash is key's position in the hash space under the shards' scheme.
func (t *Table) Hash(key []byte) uint64 { return HashFor(t.scheme, key) }

// LookupHash returns the descriptor of the shard whose range holds h.
func (t *Table) LookupHash(h uint64) *concordpb.ShardDescriptor {
	i := sort.Search(len(t.shards), func(i int) bool { return t.shards[i].GetEndHash() >= h })
	if i == len(t.shards) || t.shards[i].GetStartHash() > h {
		return nil
	}
	return t.shards[i]
}

// Shards returns the user shards in hash order.
func (t *Table) Shards() []*concordpb.ShardDescriptor { return t.shards }
