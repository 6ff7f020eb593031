package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/internal/keys"
)

// The crash child (TestWALCrashChild, run as a separate process) writes
// walChildBatches synced batches of ~1 KiB, enough to fill Pebble's first
// memtable (512 KiB: Pebble ramps its memtables up from 256 KiB), so that its WAL is rotated and a second one is live:
// at the kill there is an older WAL still to replay (it ends in Pebble's
// EOF trailer) and the live one (it ends in the zero tail).
const (
	walChildBatches = 700
	walChildDirEnv  = "CONCORD_WALFS_CHILD_DIR"
	walChildTagEnv  = "CONCORD_WALFS_CHILD_TAG"
)

func walKey(tag string, i int) []byte { return keys.User(1, fmt.Appendf(nil, "%s-%06d", tag, i)) }

// walValue is batch i's value; the last batch's is 16 KiB, so that it spans
// pages and chunks and a test can tear it.
func walValue(tag string, i int) []byte {
	n := 1024
	if i == walChildBatches {
		n = 16 << 10
	}
	unit := fmt.Appendf(nil, "%s%d.", tag, i)
	return bytes.Repeat(unit, n/len(unit)+1)[:n]
}

// TestWALCrashChild is the writer process of the crash tests; it does
// nothing unless started by runWALChild. It writes batches 0..N-1, each
// synced, reporting each once its commit returned, then batch N, synced but
// reported only as "tail", then waits to be killed (it exits by itself when
// its stdin closes, so that it does not outlive a parent that died).
func TestWALCrashChild(t *testing.T) {
	dir, tag := os.Getenv(walChildDirEnv), os.Getenv(walChildTagEnv)
	if dir == "" {
		t.Skip("the child of the WAL crash tests")
	}
	e, err := Open(dir)
	if err != nil {
		fmt.Printf("open: %v\n", err)
		os.Exit(3)
	}
	for i := 0; i <= walChildBatches; i++ {
		b := e.NewBatch()
		if err := b.Set(walKey(tag, i), walValue(tag, i), nil); err != nil {
			fmt.Printf("set: %v\n", err)
			os.Exit(3)
		}
		if err := Commit(b, true); err != nil {
			fmt.Printf("commit: %v\n", err)
			os.Exit(3)
		}
		if i < walChildBatches {
			fmt.Printf("synced %d\n", i)
		}
	}
	m := e.db.Metrics()
	fmt.Printf("metrics: %d memtables of %d bytes, %d WAL files, %d flushes\n", m.MemTable.Count, m.MemTable.Size, m.WAL.Files, m.Flush.Count)
	fmt.Println("tail")
	_, _ = io.Copy(io.Discard, os.Stdin) // killed here
	os.Exit(0)
}

// runWALChild runs the crash child on dataDir, SIGKILLs it once it has
// written everything, and returns how many batches it reported synced.
func runWALChild(t *testing.T, dataDir, tag string) int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the size-setting preallocation is Linux's")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWALCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), walChildDirEnv+"="+dataDir, walChildTagEnv+"="+tag)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // held open until the kill
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it if the test fails before the SIGKILL below.
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	synced, sawTail := 0, false
	sc := bufio.NewScanner(out)
	for !sawTail && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "metrics:"):
			t.Log(line)
		case line == "tail":
			sawTail = true
		case strings.HasPrefix(line, "synced "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "synced "))
			if err != nil || n != synced {
				t.Fatalf("child reported %q after %d batches", line, synced)
			}
			synced++
		}
	}
	if !sawTail {
		_ = cmd.Wait()
		t.Fatalf("child ended after %d synced batches without writing its tail (%v)", synced, sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return synced
}

// walFiles returns the paths of the WAL files in dataDir's database, oldest
// first.
func walFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dataDir, "db", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths) // Pebble's names are zero-padded numbers
	return paths
}

// checkWALsSized asserts that dataDir holds at least min WALs and that each
// has its preallocated size, so that replay has a zero tail to read in each.
func checkWALsSized(t *testing.T, dataDir string, min int) {
	t.Helper()
	wals := walFiles(t, dataDir)
	if len(wals) < min {
		t.Fatalf("%d WAL files after the crash, want at least %d: %v", len(wals), min, wals)
	}
	for _, p := range wals {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < MemTableSize {
			t.Fatalf("WAL %s is %d bytes: not preallocated with its size set", filepath.Base(p), fi.Size())
		}
	}
}

