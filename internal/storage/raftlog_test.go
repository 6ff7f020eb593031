package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/keys"
)

// TestRaftLogEmpty protects what raft sees for a replica with nothing stored
// (one created to receive a snapshot): an empty log at index 0.
func TestRaftLogEmpty(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 1)
	hs, cs, err := l.InitialState()
	if err != nil || !raft.IsEmptyHardState(hs) || cs == nil || len(cs.GetVoters()) != 0 {
		t.Fatalf("InitialState = %v, %v, %v; want empty hard state and empty non-nil conf state", hs, cs, err)
	}
	checkBounds(t, l, 1, 0)
	checkTerm(t, l, 0, 0)
	if _, err := l.Term(1); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("Term(1) on empty log: %v, want ErrUnavailable", err)
	}
	if _, err := l.Snapshot(); !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
		t.Fatalf("Snapshot without a snapshot func: %v", err)
	}
}

// TestRaftLogInitialState protects that the stored hard state and conf state
// come back after a reload, and that InitialState returns a copy.
func TestRaftLogInitialState(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	l := loadLog(t, e.db, 3)
	hs := &pb.HardState{Term: new(uint64(7)), Vote: new(uint64(2)), Commit: new(uint64(4))}
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	commit(t, e.db, func(b *pebble.Batch) error {
		if err := SetProto(b, keys.ConfState(3), cs); err != nil {
			return err
		}
		return l.SetHardState(b, hs)
	})
	e = reopen(t, e, dir)
	l = loadLog(t, e.db, 3)
	gotHS, gotCS, err := l.InitialState()
	if err != nil || !proto.Equal(gotHS, hs) || !proto.Equal(gotCS, cs) {
		t.Fatalf("InitialState = %v, %v, %v; want %v, %v", gotHS, gotCS, err, hs, cs)
	}
	gotHS.Term = new(uint64(99))
	if again, _, _ := l.InitialState(); again.GetTerm() != 7 {
		t.Fatalf("mutating the returned hard state changed the log's: term %d", again.GetTerm())
	}
}

// TestHardStateCommitOnlyNotWritten protects the saving and the safety of
// lazily stored commit indexes: a hard state that moves only the commit
// index is recorded (HardState) but not written; one that changes the term
// or the vote is written, whatever its commit index. After a reload the
// stored commit index comes back, and CommitAtLeast raises it to an
// applied index (never lowers it), as a replica does before raft reads it.
func TestHardStateCommitOnlyNotWritten(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	l := loadLog(t, e.db, 3)
	hs := func(term, vote, commit uint64) *pb.HardState {
		return &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
	}
	set := func(h *pb.HardState) (records uint32) {
		t.Helper()
		b := e.db.NewBatch()
		defer b.Close()
		if err := l.SetHardState(b, h); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(l.HardState(), h) {
			t.Fatalf("HardState() = %v after setting %v", l.HardState(), h)
		}
		return b.Count()
	}
	for _, step := range []struct {
		hs    *pb.HardState
		write bool
	}{
		{hs(2, 1, 5), true},   // the first: the stored one is empty
		{hs(2, 1, 6), false},  // commit only
		{hs(2, 1, 9), false},  // commit only
		{hs(3, 0, 9), true},   // a new term
		{hs(3, 2, 10), true},  // a vote (and commit)
		{hs(3, 2, 12), false}, // commit only
	} {
		if n := set(step.hs); (n == 1) != step.write {
			t.Fatalf("setting %v wrote %d records, want written %v", step.hs, n, step.write)
		}
	}
	e = reopen(t, e, dir)
	l = loadLog(t, e.db, 3)
	if got, _, _ := l.InitialState(); !proto.Equal(got, hs(3, 2, 10)) {
		t.Fatalf("reloaded hard state %v, want the last written %v", got, hs(3, 2, 10))
	}
	l.CommitAtLeast(8)
	if got, _, _ := l.InitialState(); got.GetCommit() != 10 {
		t.Fatalf("CommitAtLeast(8) over commit 10 gave %d", got.GetCommit())
	}
	l.CommitAtLeast(12)
	if got, _, _ := l.InitialState(); !proto.Equal(got, hs(3, 2, 12)) {
		t.Fatalf("CommitAtLeast(12) gave %v, want %v", got, hs(3, 2, 12))
	}
	// The raised commit index is not on disk either: the next commit-only
	// change is still not written, a term change is.
	if n := set(hs(3, 2, 13)); n != 0 {
		t.Fatalf("commit-only change after CommitAtLeast wrote %d records", n)
	}
	if n := set(hs(4, 0, 13)); n != 1 {
		t.Fatalf("term change wrote %d records, want 1", n)
	}
}

