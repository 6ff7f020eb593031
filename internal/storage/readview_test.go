package storage

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/concord-kv/concord/internal/keys"
)

// TestReadViewSurvivesDestroyReplica protects linearizable reads released
// just before their replica is removed: a view taken before DestroyReplica
// (which excises the shard) still reads the shard's data, point reads and
// scans, from any number of holders. A Pebble snapshot would not: Excise
// removes data from open snapshots too (here, once it is flushed).
func TestReadViewSurvivesDestroyReplica(t *testing.T) {
	for _, flush := range []bool{false, true} {
		t.Run(map[bool]string{false: "memtable", true: "flushed"}[flush], func(t *testing.T) {
			testReadViewSurvivesDestroyReplica(t, flush)
		})
	}
}

func testReadViewSurvivesDestroyReplica(t *testing.T, flush bool) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	if err := e.SetHosted(7, 4); err != nil {
		t.Fatal(err)
	}
	if flush {
		if err := e.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	before := dumpShard(t, e.db, 7)
	v, err := e.NewReadView(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DestroyReplica(7, 4); err != nil {
		t.Fatal(err)
	}
	if got := dumpShard(t, e.db, 7); len(got) != 0 {
		t.Fatalf("shard 7 keeps %d keys after DestroyReplica; the test proves nothing", len(got))
	}
	for range 2 {
		if err := v.Read(func(r Reader) error {
			if got := dumpShard(t, r, 7); !sameMap(got, before) {
				t.Fatalf("the view reads %d keys of shard 7 after DestroyReplica, want the %d it had", len(got), len(before))
			}
			val, closer, err := r.Get(keys.User(7, []byte("a-3")))
			if err != nil {
				t.Fatalf("Get through the view: %v", err)
			}
			defer closer.Close()
			if string(val) != "a" {
				t.Fatalf("Get through the view = %q, want \"a\"", val)
			}
			if _, _, err := r.Get(keys.User(7, []byte("a-"))); err == nil {
				t.Fatal("Get of an absent key (a prefix of present ones) found something")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		v.Release()
	}
}

// TestReadsAfterCloseFail protects a stopping node from Pebble's panic on
// use after Close: reads through Read and ReadView that come after Close
// fail with ErrClosed, and releasing a view then is harmless.
func TestReadsAfterCloseFail(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	v, err := e.NewReadView(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err == nil {
		t.Log("Close with a view open reported no leak") // Pebble reports the open iterator
	}
	read := func(r Reader) error { _, _, err := r.Get(keys.User(7, []byte("a-1"))); return err }
	if err := e.Read(read); !errors.Is(err, ErrClosed) {
		t.Fatalf("Engine.Read after Close: %v, want ErrClosed", err)
	}
	if err := v.Read(read); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadView.Read after Close: %v, want ErrClosed", err)
	}
	v.Release()
}

// TestReadPointsReusesOneIterator protects batched point reads through a
// view: each Get sees its own key (present, absent between present keys, a
// prefix of present keys, repeated, in any order), never a neighbour left
// by the previous positioning, and after DestroyReplica still sees the
// view's state.
func TestReadPointsReusesOneIterator(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	if err := e.SetHosted(7, 4); err != nil {
		t.Fatal(err)
	}
	v, err := e.NewReadView(1)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	if err := e.DestroyReplica(7, 4); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key   string
		found bool
	}{{"a-3", true}, {"a-", false}, {"a-1", true}, {"a-3", true}, {"zz", false}, {"a-3", true}, {"", false}, {"a-2", true}}
	if err := v.ReadPoints(func(r Reader) error {
		for _, c := range cases {
			val, closer, err := r.Get(keys.User(7, []byte(c.key)))
			if !c.found {
				if !errors.Is(err, pebble.ErrNotFound) {
					t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", c.key, val, err)
				}
				continue
			}
			if err != nil || string(val) != "a" {
				t.Fatalf("Get(%q) = %q, %v; want \"a\"", c.key, val, err)
			}
			_ = closer.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestReadViewLendsIterators protects the point reads of a view: reads
// one after another borrow the view's iterators instead of cloning one
// each (no clone at all for reads in turn), reads at the same time each
// get their own, and every read, borrowed iterator or clone, sees the
// view's state, never a write committed after it nor the previous read's
// key.
func TestReadViewLendsIterators(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	const workers = 8
	v, err := e.NewReadView(1 + workers)
	if err != nil {
		t.Fatal(err)
	}
	// Written after the view: no read of it may see these.
	if err := e.db.Set(keys.User(7, []byte("a-3")), []byte("later"), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Set(keys.User(7, []byte("a-new")), []byte("later"), nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key   string
		found bool
	}{{"a-3", true}, {"a-", false}, {"a-1", true}, {"a-new", false}, {"a-3", true}, {"zz", false}, {"a-2", true}}
	check := func(r Reader) error {
		for _, c := range cases {
			val, closer, err := r.Get(keys.User(7, []byte(c.key)))
			if !c.found {
				if !errors.Is(err, pebble.ErrNotFound) {
					return fmt.Errorf("Get(%q) = %q, %v; want ErrNotFound", c.key, val, err)
				}
				continue
			}
			if err != nil || string(val) != "a" {
				return fmt.Errorf("Get(%q) = %q, %v; want \"a\"", c.key, val, err)
			}
			if err := closer.Close(); err != nil {
				return err
			}
		}
		return nil
	}
	for range 3 {
		if err := v.Read(check); err != nil {
			t.Fatal(err)
		}
	}
	v.Release()
	v.mu.Lock()
	clones := v.clones
	v.mu.Unlock()
	if clones != 0 {
		t.Fatalf("%d reads in turn made %d clones, want 0 (each borrows the view's iterator)", 3*len(cases), clones)
	}

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer v.Release()
			for range 50 {
				if err := v.Read(check); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v.clones > workers {
		t.Fatalf("%d concurrent readers made %d clones, want at most one each", workers, v.clones)
	}
}

// TestTryRetainNeverRevivesAView protects the lease-read view's lending
// (multiraft/fastread.go): TryRetain takes a reference while one is held,
// and none once the last was released, so no reader uses a closed view;
// under -race, retains racing the last release never reach a closed one.
func TestTryRetainNeverRevivesAView(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	v, err := e.NewReadView(1)
	if err != nil {
		t.Fatal(err)
	}
	if !v.TryRetain() {
		t.Fatal("TryRetain on a held view failed")
	}
	v.Release()
	v.Release() // the last reference: the view closes
	if v.TryRetain() {
		t.Fatal("TryRetain revived a released view")
	}
	v, err = e.NewReadView(1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if !v.TryRetain() {
					return
				}
				if err := v.Read(func(r Reader) error {
					_, closer, err := r.Get(keys.User(7, []byte("a-1")))
					if err == nil {
						_ = closer.Close()
					}
					return err
				}); err != nil {
					t.Errorf("read of a retained view: %v", err)
				}
				v.Release()
			}
		}()
	}
	v.Release() // the publisher's reference, while readers retain and release
	wg.Wait()
	if v.TryRetain() {
		t.Fatal("TryRetain revived a released view")
	}
}

// TestPointReadsUseBloomFilters protects the point reads' use of the
// tables' bloom filters: a key read through a view (Get, and ReadPoints'
// Get) skips the tables whose filter rules it out, and still reads the
// newest version of a key whatever level holds it, and no deleted or
// absent key. It fails if the engine writes no filters or the reads do
// not seek by prefix (no filter is consulted), or if the prefix seek
// reads a stale version.
func TestPointReadsUseBloomFilters(t *testing.T) {
	e := openEngine(t, t.TempDir())
	put := func(k, v string) {
		t.Helper()
		var err error
		if v == "" {
			err = e.db.Delete(keys.User(7, []byte(k)), pebble.Sync)
		} else {
			err = e.db.Set(keys.User(7, []byte(k)), []byte(v), pebble.Sync)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	flush := func() {
		t.Helper()
		if err := e.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Three tables over the same key range, each holding other keys.
	for i := range 100 {
		put(fmt.Sprintf("k%03d", 3*i), "old")
	}
	put("gone", "x")
	flush()
	for i := range 100 {
		put(fmt.Sprintf("k%03d", 3*i+1), "b")
	}
	put("k000", "new")
	flush()
	for i := range 100 {
		put(fmt.Sprintf("k%03d", 3*i+2), "c")
	}
	put("gone", "")
	flush()
	want := map[string]string{"k000": "new", "k003": "old", "k004": "b", "k299": "c", "k297": "old", "gone": "", "k999": "",
		"k00": "", "k0001": "", "k1": "", "k2x": ""} // the last four within every table's range, in none
	const absentInRange = 4
	hits := e.db.Metrics().Filter.Hits
	v, err := e.NewReadView(1)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	check := func(r Reader) error {
		for k, w := range want {
			val, closer, err := r.Get(keys.User(7, []byte(k)))
			if w == "" {
				if !errors.Is(err, pebble.ErrNotFound) {
					t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", k, val, err)
				}
				continue
			}
			if err != nil || string(val) != w {
				t.Fatalf("Get(%q) = %q, %v; want %q", k, val, err, w)
			}
			_ = closer.Close()
		}
		return nil
	}
	for name, read := range map[string]func(func(Reader) error) error{"Read": v.Read, "ReadPoints": v.ReadPoints} {
		if err := read(check); err != nil {
			t.Fatal(err)
		}
		// Each absent key within the tables' range is ruled out by a
		// filter, wherever compactions left the tables.
		now := e.db.Metrics().Filter.Hits
		if now-hits < absentInRange {
			t.Fatalf("%s: %d tables skipped by their filter for %d reads of absent keys in their range", name, now-hits, absentInRange)
		}
		hits = now
	}
}
