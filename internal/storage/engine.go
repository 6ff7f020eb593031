package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"
)

const (
	// MemTableSize is the size of each Pebble memtable.
	MemTableSize = 64 << 20
	// BlockCacheSize is what Pebble's cache of uncompressed sstable blocks
	// may hold. Pebble's default, 8 MiB, is smaller than one flushed
	// memtable of a node under a put load (its sstables hold the raft log
	// entries next to the user data): a point read that misses the memtable
	// then reads and decompresses its blocks again from the file on nearly
	// every get (docs/benchmarks.md, "The memtable and the block cache").
	// The cache Pebble is given is larger by memtableReservation (see there).
	BlockCacheSize = 128 << 20
	// memtableReservation is what Pebble's memtables take out of the block
	// cache's capacity: Pebble reserves each memtable's arena in the cache
	// (Cache.Reserve) for as long as it is allocated, and once its
	// memtables are full size a node holds two for good: the mutable one
	// and either the one being flushed or the last flushed one, kept for
	// reuse (more only while an iterator pins an older one). A cache of just
	// BlockCacheSize had no room left for blocks at all: every point read
	// re-read and decompressed its index and data blocks from the file
	// (docs/benchmarks.md, "Block cache misses on point reads").
	memtableReservation = 2 * MemTableSize
)

// Engine is a node's Pebble database.
type Engine struct {
	// db is the raw database; it never leaves this package, so every key
	// written outside the state machines' batches is written here.
	db *pebble.DB
	// lock is Pebble's lock on the database directory, held from before
	// the data dir is touched until Close.
	lock *pebble.Lock
	opts *pebble.Options
	fs   vfs.FS
	// dir holds the database; auxDir holds snapshot files being received.
	dir, auxDir string
	// stagedSeq numbers staged snapshot files, so concurrent receivers of
	// the same shard never share a file.
	stagedSeq atomic.Uint64
	// staged counts the staged snapshots whose files exist or are about
	// to: reservations no writer took yet (ReserveSnapshot), writers not
	// yet finished or aborted, and StagedSnapshots not yet installed or
	// discarded (StagedSnapshots), so a receiver can bound them node-wide.
	staged atomic.Int64
	// closeMu guards closed: reads from outside the host loop (Read,
	// ReadView) hold it shared, Close exclusively, so none runs on a closed
	// Pebble, which would panic.
	closeMu sync.RWMutex
	closed  bool
	// stopFlusher ends flushQueuedMemtables; flusherDone closes when it has.
	stopFlusher, flusherDone chan struct{}
}

// FS is the file system an engine lives on (Pebble's vfs.FS), so that
// callers outside storage need not import Pebble.
type FS = vfs.FS

// NewMemFS returns an empty in-memory file system for OpenFS: what was
// synced survives reopening an engine on it, and nothing touches the disk.
func NewMemFS() FS { return vfs.NewMem() }

// Open opens (creating if needed) the Pebble database under dataDir/db on
// the operating system's file system.
func Open(dataDir string) (*Engine, error) { return OpenFS(vfs.Default, dataDir) }

// OpenFS is Open on fs. Tests pass vfs.NewMem() (reopening an engine on the
// same MemFS finds what was synced) so that a whole cluster runs without
// touching the disk.
func OpenFS(fs vfs.FS, dataDir string) (*Engine, error) { return openTuned(fs, dataDir, nil) }

