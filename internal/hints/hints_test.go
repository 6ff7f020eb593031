package hints_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/storage"
)

func openLog(t *testing.T, dir string, maxBytes int64) (*hints.Log, *storage.Engine) {
	t.Helper()
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := hints.Open(eng, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return l, eng
}

func mustHold(t *testing.T, l *hints.Log, key string, kind hints.Kind, value string) hints.Hint {
	t.Helper()
	h, _, err := l.Hold([]byte(key), kind, []byte(value))
	if err != nil {
		t.Fatalf("hold %s: %v", key, err)
	}
	return h
}

func TestHoldReplacesAndGetReads(t *testing.T) {
	l, eng := openLog(t, t.TempDir(), 1<<20)
	defer eng.Close()
	h1, first, err := l.Hold([]byte("k"), hints.Put, []byte("v1"))
	if err != nil || !first {
		t.Fatalf("first hold: first=%v err=%v", first, err)
	}
	h2 := mustHold(t, l, "k", hints.Put, "v2")
	if h2.Version <= h1.Version {
		t.Fatalf("replacing hint's version %d is not above %d", h2.Version, h1.Version)
	}
	got, ok, err := l.Get([]byte("k"))
	if err != nil || !ok || string(got.Value) != "v2" || got.Kind != hints.Put || got.Version != h2.Version {
		t.Fatalf("get = %+v %v %v, want v2 at %d", got, ok, err, h2.Version)
	}
	if l.Count() != 1 || l.Bytes() != int64(len("k")+9+len("v2")) {
		t.Fatalf("count %d bytes %d after a replacement, want 1 and %d", l.Count(), l.Bytes(), len("k")+9+len("v2"))
	}
	mustHold(t, l, "k", hints.Delete, "ignored")
	got, _, _ = l.Get([]byte("k"))
	if got.Kind != hints.Delete || got.Value != nil || l.Bytes() != int64(len("k")+9) {
		t.Fatalf("delete hint = %+v, bytes %d", got, l.Bytes())
	}
	if _, first, _ := l.Hold([]byte("j"), hints.Put, nil); first {
		t.Fatal("a hold while one hint is held reported first")
	}
}

func TestRemoveOnlyIfUnchanged(t *testing.T) {
	l, eng := openLog(t, t.TempDir(), 1<<20)
	defer eng.Close()
	old := mustHold(t, l, "k", hints.Put, "old")
	newer := mustHold(t, l, "k", hints.Put, "newer")
	if removed, err := l.Remove([]byte("k"), old.Version); err != nil || removed {
		t.Fatalf("remove at the replaced version: removed=%v err=%v", removed, err)
	}
	if got, ok, _ := l.Get([]byte("k")); !ok || string(got.Value) != "newer" {
		t.Fatalf("the newer hint went: %+v %v", got, ok)
	}
	if removed, err := l.Remove([]byte("k"), newer.Version); err != nil || !removed {
		t.Fatalf("remove at the current version: removed=%v err=%v", removed, err)
	}
	if _, ok, _ := l.Get([]byte("k")); ok || l.Count() != 0 || l.Bytes() != 0 {
		t.Fatalf("after remove: found=%v count=%d bytes=%d", ok, l.Count(), l.Bytes())
	}
	if removed, err := l.Remove([]byte("absent"), 1); err != nil || removed {
		t.Fatalf("remove of an absent hint: %v %v", removed, err)
	}
}

func TestListPagesInKeyOrder(t *testing.T) {
	l, eng := openLog(t, t.TempDir(), 1<<20)
	defer eng.Close()
	for _, k := range []string{"c", "a", "e", "b", "d"} {
		mustHold(t, l, k, hints.Put, "v"+k)
	}
	var got []string
	var from []byte
	for {
		page, more, err := l.List(from, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 || len(page) == 0 {
			t.Fatalf("page of %d hints, limit 2, and more was said", len(page))
		}
		for _, h := range page {
			if string(h.Value) != "v"+string(h.Key) {
				t.Fatalf("hint %q has value %q", h.Key, h.Value)
			}
			got = append(got, string(h.Key))
		}
		if !more {
			break
		}
		from = append(bytes.Clone(page[len(page)-1].Key), 0)
	}
	if fmt.Sprint(got) != "[a b c d e]" {
		t.Fatalf("listed %v", got)
	}
	if page, more, err := l.List([]byte("f"), 2, 0); err != nil || len(page) != 0 || more {
		t.Fatalf("past the last key: %d hints, more %v, err %v", len(page), more, err)
	}
}

// TestListBoundsPageBytes: a page stops before the hint that would take
// it past maxBytes, but holds at least one, however large.
func TestListBoundsPageBytes(t *testing.T) {
	l, eng := openLog(t, t.TempDir(), 1<<20)
	defer eng.Close()
	big := string(make([]byte, 1000))
	for _, k := range []string{"a", "b", "c"} {
		mustHold(t, l, k, hints.Put, big) // 1 + 9 + 1000 = 1010 bytes each
	}
	page, more, err := l.List(nil, 10, 2020)
	if err != nil || len(page) != 2 || !more {
		t.Fatalf("page of 2020 bytes: %d hints, more %v, err %v; want 2 and more", len(page), more, err)
	}
	page, more, err = l.List(nil, 10, 2019)
	if err != nil || len(page) != 1 || !more {
		t.Fatalf("page of 2019 bytes: %d hints, more %v, err %v; want 1 and more", len(page), more, err)
	}
	page, more, err = l.List([]byte("b"), 10, 1)
	if err != nil || len(page) != 1 || string(page[0].Key) != "b" || !more {
		t.Fatalf("page of 1 byte from b: %d hints, more %v, err %v; want b alone and more", len(page), more, err)
	}
	page, more, err = l.List([]byte("c"), 10, 1)
	if err != nil || len(page) != 1 || more {
		t.Fatalf("page of the last hint: %d hints, more %v, err %v; want 1 and no more", len(page), more, err)
	}
}

func TestBoundRefusesAndRecordsNothing(t *testing.T) {
	l, eng := openLog(t, t.TempDir(), 30)
	defer eng.Close()
	mustHold(t, l, "k", hints.Put, "0123456789") // 1 + 9 + 10 = 20 bytes
	if _, _, err := l.Hold([]byte("j"), hints.Put, []byte("0123456789")); !errors.Is(err, hints.ErrFull) {
		t.Fatalf("hold past the bound: %v, want ErrFull", err)
	}
	if _, ok, _ := l.Get([]byte("j")); ok || l.Count() != 1 || l.Bytes() != 20 {
		t.Fatalf("a refused hold recorded: count %d bytes %d", l.Count(), l.Bytes())
	}
	// Replacing counts only the difference.
	mustHold(t, l, "k", hints.Put, "01234567890123456789")
	if l.Bytes() != 30 {
		t.Fatalf("bytes %d after replacing within the bound, want 30", l.Bytes())
	}
	zero, eng0 := openLog(t, t.TempDir(), 0)
	defer eng0.Close()
	if _, _, err := zero.Hold([]byte("k"), hints.Delete, nil); !errors.Is(err, hints.ErrFull) {
		t.Fatalf("a bound of 0 took a hint: %v", err)
	}
}

func TestReopenRecomputesCountsAndClock(t *testing.T) {
	dir := t.TempDir()
	l, eng := openLog(t, dir, 1<<20)
	future := uint64(1) << 62 // a version far above the wall clock
	l.Clock().Wall = func() int64 { return int64(future) }
	mustHold(t, l, "a", hints.Put, "1")
	mustHold(t, l, "b", hints.Delete, "")
	count, size := l.Count(), l.Bytes()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	l, eng = openLog(t, dir, 1<<20)
	defer eng.Close()
	if l.Count() != count || l.Bytes() != size {
		t.Fatalf("reopened: count %d bytes %d, want %d and %d", l.Count(), l.Bytes(), count, size)
	}
	if h, ok, _ := l.Get([]byte("a")); !ok || string(h.Value) != "1" {
		t.Fatalf("reopened: hint a = %+v %v", h, ok)
	}
	if h := mustHold(t, l, "c", hints.Put, "x"); h.Version <= future+1 {
		t.Fatalf("a hint after reopening has version %d, not above the held %d", h.Version, future+1)
	}
}

func TestClockNeverGoesBack(t *testing.T) {
	wall := int64(1000)
	c := hints.Clock{Wall: func() int64 { return wall }}
	a := c.Now()
	b := c.Now() // same nanosecond
	wall = 500   // the wall clock steps back
	d := c.Now()
	wall = 5000
	e := c.Now()
	if a != 1000 || b != 1001 || d != 1002 || e != 5000 {
		t.Fatalf("clock gave %d %d %d %d, want 1000 1001 1002 5000", a, b, d, e)
	}
}

// TestClockSurvivesReconciledHints: the clock is persisted with every
// hint, so a restart whose wall clock stepped back gives versions above
// those of hints already removed (reconciled), not only of hints held: a
// node's later tentative write must not lose to its own earlier one.
func TestClockSurvivesReconciledHints(t *testing.T) {
	dir := t.TempDir()
	l, eng := openLog(t, dir, 1<<20)
	future := uint64(1) << 62
	l.Clock().Wall = func() int64 { return int64(future) }
	h := mustHold(t, l, "a", hints.Put, "1")
	if ok, err := l.Remove([]byte("a"), h.Version); !ok || err != nil {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	l, eng = openLog(t, dir, 1<<20)
	defer eng.Close()
	if l.Count() != 0 {
		t.Fatalf("%d hints after the only one was removed", l.Count())
	}
	if h2 := mustHold(t, l, "a", hints.Put, "2"); h2.Version <= h.Version {
		t.Fatalf("after a restart a hint took version %d, not above the reconciled %d", h2.Version, h.Version)
	}
}
