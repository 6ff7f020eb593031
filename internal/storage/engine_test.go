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

// Point reads of the same keys must come from the block cache once warm,
// also on an engine whose memtables have grown to full size. Pebble
// reserves its memtables' memory in the block cache (the mutable one and
// the last flushed one, kept for reuse: two full-size memtables), so a
// cache of just BlockCacheSize held no block at all there and every read
// missed (issue 14).
func TestEngineReadsHitBlockCacheWithFullMemtables(t *testing.T) {
	e := openEngine(t, t.TempDir())
	// The hot keys, in sstables.
	const hot = 2000
	hotKey := func(i int) []byte { return keys.User(1, fmt.Appendf(nil, "hot-%06d", i)) }
	val := make([]byte, 256)
	b := e.NewBatch()
	for i := range hot {
		if err := b.Set(hotKey(i), val, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := Commit(b, false); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	// Other writes until the memtables are full size and one full-size
	// memtable waits for reuse, as on a node that has served puts.
	filler := make([]byte, 64<<10)
	for i := 0; ; i++ {
		m := e.db.Metrics()
		if m.MemTable.Size >= MemTableSize && m.MemTable.ZombieSize >= MemTableSize {
			break
		}
		if i > 8*MemTableSize/len(filler) {
			t.Fatalf("memtables not full size after %d MiB written: size %d, zombie %d", i*len(filler)>>20, m.MemTable.Size, m.MemTable.ZombieSize)
		}
		b := e.NewBatch()
		if err := b.Set(keys.User(2, fmt.Appendf(nil, "fill-%06d", i)), filler, nil); err != nil {
			t.Fatal(err)
		}
		if err := Commit(b, false); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() {
		v, err := e.NewReadView(1)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Release()
		err = v.ReadPoints(func(r Reader) error {
			for i := range hot {
				got, _, err := r.Get(hotKey(i))
				if err != nil {
					return fmt.Errorf("key %d: %w", i, err)
				}
				if len(got) != len(val) {
					return fmt.Errorf("key %d: %d bytes, want %d", i, len(got), len(val))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	readAll() // warm-up: the first read of each block misses
	before := e.BlockCacheStats()
	readAll()
	after := e.BlockCacheStats()
	if misses := after.Misses - before.Misses; misses != 0 {
		t.Fatalf("second pass over %d keys: %d block cache misses (%d hits), want 0; cache holds %d bytes",
			hot, misses, after.Hits-before.Hits, after.Bytes)
	}
	if after.Hits <= before.Hits {
		t.Fatalf("second pass: no block cache hits (%d before, %d after)", before.Hits, after.Hits)
	}
}