// TestRaftLogEntriesRange protects Entries' [lo, hi) contract and its
// ErrCompacted and out-of-range errors.
func TestRaftLogEntriesRange(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 1)
	all := entries(1, 1, 10)
	appendEntries(t, e.db, l, all)
	checkEntries(t, l, 3, 7, all[2:6])
	checkEntries(t, l, 1, 11, all)
	checkEntries(t, l, 10, 11, all[9:])
	if got, err := l.Entries(4, 4, 100); err != nil || len(got) != 0 {
		t.Fatalf("Entries(4, 4) = %v, %v; want nothing", got, err)
	}
	if _, err := l.Entries(5, 12, 1<<30); err == nil {
		t.Fatalf("Entries beyond the last index succeeded")
	}
	truncateLog(t, e.db, l, 4)
	for _, lo := range []uint64{1, 4} {
		if _, err := l.Entries(lo, 8, 1<<30); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("Entries(%d, 8) after truncating to 4: %v, want ErrCompacted", lo, err)
		}
	}
	checkEntries(t, l, 5, 11, all[4:])
}

// TestRaftLogEntriesMaxSize protects the size limit: entries up to maxSize
// bytes in total, but always at least one.
func TestRaftLogEntriesMaxSize(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 1)
	all := entries(2, 1, 5)
	appendEntries(t, e.db, l, all)
	size := func(n int) uint64 {
		var s uint64
		for _, x := range all[:n] {
			s += uint64(proto.Size(x))
		}
		return s
	}
	for _, tc := range []struct {
		maxSize uint64
		want    int
	}{
		{0, 1}, {1, 1}, {size(1), 1}, {size(2) - 1, 1}, {size(2), 2},
		{size(3) + 1, 3}, {size(5), 5}, {1 << 40, 5},
	} {
		got, err := l.Entries(1, 6, tc.maxSize)
		if err != nil || !entriesEqual(got, all[:tc.want]) {
			t.Fatalf("Entries(1, 6, %d) returned %d entries (%v), want %d", tc.maxSize, len(got), err, tc.want)
		}
	}
}

// TestRaftLogEntriesNotAliased protects raft's ownership of the returned
// slice: appending to it or altering it must not change what storage returns.
func TestRaftLogEntriesNotAliased(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 1)
	all := entries(1, 1, 4)
	appendEntries(t, e.db, l, all)
	got, err := l.Entries(1, 3, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got, &pb.Entry{Index: new(uint64(3)), Term: new(uint64(9))})
	got[0] = &pb.Entry{Index: new(uint64(1)), Term: new(uint64(9))}
	checkEntries(t, l, 1, 5, all)
}

// TestRaftLogTerm protects Term over the whole log and its error cases.
func TestRaftLogTerm(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 1)
	appendEntries(t, e.db, l, entries(1, 1, 3))
	appendEntries(t, e.db, l, entries(3, 4, 6))
	for i, want := range map[uint64]uint64{0: 0, 1: 1, 3: 1, 4: 3, 6: 3} {
		checkTerm(t, l, i, want)
	}
	if _, err := l.Term(7); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("Term past the last index: %v, want ErrUnavailable", err)
	}
}

