package storage

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble applies a batch to its memtable record by record, in batch order,
// through one skiplist Inserter. The Inserter remembers where its last
// insert went and skips the search when the next key lands right after it;
// any other key costs a full search from the top of a skiplist of hundreds
// of thousands of nodes, a chain of cache misses (about 3 µs). A loop turn's
// batch is written replica by replica, each replica's log entries then its
// state machine's writes, so almost every record pays the full search.
//
// CommitSorted commits the same writes in key order instead, which is what
// the Inserter is fastest at: keys that are neighbours in the memtable are
// inserted one after the other, and the searches of keys near each other
// walk the same upper skiplist nodes while they are still in cache.

// sortedRecord is one point write of a batch, pointing into its Repr.
type sortedRecord struct {
	kind       pebble.InternalKeyKind
	key, value []byte
}

// CommitSorted commits b's writes, like Commit, but in key order: it copies
// them, sorted, into a fresh batch and commits that one. The resulting
// state is exactly b's: where a key is written more than once only its last
// write is kept (a later Set or Delete of a key supersedes an earlier one
// wholly), and Delete tombstones are kept. When ordering matters beyond
// that — a range deletion (it covers only the point writes before it), or
// any kind other than Set and Delete — b is committed as it is. b is left
// as it was; the caller still closes it.
func (e *Engine) CommitSorted(b *pebble.Batch, sync bool) error {
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
