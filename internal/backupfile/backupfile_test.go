package backupfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

type entry struct {
	shard uint64
	rec   Record
}

// writeSample writes two shards (the second one after an aborted attempt)
// and returns the path and the records it holds, in file order.
func writeSample(t testing.TB) (string, []entry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.bak")
	w, err := Create(path, Header{ClusterID: 42, Created: time.UnixMilli(1_700_000_000_000)})
	if err != nil {
		t.Fatal(err)
	}
	var want []entry
	add := func(shard uint64, n int) {
		for i := range n {
			r := Record{Key: []byte(fmt.Sprintf("s%d-k%03d", shard, i)), Value: bytes.Repeat([]byte{byte(i)}, i)}
			if i%3 == 0 {
				r.ExpireAtMs = 1_800_000_000_000 + int64(i)
			}
			must(t, w.Add(r))
			want = append(want, entry{shard, r})
		}
	}
	must(t, w.BeginShard(Shard{ID: 1, StartHash: 0, EndHash: 99, AppliedIndex: 7}))
	add(1, 50)
	must(t, w.EndShard())
	// A failed read of shard 2 is dropped and read again.
	must(t, w.BeginShard(Shard{ID: 2, StartHash: 100, EndHash: ^uint64(0), AppliedIndex: 8}))
	must(t, w.Add(Record{Key: []byte("half-read"), Value: []byte("x")}))
	must(t, w.AbortShard())
	must(t, w.BeginShard(Shard{ID: 2, StartHash: 100, EndHash: ^uint64(0), AppliedIndex: 9}))
	add(2, 30)
	must(t, w.EndShard())
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 80 || len(sum.Shards) != 2 {
		t.Fatalf("writer summary %+v", sum)
	}
	if left, err := filepath.Glob(path + ".partial*"); err != nil || len(left) != 0 {
		t.Fatalf("partial file left behind: %v %v", left, err)
	}
	return path, want
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	path, want := writeSample(t)
	var got []entry
	sum, err := Read(path, func(s Shard, r Record) error {
		got = append(got, entry{s.ID, Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), ExpireAtMs: r.ExpireAtMs}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ClusterID != 42 || sum.Version != Version || sum.Created.UnixMilli() != 1_700_000_000_000 || sum.Records != 80 {
		t.Fatalf("summary %+v", sum)
	}
	wantShards := []Shard{{ID: 1, StartHash: 0, EndHash: 99, AppliedIndex: 7, Records: 50}, {ID: 2, StartHash: 100, EndHash: ^uint64(0), AppliedIndex: 9, Records: 30}}
	if fmt.Sprint(sum.Shards) != fmt.Sprint(wantShards) {
		t.Fatalf("shards %+v, want %+v", sum.Shards, wantShards)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records read, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].shard != want[i].shard || !bytes.Equal(got[i].rec.Key, want[i].rec.Key) ||
			!bytes.Equal(got[i].rec.Value, want[i].rec.Value) || got[i].rec.ExpireAtMs != want[i].rec.ExpireAtMs {
			t.Fatalf("record %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestEmptyBackup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.bak")
	w, err := Create(path, Header{ClusterID: 1, Created: time.Now()})
	must(t, err)
	must(t, w.BeginShard(Shard{ID: 1}))
	must(t, w.EndShard())
	_, err = w.Close()
	must(t, err)
	sum, err := Verify(path)
	must(t, err)
	if sum.Records != 0 || len(sum.Shards) != 1 {
		t.Fatalf("summary %+v", sum)
	}
}

// TestEveryCorruptByteIsRefused flips each byte of a small file in turn:
// every flip must be refused before any record is handed out.
func TestEveryCorruptByteIsRefused(t *testing.T) {
	path, _ := writeSample(t)
	orig, err := os.ReadFile(path)
	must(t, err)
	bad := filepath.Join(t.TempDir(), "bad.bak")
	for i := range orig {
		b := bytes.Clone(orig)
		b[i] ^= 0x20
		must(t, os.WriteFile(bad, b, 0o644))
		calls := 0
		_, err := Read(bad, func(Shard, Record) error { calls++; return nil })
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: err %v, want ErrCorrupt", i, err)
		}
		if calls != 0 {
			t.Fatalf("byte %d flipped: %d records handed out before the error", i, calls)
		}
	}
}

func TestCorruptValueNamesDigest(t *testing.T) {
	path, _ := writeSample(t)
	b, err := os.ReadFile(path)
	must(t, err)
	i := bytes.Index(b, []byte("s2-k010"))
	b[i+len("s2-k010")+2] ^= 0xff // a byte of the record's value
	must(t, os.WriteFile(path, b, 0o644))
	_, err = Verify(path)
	if err == nil || !strings.Contains(err.Error(), "SHA-256 mismatch") {
		t.Fatalf("err %v, want a SHA-256 mismatch", err)
	}
}

func TestTruncatedFileIsRefused(t *testing.T) {
	path, _ := writeSample(t)
	orig, err := os.ReadFile(path)
	must(t, err)
	for _, n := range []int{0, 5, headerLen, headerLen + 10, len(orig) / 2, len(orig) - 33, len(orig) - 1} {
		must(t, os.WriteFile(path, orig[:n], 0o644))
		_, err := Verify(path)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: err %v, want ErrCorrupt", n, len(orig), err)
		}
	}
	must(t, os.WriteFile(path, append(bytes.Clone(orig), 0), 0o644))
	if _, err := Verify(path); err == nil || !strings.Contains(err.Error(), "follow the trailer") {
		t.Fatalf("a byte after the trailer: err %v", err)
	}
}

func TestNotABackup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	must(t, os.WriteFile(path, []byte(strings.Repeat("hello world ", 10)), 0o644))
	if _, err := Verify(path); err == nil || !strings.Contains(err.Error(), "not a Concord backup") {
		t.Fatalf("err %v", err)
	}
}

