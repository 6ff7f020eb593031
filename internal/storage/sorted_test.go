package storage

// The experiment of issue 14 that was measured and not kept: committing a
// loop turn's batch in key order (BenchmarkTurnCommit; docs/benchmarks.md,
// "Memtable inserts in key order"). It lives with the benchmark so that the
// measurement can be repeated.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble applies a batch to its memtable record by record, in batch order,
// through one skiplist Inserter. The Inserter remembers where its last
// insert went and skips the search only when the next key lands right after
// it, with no older node in between; any other key costs a full search from
// the top of a skiplist of hundreds of thousands of nodes. The idea tried
// here: commit a loop turn's writes in key order so that more inserts land
// next to the previous one.
//
// Why it cannot pay (and measured so): almost every key of a turn already
// has older versions in the memtable (hard state, applied state, clock,
// session records, user values of a 10,000-key workload), and a new version
// goes in front of them, so the next key of the turn, however close in key
// order, is never adjacent to it. The only keys that are adjacent are a
// replica's new log entries, and Persist already writes those as a run.
// Sorting adds its own cost (~150 ns a record) and saves no search.

// sortedRecord is one point write of a batch, pointing into its Repr.
type sortedRecord struct {
	kind       pebble.InternalKeyKind
	key, value []byte
}

// commitSorted commits b's writes, like Commit, but in key order: it copies
// them, sorted, into a fresh batch and commits that one. The resulting
// state is exactly b's: where a key is written more than once only its last
// write is kept (a later Set or Delete of a key supersedes an earlier one
// wholly), and Delete tombstones are kept. When ordering matters beyond
// that — a range deletion (it covers only the point writes before it), or
// any kind other than Set and Delete — b is committed as it is. b is left
// as it was; the caller still closes it.
func commitSorted(e *Engine, b *pebble.Batch, sync bool) error {
	recs, ok := sortedRecords(b)
	if !ok {
		return Commit(b, sync)
	}
	sb := e.db.NewBatchWithSize(len(b.Repr()))
	defer sb.Close()
	for _, r := range recs {
		var err error
		if r.kind == pebble.InternalKeyKindSet {
			err = sb.Set(r.key, r.value, nil)
		} else {
			err = sb.Delete(r.key, nil)
		}
		if err != nil {
			return err
		}
	}
	return Commit(sb, sync)
}

// sortedRecords returns b's point writes in key order, the last write of
// each key only; ok is false when b holds anything whose effect depends on
// its place in the batch (range deletions, range keys, merges, single
// deletes, log data) or cannot be read.
func sortedRecords(b *pebble.Batch) (recs []sortedRecord, ok bool) {
	recs = make([]sortedRecord, 0, b.Count())
	for r := b.Reader(); ; {
		kind, key, value, more, err := r.Next()
		if err != nil {
			return nil, false
		}
		if !more {
			break
		}
		if kind != pebble.InternalKeyKindSet && kind != pebble.InternalKeyKindDelete {
			return nil, false
		}
		recs = append(recs, sortedRecord{kind, key, value})
	}
	// Stable: the writes of one key stay in batch order, so the last of
	// each run of equal keys is the one that wins.
	slices.SortStableFunc(recs, func(a, b sortedRecord) int { return bytes.Compare(a.key, b.key) })
	out := recs[:0]
	for i, r := range recs {
		if i+1 < len(recs) && bytes.Equal(r.key, recs[i+1].key) {
			continue // a later write of the same key supersedes this one
		}
		out = append(out, r)
	}
	return out, true
}

// TestCommitSortedKeepsBatchSemantics commits random batches (repeated
// keys, deletes, and sometimes a range deletion) both as they are and with
// commitSorted into two engines, and compares everything they hold: the
// benchmark's key-order variant must write the same state.
func TestCommitSortedKeepsBatchSemantics(t *testing.T) {
	a, b := openEngine(t, t.TempDir()), openEngine(t, t.TempDir())
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() []byte { return fmt.Appendf(nil, "k%02d", rng.IntN(40)) }
	fellBack := 0
	for round := range 200 {
		ba, bb := a.NewIndexedBatch(), b.NewIndexedBatch()
		for range 1 + rng.IntN(30) {
			k, v, r := key(), fmt.Appendf(nil, "v%d", round), rng.IntN(10)
			for _, w := range []*pebble.Batch{ba, bb} {
				var err error
				switch {
				case r < 6:
					err = w.Set(k, v, nil)
				case r < 9:
					err = w.Delete(k, nil)
				case round%4 == 0:
					lo, hi := k, append(slices.Clone(k), 0xff)
					err = w.DeleteRange(lo, hi, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, ok := sortedRecords(bb); !ok {
			fellBack++
		}
		if err := Commit(ba, false); err != nil {
			t.Fatal(err)
		}
		if err := commitSorted(b, bb, false); err != nil {
			t.Fatal(err)
		}
		ba.Close()
		bb.Close()
		if da, db := pairs(t, a), pairs(t, b); da != db {
			t.Fatalf("round %d: batch order gave\n%s\nkey order gave\n%s", round, da, db)
		}
	}
	if fellBack == 0 {
		t.Fatal("no batch held a range deletion: the fallback was never tested")
	}
}

// pairs is every visible pair of e, in order.
func pairs(t *testing.T, e *Engine) string {
	it, err := e.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var s []byte
	for it.First(); it.Valid(); it.Next() {
		s = fmt.Appendf(s, "%s=%s ", it.Key(), it.Value())
	}
	return string(s)
}
