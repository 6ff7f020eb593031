package routing

import (
	"strconv"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// BenchmarkLookup is the front door's per-request routing: one hash and a
// binary search over 16 shards (the table itself is cached by the node).
func BenchmarkLookup(b *testing.B) {
	starts, ends := Ranges(16)
	descs := make([]*concordpb.ShardDescriptor, len(starts))
	for i := range starts {
		descs[i] = &concordpb.ShardDescriptor{ShardId: uint64(i + 1), StartHash: starts[i], EndHash: ends[i]}
	}
	t := NewTable(descs)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("key-" + strconv.Itoa(i*7919))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if t.Lookup(keys[i%len(keys)]) == nil {
			b.Fatal("no shard")
		}
	}
}

// BenchmarkNewTable is what every request paid before the node cached its
// routing view (issue 14): building the table from 16 descriptors.
func BenchmarkNewTable(b *testing.B) {
	starts, ends := Ranges(16)
	descs := make([]*concordpb.ShardDescriptor, len(starts))
	for i := range starts {
		descs[i] = &concordpb.ShardDescriptor{ShardId: uint64(i + 1), StartHash: starts[i], EndHash: ends[i]}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = NewTable(descs)
	}
}
