package storage

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
)

// A fresh engine that has written 12 MiB holds, left to Pebble, six
// memtables (256 KiB, 512 KiB, ... 8 MiB: Pebble flushes only once the
// queued ones reach 32 MiB), each searched by every point read. The
// engine's flusher must bring that down to at most maxMemtables.
func TestEngineFlushesQueuedMemtables(t *testing.T) {
	e := openEngine(t, t.TempDir())
	val := make([]byte, 1024)
	for i := range 12 * 1024 {
		b := e.NewBatch()
		if err := b.Set(keys.User(1, fmt.Appendf(nil, "k%06d", i)), val, nil); err != nil {
			t.Fatal(err)
		}
		if err := Commit(b, false); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := e.db.Metrics()
		if m.MemTable.Count <= maxMemtables && m.Flush.NumInProgress == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d memtables after 20 s, want at most %d", m.MemTable.Count, maxMemtables)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	// Nothing written was lost on the way to the sstables.
	for _, i := range []int{0, 6000, 12*1024 - 1} {
		v, closer, err := e.db.Get(keys.User(1, fmt.Appendf(nil, "k%06d", i)))
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if len(v) != len(val) {
			t.Fatalf("key %d: %d bytes, want %d", i, len(v), len(val))
		}
		closer.Close()
	}
	if _, _, err := e.db.Get([]byte("absent")); err != pebble.ErrNotFound {
		t.Fatalf("absent key: %v", err)
	}
}