// checkBatches asserts that batches [0, n) of tag are in e with their values.
func checkBatches(t *testing.T, e *Engine, tag string, n int) {
	t.Helper()
	for i := range n {
		v, closer, err := e.db.Get(walKey(tag, i))
		if err != nil {
			t.Fatalf("batch %s %d of %d, synced before the crash: %v", tag, i, n, err)
		}
		if !bytes.Equal(v, walValue(tag, i)) {
			t.Fatalf("batch %s %d: wrong value after the crash (%d bytes)", tag, i, len(v))
		}
		closer.Close()
	}
}

// A process killed with SIGKILL after synced commits, with its WALs
// preallocated with their size set (zeros after the last record), reopens
// with every synced batch. Killed again after reopening and writing more,
// it reopens with both runs' batches: the WAL replayed at the first reopen
// (zero tail, no EOF trailer) must not be read as an older, cleanly closed
// WAL by the second (Pebble flushes the replayed WALs before it creates a
// new one).
func TestWALCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	n := runWALChild(t, dir, "a")
	checkWALsSized(t, dir, 2) // an older WAL and the live one
	m := runWALChild(t, dir, "b")
	// The second run's memtable is larger (Pebble's ramp goes on), so its
	// live WAL may be its only one.
	checkWALsSized(t, dir, 1)

	e := openEngine(t, dir)
	checkBatches(t, e, "a", n+1) // the tail batch too: it was written whole
	checkBatches(t, e, "b", m+1)
	// Still writable, and what it writes survives a clean reopen.
	commit(t, e.db, func(b *pebble.Batch) error { return b.Set(walKey("c", 0), walValue("c", 0), nil) })
	e = reopen(t, e, dir)
	checkBatches(t, e, "a", n+1)
	checkBatches(t, e, "b", m+1)
	checkBatches(t, e, "c", 1)
}

// A crash that tears the last record (written, not all of it on the disk:
// its end reads as zeros) loses that record only: every batch before it is
// there and the database opens and takes writes.
func TestWALCrashTornTail(t *testing.T) {
	dir := t.TempDir()
	n := runWALChild(t, dir, "a")
	checkWALsSized(t, dir, 2)
	wals := walFiles(t, dir)
	zeroLastWritten(t, wals[len(wals)-1], 8<<10)

	e := openEngine(t, dir)
	checkBatches(t, e, "a", n)
	if _, _, err := e.db.Get(walKey("a", n)); err != pebble.ErrNotFound {
		t.Fatalf("the torn tail batch: %v, want it gone", err)
	}
	commit(t, e.db, func(b *pebble.Batch) error { return b.Set(walKey("c", 0), walValue("c", 0), nil) })
	e = reopen(t, e, dir)
	checkBatches(t, e, "a", n)
	checkBatches(t, e, "c", 1)
}

// zeroLastWritten overwrites with zeros the last n bytes before the zero
// tail of the file at path: the end of its last record, as if those pages
// had not reached the disk.
func zeroLastWritten(t *testing.T, path string, n int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := len(bytes.TrimRight(data, "\x00"))
	if end < n {
		t.Fatalf("WAL %s holds only %d written bytes", path, end)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), int64(end-n)); err != nil {
		t.Fatal(err)
	}
}

// A new WAL's size is set to Pebble's preallocation chunk (110 % of the
// memtable) once written to, so that later appends do not grow it; the
// MANIFEST is left as Pebble writes it.
func TestNewWALHasItsSizeSet(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the size-setting preallocation is Linux's")
	}
	dir := t.TempDir()
	e := openEngine(t, dir)
	// Pebble preallocates before a write past offset 0: the second one.
	for i := range 2 {
		commit(t, e.db, func(b *pebble.Batch) error { return b.Set(walKey("a", i), walValue("a", i), nil) })
	}
	wals := walFiles(t, dir)
	if len(wals) != 1 {
		t.Fatalf("WAL files %v, want one", wals)
	}
	fi, err := os.Stat(wals[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(MemTableSize + MemTableSize/10); fi.Size() != want {
		t.Fatalf("new WAL is %d bytes, want its preallocated %d", fi.Size(), want)
	}
	manifests, err := filepath.Glob(filepath.Join(dir, "db", "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no MANIFEST (%v)", err)
	}
	for _, p := range manifests {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() >= 1<<20 {
			t.Fatalf("MANIFEST %s is %d bytes: a file other than the WAL was sized", p, fi.Size())
		}
	}
}