// TestRaftLogAppendTruncatesOnConflict protects truncate-on-conflict: an
// append at index i replaces every stored entry from i on, in memory and on
// disk.
func TestRaftLogAppendTruncatesOnConflict(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	l := loadLog(t, e.db, 1)
	old := entries(1, 1, 10)
	appendEntries(t, e.db, l, old)
	repl := entries(2, 5, 6)
	appendEntries(t, e.db, l, repl)
	want := append(append([]*pb.Entry{}, old[:4]...), repl...)
	check := func(l *RaftLog) {
		t.Helper()
		checkBounds(t, l, 1, 6)
		checkEntries(t, l, 1, 7, want)
		checkTerm(t, l, 6, 2)
		checkTerm(t, l, 4, 1)
		if _, err := l.Term(7); !errors.Is(err, raft.ErrUnavailable) {
			t.Fatalf("Term(7) after the log was cut to 6: %v", err)
		}
	}
	check(l)
	e = reopen(t, e, dir)
	check(loadLog(t, e.db, 1))
}

// TestRaftLogAppendConflictAfterReopen protects truncate-on-conflict when
// the replaced entries were loaded from disk rather than appended in this
// process, including the replacement of the last entry only.
func TestRaftLogAppendConflictAfterReopen(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	appendEntries(t, e.db, loadLog(t, e.db, 1), entries(1, 1, 10))
	e = reopen(t, e, dir)
	l := loadLog(t, e.db, 1)
	appendEntries(t, e.db, l, entries(4, 3, 3))
	checkBounds(t, l, 1, 3)
	e = reopen(t, e, dir)
	l = loadLog(t, e.db, 1)
	checkBounds(t, l, 1, 3)
	checkTerm(t, l, 3, 4)
	appendEntries(t, e.db, l, entries(5, 3, 3))
	e = reopen(t, e, dir)
	l = loadLog(t, e.db, 1)
	checkBounds(t, l, 1, 3)
	checkEntries(t, l, 1, 4, append(entries(1, 1, 2), entries(5, 3, 3)...))
}

// TestRaftLogAppendRejectsBadRanges protects the log from holes: appends
// that skip ahead, start in the compacted prefix, or are not contiguous.
func TestRaftLogAppendRejectsBadRanges(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 1)
	appendEntries(t, e.db, l, entries(1, 1, 5))
	truncateLog(t, e.db, l, 2)
	gappy := append(entries(1, 6, 6), entries(1, 8, 8)...)
	for name, ents := range map[string][]*pb.Entry{
		"gap after last":     entries(1, 7, 8),
		"inside compacted":   entries(2, 2, 3),
		"non-contiguous run": gappy,
	} {
		b := e.db.NewBatch()
		if err := l.Append(b, ents); err == nil {
			t.Errorf("%s: Append succeeded", name)
		}
		b.Close()
	}
	checkBounds(t, l, 3, 5)
}

// TestRaftLogTruncate protects compaction: FirstIndex moves, Term of the
// entry before it keeps working, and all of it survives a reopen.
func TestRaftLogTruncate(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	l := loadLog(t, e.db, 1)
	appendEntries(t, e.db, l, entries(1, 1, 3))
	appendEntries(t, e.db, l, entries(2, 4, 8))
	truncateLog(t, e.db, l, 4)
	truncateLog(t, e.db, l, 2) // at or below the truncated index: no-op
	check := func(l *RaftLog) {
		t.Helper()
		checkBounds(t, l, 5, 8)
		checkTerm(t, l, 4, 2)
		if idx, term := l.Truncated(); idx != 4 || term != 2 {
			t.Fatalf("Truncated() = %d, %d; want 4, 2", idx, term)
		}
		if _, err := l.Term(3); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("Term(3) after truncating to 4: %v, want ErrCompacted", err)
		}
		checkEntries(t, l, 5, 9, entries(2, 5, 8))
	}
	check(l)
	e = reopen(t, e, dir)
	check(loadLog(t, e.db, 1))
	if n := countKeys(t, e.db, keys.LogEntry(1, 0), keys.LogEntry(1, 5)); n != 0 {
		t.Fatalf("%d truncated entries still stored", n)
	}
	b := e.db.NewBatch()
	defer b.Close()
	if err := loadLog(t, e.db, 1).Truncate(b, 9); err == nil {
		t.Fatalf("truncating past the last index succeeded")
	}
}