func TestStage(t *testing.T) {
	path, _ := writeSample(t)
	dir := filepath.Join(t.TempDir(), "new")
	sum, err := Stage(path, dir)
	must(t, err)
	if sum.Records != 80 {
		t.Fatalf("summary %+v", sum)
	}
	if _, err := Verify(filepath.Join(dir, PendingName)); err != nil {
		t.Fatalf("staged copy: %v", err)
	}
	// A second restore into the same (now non-empty) dir is refused.
	if _, err := Stage(path, dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a non-empty dir: %v", err)
	}
	// A corrupt backup leaves nothing behind.
	b, err := os.ReadFile(path)
	must(t, err)
	b[len(b)/2] ^= 1
	must(t, os.WriteFile(path, b, 0o644))
	dir2 := filepath.Join(t.TempDir(), "new2")
	if _, err := Stage(path, dir2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("staging a corrupt file: %v", err)
	}
	if _, err := os.Stat(dir2); !os.IsNotExist(err) {
		t.Fatalf("a refused restore created %s: %v", dir2, err)
	}
}

// TestFilesArePrivate: a backup holds every key of the cluster, so the file
// (and the copy restore stages in a data dir) is readable by its owner
// only, whatever the umask, and whatever an interrupted earlier backup
// left behind (here a world-readable FILE.partial).
func TestFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b.bak")
	must(t, os.WriteFile(path+".partial", []byte("left by a killed backup"), 0o666))
	must(t, os.Chmod(path+".partial", 0o666)) // past the umask
	w, err := Create(path, Header{ClusterID: 1, Created: time.Now()})
	must(t, err)
	must(t, w.BeginShard(Shard{ID: 1}))
	must(t, w.Add(Record{Key: []byte("k"), Value: []byte("secret")}))
	must(t, w.EndShard())
	_, err = w.Close()
	must(t, err)
	wantPrivate(t, path)
	staged := filepath.Join(t.TempDir(), "new")
	_, err = Stage(path, staged)
	must(t, err)
	wantPrivate(t, filepath.Join(staged, PendingName))
}

func wantPrivate(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	must(t, err)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want -rw------- (it holds every key of the cluster)", path, st.Mode().Perm())
	}
}

// hostileFile writes a file whose framing, counts and digest are all
// valid, holding one shard with one record of the given sizes (the bytes
// are there: the lengths do not overrun the file).
func hostileFile(t testing.TB, keyLen, valueLen int) string {
	t.Helper()
	b := append([]byte(Magic), make([]byte, 20)...)
	binary.BigEndian.PutUint32(b[8:], Version)
	b = append(b, frameShard)
	b = append(b, make([]byte, 32)...)
	b = append(b, frameRecord)
	b = binary.AppendUvarint(b, uint64(keyLen))
	b = append(b, bytes.Repeat([]byte{'k'}, keyLen)...)
	b = binary.AppendUvarint(b, uint64(valueLen))
	b = append(b, make([]byte, valueLen)...)
	b = append(b, make([]byte, 8)...)
	b = binary.BigEndian.AppendUint64(append(b, frameEnd), 1)
	b = binary.BigEndian.AppendUint64(append(b, frameTrailer), 1)
	b = binary.BigEndian.AppendUint32(b, 1)
	sum := sha256.Sum256(b)
	path := filepath.Join(t.TempDir(), "hostile.bak")
	must(t, os.WriteFile(path, append(b, sum[:]...), 0o600))
	return path
}

