package routing

import (
	"fmt"
	"math"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestRangesCoverHashSpace checks that the shard ranges tile the whole 64-bit
// space with no gap and no overlap, for shard counts that do and do not
// divide it evenly.
func TestRangesCoverHashSpace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 16, 1000} {
		starts, ends := Ranges(n)
		if len(starts) != n || starts[0] != 0 || ends[n-1] != math.MaxUint64 {
			t.Fatalf("n=%d: ranges do not span [0, max]: first %d last %d", n, starts[0], ends[n-1])
		}
		for i := 1; i < n; i++ {
			if starts[i] != ends[i-1]+1 {
				t.Fatalf("n=%d: gap or overlap between shard %d and %d", n, i, i+1)
			}
		}
	}
}

// TestLookupFindsOwningShard checks that every key lands in the shard whose
// range holds its hash, and that keys spread over all shards.
func TestLookupFindsOwningShard(t *testing.T) {
	starts, ends := Ranges(16)
	var descs []*concordpb.ShardDescriptor
	for i := range starts {
		descs = append(descs, &concordpb.ShardDescriptor{ShardId: uint64(i + 1), StartHash: starts[i], EndHash: ends[i]})
	}
	descs = append(descs, &concordpb.ShardDescriptor{ShardId: uint64(MetaShard)})
	tbl := NewTable(descs)
	hit := map[uint64]int{}
	for i := 0; i < 10000; i++ {
		k := []byte(fmt.Sprintf("key-%d", i))
		d := tbl.Lookup(k)
		if d == nil {
			t.Fatalf("no shard for %q", k)
		}
		h := Hash(k)
		if h < d.GetStartHash() || h > d.GetEndHash() {
			t.Fatalf("%q hash %x outside shard %d", k, h, d.GetShardId())
		}
		hit[d.GetShardId()]++
	}
	if len(hit) != 16 || hit[uint64(MetaShard)] != 0 {
		t.Fatalf("keys should spread over the 16 user shards only: %v", hit)
	}
	for _, h := range []uint64{0, math.MaxUint64, ends[3], starts[4]} {
		if tbl.LookupHash(h) == nil {
			t.Fatalf("hash %x has no shard", h)
		}
	}
}
