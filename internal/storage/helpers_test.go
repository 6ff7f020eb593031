package storage

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
)

// openEngine opens an engine in dir and closes it when the test ends, unless
// the test closed it itself.
func openEngine(t testing.TB, dir string) *Engine {
	t.Helper()
	e, err := Open(dir)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	t.Cleanup(func() { closeQuietly(e) })
	return e
}

// closeQuietly closes e if it is still open.
func closeQuietly(e *Engine) {
	defer func() { _ = recover() }() // pebble panics on a second Close
	_ = e.Close()
}

// reopen closes e and opens the engine in the same directory again.
func reopen(t *testing.T, e *Engine, dataDir string) *Engine {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatalf("close engine: %v", err)
	}
	return openEngine(t, dataDir)
}

func loadLog(t *testing.T, db *pebble.DB, shard uint64) *RaftLog {
	t.Helper()
	l, err := LoadRaftLog(db, ids.ShardID(shard))
	if err != nil {
		t.Fatalf("load raft log of shard %d: %v", shard, err)
	}
	return l
}

// entries builds entries lo..hi (inclusive) at term, each with a payload
// that names it, so a test can tell two versions of an index apart.
func entries(term, lo, hi uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, &pb.Entry{
			Index: new(i), Term: new(term), Type: pb.EntryNormal.Enum(),
			Data: fmt.Appendf(nil, "entry %d term %d", i, term),
		})
	}
	return out
}

// commit runs f on a fresh batch and commits it with Sync.
func commit(t *testing.T, db *pebble.DB, f func(b *pebble.Batch) error) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	if err := f(b); err != nil {
		t.Fatalf("write batch: %v", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func appendEntries(t *testing.T, db *pebble.DB, l *RaftLog, ents []*pb.Entry) {
	t.Helper()
	commit(t, db, func(b *pebble.Batch) error { return l.Append(b, ents) })
}

func truncateLog(t *testing.T, db *pebble.DB, l *RaftLog, index uint64) {
	t.Helper()
	commit(t, db, func(b *pebble.Batch) error { return l.Truncate(b, index) })
}

// checkBounds asserts the log's first and last index.
func checkBounds(t *testing.T, l *RaftLog, first, last uint64) {
	t.Helper()
	f, _ := l.FirstIndex()
	la, _ := l.LastIndex()
	if f != first || la != last {
		t.Fatalf("log bounds: got first %d last %d, want %d %d", f, la, first, last)
	}
}

// checkEntries asserts that Entries(lo, hi, no limit) returns want.
func checkEntries(t *testing.T, l *RaftLog, lo, hi uint64, want []*pb.Entry) {
	t.Helper()
	got, err := l.Entries(lo, hi, 1<<62)
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", lo, hi, err)
	}
	if !entriesEqual(got, want) {
		t.Fatalf("Entries(%d, %d): got %v, want %v", lo, hi, got, want)
	}
}

func entriesEqual(a, b []*pb.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func checkTerm(t *testing.T, l *RaftLog, i, want uint64) {
	t.Helper()
	got, err := l.Term(i)
	if err != nil || got != want {
		t.Fatalf("Term(%d) = %d, %v; want %d", i, got, err, want)
	}
}
