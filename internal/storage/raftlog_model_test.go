package storage

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
)

// TestRaftLogMatchesMemoryStorage protects RaftLog's raft.Storage behaviour
// as a whole: after every step of a random sequence of appends (with
// conflicts), truncations and reopens it must answer exactly like raft's own
// MemoryStorage. The seed is logged so a failure can be replayed.
func TestRaftLogMatchesMemoryStorage(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RAFTLOG_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with RAFTLOG_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	dir := t.TempDir()
	e := openEngine(t, dir)
	l := loadLog(t, e.db, 5)
	ms := raft.NewMemoryStorage()
	term := uint64(1)
	for step := 0; step < 300; step++ {
		first, last := mustBounds(t, ms)
		switch op := rng.IntN(10); {
		case op < 6: // append at a random point in [first, last+1]
			term++
			lo := first + rng.Uint64N(last-first+2)
			ents := entries(term, lo, lo+rng.Uint64N(5))
			appendEntries(t, e.db, l, ents)
			if err := ms.Append(ents); err != nil {
				t.Fatal(err)
			}
		case op < 9 && last >= first: // compact to a random index in the log
			i := first + rng.Uint64N(last-first+1)
			truncateLog(t, e.db, l, i)
			if err := ms.Compact(i); err != nil {
				t.Fatal(err)
			}
		default:
			e = reopen(t, e, dir)
			l = loadLog(t, e.db, 5)
		}
		compareStorage(t, step, rng, l, ms)
	}
}

func mustBounds(t *testing.T, s raft.Storage) (first, last uint64) {
	t.Helper()
	first, err1 := s.FirstIndex()
	last, err2 := s.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return first, last
}

// compareStorage checks bounds, every term and a few random Entries calls.
func compareStorage(t *testing.T, step int, rng *rand.Rand, l *RaftLog, ms *raft.MemoryStorage) {
	t.Helper()
	first, last := mustBounds(t, ms)
	gotFirst, gotLast := mustBounds(t, l)
	if gotFirst != first || gotLast != last {
		t.Fatalf("step %d: bounds (%d, %d), model (%d, %d)", step, gotFirst, gotLast, first, last)
	}
	for i := first - min(first, 2); i <= last+1; i++ {
		want, wantErr := ms.Term(i)
		got, err := l.Term(i)
		if got != want || !errors.Is(err, wantErr) {
			t.Fatalf("step %d: Term(%d) = %d, %v; model %d, %v", step, i, got, err, want, wantErr)
		}
	}
	if last < first {
		return
	}
	for range 3 {
		lo := first + rng.Uint64N(last-first+1)
		hi := lo + 1 + rng.Uint64N(last-lo+1)
		maxSize := rng.Uint64N(200)
		want, err1 := ms.Entries(lo, hi, maxSize)
		got, err2 := l.Entries(lo, hi, maxSize)
		if err := errors.Join(err1, err2); err != nil || !entriesEqual(got, want) {
			t.Fatalf("step %d: Entries(%d, %d, %d) = %v, model %v (err %v)", step, lo, hi, maxSize, got, want, err)
		}
	}
	if _, err := l.Entries(first-1, last+1, 1<<30); first > 1 && !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("step %d: Entries from the compacted index %d: %v", step, first-1, err)
	}
}
