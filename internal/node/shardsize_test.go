package node

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
)

// TestApproxBytesCachedBetweenMeasurements: the heartbeats' replica sizes
// are measured every shardSizeEvery, not on every heartbeat: a shard that
// grew reads its old size until then and its new size after; a shard
// hosted since the last measurement is measured at once; a measurement
// forgets the shards no longer hosted.
func TestApproxBytesCachedBetweenMeasurements(t *testing.T) {
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	write := func(shard uint64, from int) {
		b := eng.NewBatch()
		defer b.Close()
		value := make([]byte, 4<<10)
		for i := from; i < from+256; i++ { // 1 MiB
			_, _ = rand.Read(value)
			if err := b.Set(keys.User(shard, fmt.Appendf(nil, "k%06d", i)), value, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := eng.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	n := &Node{eng: eng}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const mib = 1 << 20

	write(1, 0)
	first := n.approxBytes(t0, []ids.ShardID{1})[1]
	if first < mib*9/10 || first > mib*11/10 {
		t.Fatalf("shard 1 with 1 MiB written: %d bytes", first)
	}
	write(1, 256)
	write(2, 0)
	got := n.approxBytes(t0.Add(shardSizeEvery-time.Millisecond), []ids.ShardID{1, 2})
	if got[1] != first {
		t.Errorf("shard 1 before shardSizeEvery passed: %d bytes; want the cached %d", got[1], first)
	}
	if got[2] < mib*9/10 {
		t.Errorf("shard 2, new since the last measurement: %d bytes; want it measured (1 MiB)", got[2])
	}
	if got := n.approxBytes(t0.Add(shardSizeEvery), []ids.ShardID{1})[1]; got < mib*19/10 {
		t.Errorf("shard 1 once shardSizeEvery passed: %d bytes; want it measured anew (2 MiB)", got)
	}
	if _, ok := n.shardSizes.bytes[2]; ok {
		t.Error("shard 2, no longer hosted, still cached after a new measurement")
	}
}
