package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// fillShard stores a replica of shard the way a running node would: a log
// with a truncated prefix, a hard state, applied state and user data.
func fillShard(t *testing.T, db *pebble.DB, shard uint64, tag string) {
	t.Helper()
	l := loadLog(t, db, shard)
	_, last := mustBounds(t, l)
	appendEntries(t, db, l, entries(2, last+1, last+12))
	truncateLog(t, db, l, last+3)
	commit(t, db, func(b *pebble.Batch) error {
		for i := range 5 {
			k := keys.User(shard, fmt.Appendf(nil, "%s-%d", tag, i))
			if err := b.Set(k, []byte(tag), nil); err != nil {
				return err
			}
		}
		if err := SetProto(b, keys.Applied(shard), &storepb.AppliedState{Index: 10, Term: 2}); err != nil {
			return err
		}
		if err := SetProto(b, keys.Session(shard, 77), &storepb.SessionRecord{Seq: 3}); err != nil {
			return err
		}
		return l.SetHardState(b, &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(10))})
	})
}

// dump returns every pair stored under [lo, hi).
func dump(t *testing.T, r pebble.Reader, lo, hi []byte) map[string]string {
	t.Helper()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func dumpShard(t *testing.T, r pebble.Reader, shard uint64) map[string]string {
	t.Helper()
	lo, hi := keys.ShardSpan(shard)
	return dump(t, r, lo, hi)
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// writeSST writes pairs (already sorted) into a new SST in the aux dir.
func writeSST(t *testing.T, e *Engine, name string, pairs [][2][]byte) string {
	t.Helper()
	w, err := e.NewSSTWriter(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if err := w.Set(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if w.Count() != len(pairs) {
		t.Fatalf("SSTWriter.Count() = %d, want %d", w.Count(), len(pairs))
	}
	return w.Path()
}

// stage writes pairs (already sorted) into a staged snapshot of shard, as a
// snapshot receiver does.
func stage(t *testing.T, e *Engine, shard uint64, pairs [][2][]byte) *StagedSnapshot {
	t.Helper()
	w, err := e.NewSnapshotWriter(ids.ShardID(shard))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if err := w.Set(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	s, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// snapshotPairs is the state span of shard 7 in the snapshot the tests install.
func snapshotPairs(t *testing.T) [][2][]byte {
	t.Helper()
	applied, err := proto.Marshal(&storepb.AppliedState{Index: 40, Term: 6})
	if err != nil {
		t.Fatal(err)
	}
	return [][2][]byte{
		{keys.Applied(7), applied},
		{keys.Session(7, 5), []byte{}},
		{keys.User(7, []byte("new-a")), []byte("A")},
		{keys.User(7, []byte("new-b")), []byte("B")},
	}
}

// TestInstallSnapshotReplacesShard protects snapshot installation: the
// shard's old log, hard state and data are replaced by the snapshot's data,
// hard state and truncated state, other shards and node-local keys are
// untouched, and all of it survives a reopen.
func TestInstallSnapshotReplacesShard(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	for _, s := range []uint64{6, 7, 8} {
		fillShard(t, e.db, s, fmt.Sprintf("old%d", s))
	}
	if err := e.db.Flush(); err != nil { // some of the old state in SSTs...
		t.Fatal(err)
	}
	fillShard(t, e.db, 7, "recent") // ...and some only in the memtable
	hosted := binary.BigEndian.AppendUint64(nil, 3)
	commit(t, e.db, func(b *pebble.Batch) error { return b.Set(keys.Hosted(7), hosted, nil) })
	before6, before8 := dumpShard(t, e.db, 6), dumpShard(t, e.db, 8)

	pairs := snapshotPairs(t)
	staged := stage(t, e, 7, pairs)
	hs := &pb.HardState{Term: new(uint64(9)), Vote: new(uint64(2)), Commit: new(uint64(40))}
	if err := e.InstallSnapshot(7, staged, hs, 40, 6); err != nil {
		t.Fatalf("InstallSnapshot: %v", err)
	}
	check := func(e *Engine) {
		t.Helper()
		checkInstalled(t, e.db, pairs, hs)
		if !sameMap(dumpShard(t, e.db, 6), before6) || !sameMap(dumpShard(t, e.db, 8), before8) {
			t.Fatalf("installing shard 7 changed its neighbours")
		}
		if v, closer, err := e.db.Get(keys.Hosted(7)); err != nil || !bytes.Equal(v, hosted) {
			t.Fatalf("node-local key of shard 7 lost: %v", err)
		} else {
			closer.Close()
		}
	}
	check(e)
	e = reopen(t, e, dir)
	check(e)
}

// checkInstalled asserts shard 7 holds exactly the snapshot's state, the
// hard state hs and a log truncated at (40, 6).
func checkInstalled(t *testing.T, db *pebble.DB, pairs [][2][]byte, hs *pb.HardState) {
	t.Helper()
	lo, hi := keys.StateSpan(7)
	want := map[string]string{}
	for _, p := range pairs {
		want[string(p[0])] = string(p[1])
	}
	if got := dump(t, db, lo, hi); !sameMap(got, want) {
		t.Fatalf("state of shard 7 after install: %d keys %q, want %q", len(got), got, want)
	}
	rlo, rhi := keys.RaftSpan(7)
	if n := countKeys(t, db, rlo, rhi); n != 2 {
		t.Fatalf("shard 7 has %d raft keys after install, want hard state and truncated state only", n)
	}
	l := loadLog(t, db, 7)
	if idx, term := l.Truncated(); idx != 40 || term != 6 {
		t.Fatalf("truncated state after install: (%d, %d), want (40, 6)", idx, term)
	}
	checkBounds(t, l, 41, 40)
	checkTerm(t, l, 40, 6)
	// Compared by value: the log reports every field set (0 for a vote
	// hs leaves unset), which raft reads the same.
	if got, _, err := l.InitialState(); err != nil || got.GetTerm() != hs.GetTerm() || got.GetVote() != hs.GetVote() || got.GetCommit() != hs.GetCommit() {
		t.Fatalf("hard state after install: %v (%v), want %v", got, err, hs)
	}
}

// TestInstallSnapshotFreshReplica protects the common case of a replica
// created empty to receive its first snapshot, and that the log can grow
// from the snapshot index afterwards.
func TestInstallSnapshotFreshReplica(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 8, "other")
	pairs := snapshotPairs(t)
	hs := &pb.HardState{Term: new(uint64(6)), Commit: new(uint64(40))}
	if err := e.InstallSnapshot(7, stage(t, e, 7, pairs), hs, 40, 6); err != nil {
		t.Fatal(err)
	}
	checkInstalled(t, e.db, pairs, hs)
	l := loadLog(t, e.db, 7)
	appendEntries(t, e.db, l, entries(6, 41, 42))
	checkEntries(t, l, 41, 43, entries(6, 41, 42))
	if names := auxFiles(t, e); len(names) != 0 {
		t.Fatalf("aux dir after install holds %v; the ingested files should be gone", names)
	}
}

func auxFiles(t *testing.T, e *Engine) []string {
	t.Helper()
	ents, err := os.ReadDir(e.AuxDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ent := range ents {
		names = append(names, ent.Name())
	}
	return names
}

// TestSSTWriterOrder protects the writer's key-order check and Abort.
func TestSSTWriterOrder(t *testing.T) {
	e := openEngine(t, t.TempDir())
	w, err := e.NewSSTWriter("x.sst")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Set([]byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if err := w.Set([]byte(k), nil); err == nil {
			t.Fatalf("Set(%q) after \"b\" succeeded", k)
		}
	}
	w.Abort()
	if _, err := os.Stat(filepath.Join(e.AuxDir(), "x.sst")); !os.IsNotExist(err) {
		t.Fatalf("aborted SST still exists: %v", err)
	}
}

// TestOpenClearsAuxDir protects against snapshot files left by a crash
// piling up: Open empties the aux dir.
func TestOpenClearsAuxDir(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	writeSST(t, e, "left.sst", [][2][]byte{{[]byte("k"), []byte("v")}})
	e = reopen(t, e, dir)
	if names := auxFiles(t, e); len(names) != 0 {
		t.Fatalf("aux dir after reopen holds %v", names)
	}
}

// TestStagedSnapshotSplitsFiles (found in review): a received snapshot was
// staged in one SSTable however long its stream, and Pebble's writer keeps
// four bytes of filter hash per key in memory until the table is finished:
// a stream of tiny pairs (a big shard, or a sender that never stops) grew
// the receiver's heap by about a fifth of the bytes it sent, without
// bound. The writer now starts a new file every stagedFileKeys pairs (or
// stagedFileBytes), so what it holds is bounded by one file's; the files
// install together, and none is left behind.
func TestStagedSnapshotSplitsFiles(t *testing.T) {
	defer func(k, b int) { stagedFileKeys, stagedFileBytes = k, b }(stagedFileKeys, stagedFileBytes)
	stagedFileKeys = 3
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "old")
	pairs := snapshotPairs(t)
	for i := range 8 {
		pairs = append(pairs, [2][]byte{keys.User(7, fmt.Appendf(nil, "z%02d", i)), []byte("Z")})
	}
	staged := stage(t, e, 7, pairs)
	if names := auxFiles(t, e); len(names) != 4 {
		t.Fatalf("%d pairs staged at most 3 to a file in %d files %v, want 4", len(pairs), len(names), names)
	}
	hs := &pb.HardState{Term: new(uint64(6)), Commit: new(uint64(40))}
	if err := e.InstallSnapshot(7, staged, hs, 40, 6); err != nil {
		t.Fatal(err)
	}
	checkInstalled(t, e.db, pairs, hs)
	if names := auxFiles(t, e); len(names) != 0 {
		t.Fatalf("aux dir after install holds %v", names)
	}

	stagedFileKeys, stagedFileBytes = 1<<20, 10 // one pair to a file, by size
	staged = stage(t, e, 7, pairs)
	if names := auxFiles(t, e); len(names) != len(pairs) {
		t.Fatalf("%d pairs of more than 10 bytes staged in %d files, want one each", len(pairs), len(names))
	}
	staged.Discard()
	w, err := e.NewSnapshotWriter(7)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if err := w.Set(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Set(pairs[2][0], nil); err == nil {
		t.Fatal("a key out of order after the files rotated was accepted")
	}
	w.Abort()
	if names := auxFiles(t, e); len(names) != 0 {
		t.Fatalf("aux dir after Discard and Abort holds %v", names)
	}
}

// TestStagedSnapshotsCounted (hsnapcap): the transport refuses a snapshot
// stream while MaxStagedSnapshots received snapshots have files on disk,
// which it learns from StagedSnapshots: a writer counts from its start, a
// staged snapshot until it is installed or discarded, each once however
// often it is discarded or aborted.
func TestStagedSnapshotsCounted(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "old")
	want := func(n int, when string) {
		t.Helper()
		if got := e.StagedSnapshots(); got != n {
			t.Fatalf("%d staged snapshots %s, want %d", got, when, n)
		}
	}
	w, err := e.NewSnapshotWriter(7)
	if err != nil {
		t.Fatal(err)
	}
	want(1, "with a writer open")
	w.Abort()
	w.Abort()
	want(0, "after Abort, twice")
	a, b := stage(t, e, 7, snapshotPairs(t)), stage(t, e, 7, snapshotPairs(t))
	want(2, "with two staged")
	a.Discard()
	a.Discard()
	want(1, "after one was discarded twice")
	hs := &pb.HardState{Term: new(uint64(6)), Commit: new(uint64(40))}
	if err := e.InstallSnapshot(7, b, hs, 40, 6); err != nil {
		t.Fatal(err)
	}
	b.Discard() // the replica drops what it staged after installing
	want(0, "after the other was installed")
	if _, err := e.StagingSpace(); err != nil {
		t.Fatalf("free space of a data dir on disk: %v", err)
	}
}

// TestSnapshotReservation (review of hsnapcap): the transport reserves a
// stream's place among the staged snapshots in its check, before the
// writer starts, so concurrent streams cannot all pass a count read before
// any of them raised it. Reservations past max are refused, and however
// many goroutines reserve at once exactly max succeed; a reservation's
// count passes to its writer or goes back with Release, once.
func TestSnapshotReservation(t *testing.T) {
	e := openEngine(t, t.TempDir())
	const max, tries = 3, 32
	var wg sync.WaitGroup
	got := make(chan *SnapshotReservation, tries)
	for range tries {
		wg.Go(func() {
			if r, _ := e.ReserveSnapshot(max); r != nil {
				got <- r
			}
		})
	}
	wg.Wait()
	close(got)
	var rs []*SnapshotReservation
	for r := range got {
		rs = append(rs, r)
	}
	if len(rs) != max || e.StagedSnapshots() != max {
		t.Fatalf("%d of %d concurrent reservations taken, %d counted; want %d", len(rs), tries, e.StagedSnapshots(), max)
	}
	if r, n := e.ReserveSnapshot(max); r != nil || n != max {
		t.Fatalf("a reservation past %d: %v, count %d", max, r, n)
	}
	w, err := rs[0].NewWriter(7)
	if err != nil {
		t.Fatal(err)
	}
	rs[0].Release() // the writer has the count
	if _, err := rs[0].NewWriter(7); err == nil {
		t.Fatal("a second writer from one reservation")
	}
	rs[1].Release()
	rs[1].Release()
	if n := e.StagedSnapshots(); n != 2 {
		t.Fatalf("%d counted after a writer took one and one was released twice; want 2", n)
	}
	w.Abort()
	rs[2].Release()
	if n := e.StagedSnapshots(); n != 0 {
		t.Fatalf("%d counted once all were done; want 0", n)
	}
}
