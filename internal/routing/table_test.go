package routing

import (
	"math"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestLookupHashBoundariesAndGaps protects LookupHash at the inclusive ends
// of each range, with descriptors given out of order, and its nil answer for
// a hash no shard covers (a shard missing from a partial table).
func TestLookupHashBoundariesAndGaps(t *testing.T) {
	tbl := NewTable([]*concordpb.ShardDescriptor{
		{ShardId: 3, StartHash: 200, EndHash: math.MaxUint64},
		{ShardId: uint64(MetaShard), StartHash: 0, EndHash: 0},
		{ShardId: 1, StartHash: 0, EndHash: 99},
		// shard 2, [100, 199], is missing
	})
	for h, want := range map[uint64]uint64{0: 1, 99: 1, 200: 3, math.MaxUint64: 3} {
		if d := tbl.LookupHash(h); d == nil || d.GetShardId() != want {
			t.Fatalf("LookupHash(%d) = %v, want shard %d", h, d, want)
		}
	}
	for _, h := range []uint64{100, 150, 199} {
		if d := tbl.LookupHash(h); d != nil {
			t.Fatalf("LookupHash(%d) = shard %d, want nil for the gap", h, d.GetShardId())
		}
	}
	if s := tbl.Shards(); len(s) != 2 || s[0].GetShardId() != 1 || s[1].GetShardId() != 3 {
		t.Fatalf("Shards() = %v, want user shards 1 and 3 in hash order", s)
	}
}

// TestSingleShardOwnsAll protects the one-shard cluster: every key maps to it.
func TestSingleShardOwnsAll(t *testing.T) {
	starts, ends := Ranges(1)
	tbl := NewTable([]*concordpb.ShardDescriptor{{ShardId: 1, StartHash: starts[0], EndHash: ends[0]}})
	for _, k := range []string{"", "a", "zzzz"} {
		if d := tbl.Lookup([]byte(k)); d == nil || d.GetShardId() != 1 {
			t.Fatalf("Lookup(%q) = %v, want shard 1", k, d)
		}
	}
	if tbl.LookupHash(math.MaxUint64) == nil || tbl.LookupHash(0) == nil {
		t.Fatalf("the single shard does not cover both ends of the hash space")
	}
}

// TestHashIsStable protects the on-disk placement of data: the hash of a
// key must never change (xxhash64 with seed 0).
func TestHashIsStable(t *testing.T) {
	for k, want := range map[string]uint64{"": 0xef46db3751d8e999, "abc": 0x44bc2cf5ad770999} {
		if got := Hash([]byte(k)); got != want {
			t.Fatalf("Hash(%q) = %#x, want %#x", k, got, want)
		}
	}
}