// openTuned is OpenFS with tune, if set, applied to the Pebble options
// before defaults are filled in: benchmarks compare settings with it.
func openTuned(fs vfs.FS, dataDir string, tune func(*pebble.Options)) (*Engine, error) {
	dir := filepath.Join(dataDir, "db")
	aux := filepath.Join(dataDir, "aux")
	for _, d := range []string{dir, aux} {
		if err := fs.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("storage: create %s: %w", d, err)
		}
	}
	// Pebble's lock on the database, taken before anything in the data dir
	// changes: a second process started on a node's data dir must fail
	// before it clears the running node's snapshot files from aux.
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		return nil, lockError(dataDir, err)
	}
	opened := false
	defer func() {
		if !opened {
			_ = lock.Close()
		}
	}()
	// Make the directories themselves durable: a power cut must not lose
	// the entries that name them (Pebble syncs only inside its own dir).
	for _, d := range []string{dir, aux, dataDir, filepath.Dir(dataDir)} {
		if err := syncDir(fs, d); err != nil {
			return nil, err
		}
	}
	// Snapshot files left by a crash are never needed again.
	if err := clearDir(fs, aux); err != nil {
		return nil, err
	}
	opts := &pebble.Options{
		// Set explicitly: an unset version means the oldest format, which
		// lacks the excise support snapshot installation relies on.
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
		MemTableSize:       MemTableSize,
		// The blocks' share of the cache made below.
		CacheSize: BlockCacheSize,
		// WAL files preallocated with their size set, so that a synced
		// commit's fdatasync need not journal a new size (walfs.go).
		FS: withSizedWALs(fs),
		// Held already; Close releases it after the database closes.
		Lock: lock,
	}
	// Bloom filters in every level's tables (L0's setting is every
	// level's default): a point read seeks with its key as the prefix
	// (viewReader.Get), so a table whose filter rules the key out is
	// skipped without searching its index and data blocks.
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	if tune != nil {
		tune(opts)
	}
	if opts.Cache == nil {
		opts.Cache = newBlockCache(opts.CacheSize, opts.MemTableSize)
		// The DB takes its own reference; ours goes when Open returns.
		defer opts.Cache.Unref()
	}
	// pebble.Open fills in defaults on a copy; NewSSTWriter derives its
	// writer options from e.opts, which need them too (per-level block
	// sizes and compression).
	opts.EnsureDefaults()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	e := &Engine{db: db, lock: lock, opts: opts, fs: fs, dir: dir, auxDir: aux,
		stopFlusher: make(chan struct{}), flusherDone: make(chan struct{})}
	opened = true
	go e.flushQueuedMemtables(memtableCheckInterval)
	return e, nil
}

// lockError is the error for a failed lock of dataDir's database. Another
// process holding the lock (fcntl's EAGAIN) is said in words: Pebble's
// "resource temporarily unavailable" read as if it were worth a retry.
func lockError(dataDir string, err error) error {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("storage: data dir %s is in use by another concord process (its lock is held): "+
			"stop that process first, or give this one another data dir", dataDir)
	}
	return fmt.Errorf("storage: lock %s: %w", filepath.Join(dataDir, "db"), err)
}

// newBlockCache is a Pebble cache with room for blocks bytes of blocks
// once the memtables of size memtable have reserved their share.
func newBlockCache(blocks int64, memtable uint64) *pebble.Cache {
	return pebble.NewCache(blocks + int64(memtable)*(memtableReservation/MemTableSize))
}

// CacheStats counts the block cache's lookups since the engine opened and
// what it holds now.
type CacheStats struct {
	Hits, Misses int64
	// Bytes and Blocks are what the cache holds (blocks only: memtable
	// reservations are not counted).
	Bytes, Blocks int64
}

// BlockCacheStats reads the block cache's counters. It reads metrics, not
// data, so it works (zeros) once the engine is closed.
func (e *Engine) BlockCacheStats() CacheStats {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return CacheStats{}
	}
	c := e.db.Metrics().BlockCache
	return CacheStats{Hits: c.Hits, Misses: c.Misses, Bytes: c.Size, Blocks: c.Count}
}

// WriteStats are what Pebble wrote to sstables since the engine opened:
// bytes flushed from memtables to L0 and bytes written by compactions.
// Against the bytes committed they show what entries that outlive a
// memtable cost (docs/benchmarks.md, "Leader-aware log truncation").
type WriteStats struct {
	Flushes, Compactions         int64
	FlushedBytes, CompactedBytes uint64
}

// WriteStats reads Pebble's flush and compaction counters (zeros once the
// engine is closed).
func (e *Engine) WriteStats() WriteStats {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return WriteStats{}
	}
	m := e.db.Metrics()
	w := WriteStats{Flushes: m.Flush.Count, Compactions: m.Compact.Count}
	for _, l := range m.Levels {
		w.FlushedBytes += l.TableBytesFlushed + l.BlobBytesFlushed
		w.CompactedBytes += l.TableBytesCompacted + l.BlobBytesCompacted
	}
	return w
}