// TestOversizedFieldsRefusedBeforeTheyAreRead: a record field longer than
// any node stores (a key over 64 KiB, a value over 8 MiB) is refused when
// its length is read, naming the limit, without reading it into memory:
// a hostile file's lengths were bounded only by the file's size, so one
// record as large as the file was read (twice) into memory.
func TestOversizedFieldsRefusedBeforeTheyAreRead(t *testing.T) {
	for _, c := range []struct {
		name           string
		keyLen, valLen int
		want           string
	}{
		{"key", MaxKeyBytes + 1, 1, "key of 65537 bytes"},
		{"value", 1, 3 * MaxValueBytes, "value of 25165824 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := hostileFile(t, c.keyLen, c.valLen)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Verify(path)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrCorrupt saying %q", err, c.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
				t.Fatalf("refusing it allocated %d bytes", n)
			}
		})
	}
	// At the limits a record is accepted.
	if _, err := Verify(hostileFile(t, MaxKeyBytes, MaxValueBytes)); err != nil {
		t.Fatalf("a record at the limits: %v", err)
	}
}

// TestTooManyShardsRefused: a file may hold at most MaxShards sections
// (a cluster has at most 4096 shards); each section was kept in memory,
// so a file of empty sections cost memory in proportion to its size.
func TestTooManyShardsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "many.bak")
	w, err := Create(path, Header{ClusterID: 1, Created: time.Now()})
	must(t, err)
	for i := range MaxShards + 1 {
		must(t, w.BeginShard(Shard{ID: uint64(i + 1)}))
		must(t, w.EndShard())
	}
	_, err = w.Close()
	must(t, err)
	if _, err := Verify(path); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "more than 4096 shards") {
		t.Fatalf("err %v, want a refusal of the shard count", err)
	}
}

// TestConcurrentWritersToOnePath: two backups to the same FILE at once (a
// scheduled one overlapping a manual one) each write a file of their own
// and each renames a complete, verifiable file into place. Before, both
// wrote FILE.partial, the second truncating the first's: the first then
// reported success for a FILE that did not verify, renamed over the good
// backup that FILE held.
func TestConcurrentWritersToOnePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.bak")
	open := func(id uint64) *Writer {
		w, err := Create(path, Header{ClusterID: id, Created: time.Now()})
		must(t, err)
		must(t, w.BeginShard(Shard{ID: 1}))
		must(t, w.Add(Record{Key: fmt.Appendf(nil, "from-%d", id), Value: bytes.Repeat([]byte{'v'}, 100)}))
		return w
	}
	want := map[uint64]uint64{1: 21, 2: 1}
	closeAndVerify := func(w *Writer, id uint64) {
		t.Helper()
		must(t, w.EndShard())
		_, err := w.Close()
		must(t, err)
		sum, err := Verify(path)
		if err != nil || sum.ClusterID != id || sum.Records != want[id] {
			t.Fatalf("after writer %d closed: %+v, %v", id, sum, err)
		}
	}
	first := open(1)
	for i := range 20 { // past the writer's 1 MiB buffer: on disk before the second starts
		must(t, first.Add(Record{Key: fmt.Appendf(nil, "big-%d", i), Value: bytes.Repeat([]byte{'b'}, 100<<10)}))
	}
	second := open(2)
	closeAndVerify(first, 1)
	must(t, second.Add(Record{Key: []byte("more"), Value: []byte("x")}))
	must(t, second.AbortShard()) // rewinds its own file only
	must(t, second.BeginShard(Shard{ID: 1}))
	must(t, second.Add(Record{Key: []byte("from-2"), Value: []byte("y")}))
	closeAndVerify(second, 2)
	left, err := filepath.Glob(path + ".partial*")
	must(t, err)
	if len(left) != 0 {
		t.Fatalf("partial files left behind: %v", left)
	}
}
