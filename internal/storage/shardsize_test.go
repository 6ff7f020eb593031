package storage

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
)

// fillState writes n incompressible values of size bytes under shard's
// state span and flushes them to sstables.
func fillState(t testing.TB, e *Engine, shard uint64, n, size int) {
	t.Helper()
	b := e.db.NewBatch()
	for i := range n {
		if err := b.Set(keys.User(shard, fmt.Appendf(nil, "key-%06d", i)), randomBytes(size), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestShardDiskUsage: a shard's estimate counts its own flushed state (a
// few MiB here, within a tenth), not another shard's, is 0 for a shard
// with nothing on disk, and 0 once the engine is closed.
func TestShardDiskUsage(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillState(t, e, 3, 1000, 4<<10) // 4 MiB
	fillState(t, e, 4, 250, 4<<10)  // 1 MiB
	got3, got4 := e.ShardDiskUsage(ids.ShardID(3)), e.ShardDiskUsage(ids.ShardID(4))
	if got3 < 3800<<10 || got3 > 4400<<10 {
		t.Errorf("shard 3 (4 MiB written): %d bytes estimated", got3)
	}
	if got4 < 950<<10 || got4 > 1100<<10 {
		t.Errorf("shard 4 (1 MiB written): %d bytes estimated", got4)
	}
	if got := e.ShardDiskUsage(ids.ShardID(5)); got != 0 {
		t.Errorf("shard 5 (nothing written): %d bytes estimated", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.ShardDiskUsage(ids.ShardID(3)); got != 0 {
		t.Errorf("closed engine: %d bytes estimated, want 0", got)
	}
}

// BenchmarkShardDiskUsage measures one shard's estimate on an engine
// holding 64 shards' state in sstables: the heartbeat asks it of every
// hosted shard when its cache is due (node.shardSizes).
func BenchmarkShardDiskUsage(b *testing.B) {
	e := openEngine(b, b.TempDir())
	for shard := range uint64(64) {
		fillState(b, e, shard, 200, 1<<10)
	}
	b.ResetTimer()
	for i := range b.N {
		_ = e.ShardDiskUsage(ids.ShardID(i % 64))
	}
}