// Pebble's memtables start at 256 KiB and double up to MemTableSize, and
// it flushes immutable ones only once they add up to half of MemTableSize:
// a node that has written less than ~64 MiB since it opened holds up to
// eight memtables (256 KiB ... 32 MiB), and every point read searches each
// of their skiplists. That was most of a linearizable get's Pebble time in
// benchmarks, which run in that state (docs/benchmarks.md, "The memtable
// and the block cache"). So the engine flushes the queue itself once more
// than maxMemtables are held; at full size Pebble flushes each memtable as
// it fills and this never fires.
const (
	maxMemtables          = 2
	memtableCheckInterval = 100 * time.Millisecond
)

// flushQueuedMemtables checks the memtable count every interval until Close.
func (e *Engine) flushQueuedMemtables(interval time.Duration) {
	defer close(e.flusherDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.stopFlusher:
			return
		case <-t.C:
		}
		m := e.db.Metrics()
		if m.MemTable.Count > maxMemtables && m.Flush.NumInProgress == 0 {
			// AsyncFlush rotates the mutable memtable too and flushes the
			// whole queue; the error is a closing DB, which Close handles.
			_, _ = e.db.AsyncFlush()
		}
	}
}

// Close closes the database once the reads in progress through Read and
// ReadView are done; later ones fail with ErrClosed. The caller must have
// stopped every other user of the engine (the host loop, snapshot streams).
func (e *Engine) Close() error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.closed {
		return ErrClosed
	}
	e.closed = true
	close(e.stopFlusher)
	<-e.flusherDone
	err := e.db.Close()
	if lerr := e.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// AuxDir is a scratch directory for files that are not part of the database.
func (e *Engine) AuxDir() string { return e.auxDir }

// GetProto reads key from r into m. It reports false if the key is absent.
func GetProto(r pebble.Reader, key []byte, m proto.Message) (bool, error) {
	v, closer, err := r.Get(key)
	if err == pebble.ErrNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	if err := proto.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("storage: decode %x: %w", key, err)
	}
	return true, nil
}

// SetProto writes m under key into w.
func SetProto(w pebble.Writer, key []byte, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return w.Set(key, v, nil)
}

// SetProtoReusing is SetProto marshalling into *buf, which it keeps for
// the next call (w.Set copies): for records written once per loop turn
// per replica, where a fresh buffer each time is an allocation per Ready.
func SetProtoReusing(w pebble.Writer, key []byte, m proto.Message, buf *[]byte) error {
	v, err := proto.MarshalOptions{}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		return err
	}
	*buf = v
	return w.Set(key, v, nil)
}

func clearDir(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := fs.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// quietLogger drops Pebble's informational messages; errors still reach stderr.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: fatal: "+format+"\n", args...)
	os.Exit(2)
}

// NewCrashableMemFS is an in-memory FS that can be crash-cloned: tests use
// it to model a power cut (CrashClone).
func NewCrashableMemFS() FS { return vfs.NewCrashableMem() }

// CrashClone returns what fs, from NewCrashableMemFS, would hold after a
// power cut now: only what was synced. The engine open on fs is untouched.
func CrashClone(fs FS) (FS, error) {
	m, ok := fs.(*vfs.MemFS)
	if !ok {
		return nil, fmt.Errorf("storage: CrashClone of a %T, want NewCrashableMemFS", fs)
	}
	return m.CrashClone(vfs.CrashCloneCfg{}), nil
}

func syncDir(fs vfs.FS, dir string) error {
	f, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("storage: open dir %s: %w", dir, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("storage: sync dir %s: %w", dir, err)
	}
	return nil
}

// Flush writes the memtables out to sstables and waits for it; tests use it
// to put data where most of a real store's data is (Pebble's Excise treats
// flushed data differently from unflushed).
func (e *Engine) Flush() error {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	return e.db.Flush()
}