// TestRaftLogTruncateWholeLog protects the state where every entry was
// compacted: the log is empty at the truncated index and can grow again.
func TestRaftLogTruncateWholeLog(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	l := loadLog(t, e.db, 1)
	appendEntries(t, e.db, l, entries(3, 1, 6))
	truncateLog(t, e.db, l, 6)
	e = reopen(t, e, dir)
	l = loadLog(t, e.db, 1)
	checkBounds(t, l, 7, 6)
	checkTerm(t, l, 6, 3)
	appendEntries(t, e.db, l, entries(4, 7, 8))
	checkEntries(t, l, 7, 9, entries(4, 7, 8))
}

// TestRaftLogShardsIsolated protects shards sharing one database from each
// other: appends, truncations and conflicts stay within one shard's keys.
func TestRaftLogShardsIsolated(t *testing.T) {
	e := openEngine(t, t.TempDir())
	a, b := loadLog(t, e.db, 1), loadLog(t, e.db, 2)
	appendEntries(t, e.db, a, entries(1, 1, 5))
	appendEntries(t, e.db, b, entries(7, 1, 3))
	truncateLog(t, e.db, a, 4)
	appendEntries(t, e.db, a, entries(2, 5, 5))
	b = loadLog(t, e.db, 2)
	checkBounds(t, b, 1, 3)
	checkEntries(t, b, 1, 4, entries(7, 1, 3))
}

func countKeys(t *testing.T, r pebble.Reader, lo, hi []byte) int {
	t.Helper()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// encodeEntry is how a log entry is stored (setEntry builds it in place).
func encodeEntry(e *pb.Entry) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+proto.Size(e)), e.GetTerm())
	b, err := proto.MarshalOptions{}.MarshalAppend(b, e)
	if err != nil {
		panic(err)
	}
	return b
}

// TestSetEntryWritesEncodedEntry protects setEntry, which builds a log
// entry's key and value in the batch itself: what it stores is the
// entry's key and term-prefixed encoding, for entries of every size (no
// data, large data, a conf change).
func TestSetEntryWritesEncodedEntry(t *testing.T) {
	e := openEngine(t, t.TempDir())
	l := loadLog(t, e.db, 5)
	ents := entries(3, 1, 4)
	ents[1].Data = make([]byte, 200_000)
	ents[2].Type = pb.EntryConfChangeV2.Enum()
	appendEntries(t, e.db, l, ents)
	for _, ent := range ents {
		v, closer, err := e.db.Get(keys.LogEntry(5, ent.GetIndex()))
		if err != nil {
			t.Fatalf("entry %d: %v", ent.GetIndex(), err)
		}
		if !bytes.Equal(v, encodeEntry(ent)) {
			t.Fatalf("entry %d stored as %x, want %x", ent.GetIndex(), v[:min(len(v), 40)], encodeEntry(ent)[:min(len(v), 40)])
		}
		closer.Close()
	}
}

// BenchmarkRaftLogAppend is the persist of a loop turn's new entries on
// every replica: 32 entries of 300 bytes (a put's command) per batch.
func BenchmarkRaftLogAppend(b *testing.B) {
	e := openEngine(b, b.TempDir())
	l := &RaftLog{db: e.db, shard: 5, cache: entryCache{maxBytes: entryCacheBytes}}
	next := uint64(1)
	batch := e.db.NewBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 32 {
		b.StopTimer() // the entries are raft's, not the append's: not counted
		ents := make([]*pb.Entry, 32)
		for j := range ents {
			ents[j] = &pb.Entry{Term: new(uint64(1)), Index: new(next), Type: pb.EntryNormal.Enum(), Data: make([]byte, 300)}
			next++
		}
		b.StartTimer()
		if err := l.Append(batch, ents); err != nil {
			b.Fatal(err)
		}
		batch.Reset()
	}
}
