package routing

import (
	"fmt"
	"math"
	"strconv"
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

// TestHashTag follows Redis Cluster's rule (its specification's examples):
// the first '{', the first '}' after it, and something between them.
func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"{user1000}.following": "user1000",
		"{user1000}.followers": "user1000",
		"foo{}{bar}":           "foo{}{bar}", // the first tag is empty: the whole key
		"foo{{bar}}zap":        "{bar",
		"foo{bar}{zap}":        "bar",
		"no tag":               "no tag",
		"{":                    "{",
		"}{":                   "}{",
		"a{b":                  "a{b",
		"{}":                   "{}",
		"x{\x00}y":             "\x00", // binary tags are bytes like any other
	} {
		if got := string(HashTag([]byte(key))); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestTableHashesByItsScheme: a table of KeyHashTags descriptors puts keys
// sharing a tag in one shard and hashes a key without a tag whole; a table
// of KeyHashWhole descriptors (a cluster bootstrapped before tags) hashes
// every key whole, braces included, so its data stays where it was written.
func TestTableHashesByItsScheme(t *testing.T) {
	mk := func(scheme uint32) *Table {
		starts, ends := Ranges(16)
		var descs []*concordpb.ShardDescriptor
		for i := range starts {
			descs = append(descs, &concordpb.ShardDescriptor{ShardId: uint64(i + 1), StartHash: starts[i], EndHash: ends[i], KeyHash: scheme})
		}
		return NewTable(descs)
	}
	tags, whole := mk(KeyHashTags), mk(KeyHashWhole)
	spread := map[uint64]bool{}
	for i := range 64 {
		a, b := fmt.Sprintf("user:{%d}:name", i), fmt.Sprintf("{%d}:mail", i)
		if tags.Lookup([]byte(a)) != tags.Lookup([]byte(b)) {
			t.Fatalf("%q and %q share a tag but not a shard", a, b)
		}
		if h := tags.Hash([]byte(a)); h != Hash([]byte(strconv.Itoa(i))) {
			t.Fatalf("tags.Hash(%q) = %#x, want the tag's hash", a, h)
		}
		if h := whole.Hash([]byte(a)); h != Hash([]byte(a)) {
			t.Fatalf("whole.Hash(%q) = %#x, want the whole key's hash", a, h)
		}
		spread[whole.Lookup([]byte(a)).GetShardId()] = true
		if k := fmt.Sprintf("plain:%d", i); tags.Lookup([]byte(k)).GetShardId() != whole.Lookup([]byte(k)).GetShardId() {
			t.Fatalf("a key without a tag %q moved between schemes", k)
		}
	}
	if len(spread) < 8 {
		t.Fatalf("whole-key hashing put 64 tagged keys in %d shards: braces were not hashed whole", len(spread))
	}
	// A scheme this version does not know is never guessed at.
	if d := mk(KeyHashTags + 1).Lookup([]byte("k")); d != nil {
		t.Fatalf("a table of an unknown key hash scheme found shard %d; want none", d.GetShardId())
	}
}
