package storage

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the write category Pebble passes when it creates or
// recycles a WAL file (wal.StandaloneManager.Create, vfs.FS.Create and
// ReuseForWrite).
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// sizedWALFS is fs with Pebble's WAL files preallocated with their size set.
//
// Why: every raft persist is a synced Pebble commit, i.e. an fdatasync of
// the WAL. Pebble preallocates a WAL in chunks of 110 % of the memtable size
// (vfs.NewSyncingFile, SyncingFileOptions.PreallocateSize, from
// DB.walPreallocateSize) with fallocate(FALLOC_FL_KEEP_SIZE), so the blocks
// are reserved but the file's size still grows with every append, and each
// fdatasync must also journal the new size. A file whose size already covers
// the append does not: on this box a lone fdatasync of a 400-byte append
// costs ~170 µs when the file grows and ~110 µs when it does not
// (docs/benchmarks.md, "A WAL that does not grow"). Pebble's own way out,
// recycling WAL files, only starts after the first memtable rotation (64 MiB
// of writes) of each process, and never for the WAL of a previous process
// (LogRecycler.minRecycleLogNum), so a node's WAL grows for its first 64 MiB
// after every start. This wrapper makes Pebble's Preallocate calls for WAL
// files fallocate with mode 0 instead: the same chunks, the same blocks
// reserved, but the size set to the chunk's end, zeros beyond what was written.
//
// Why a zero tail is safe (Pebble v2.1.7's code):
//
//   - Replay reads a WAL with record.Reader. A chunk header of zeros (checksum,
//     length and type 0) is ErrZeroedChunk (Reader.nextChunk); Reader.Next then
//     scans the rest of the file (readAheadForCorruption) and reports
//     corruption only if a later chunk in the WAL-sync format, with this WAL's
//     log number and a valid checksum, claims a synced offset past the bad
//     chunk. Zeros hold no such chunk, so the answer is ErrUnexpectedEOF.
//     A record torn by a crash (written, not synced) ends the same way:
//     ErrInvalidChunk from its checksum or length, then the same scan over
//     zeros. This is the path Pebble already takes for its own preallocated
//     and recycled WALs, whose tails hold zeros or an older log's records.
//   - DB.replayWAL treats ErrUnexpectedEOF as the end of the log for the most
//     recent WAL (strictWALTail false) and as corruption for older ones.
//     An older WAL always ends in an EOF trailer (a chunk carrying the next
//     log number, which Reader.nextChunk returns as io.EOF before the zeros
//     are reached): DB.rotateWAL closes the previous WAL (LogWriter.Close writes
//     the trailer and syncs) before it creates the next, so no crash leaves
//     an older WAL without it. At Open the replayed WALs are flushed before
//     the new WAL is created (Open waits for the flush), so they are never
//     "older" WALs of a later replay either.
//   - Every record that was synced is before the first zero chunk: the
//     LogWriter writes sequentially from offset 0 and fdatasync makes the
//     written range and the size durable, so a synced record cannot read back
//     as zeros; what follows the last synced record is either the next records
//     (whole, torn, or zeros) or the preallocated zeros.
//
// So after a crash at any point replay returns every synced record and
// stops at the zero tail, exactly as with a recycled WAL. The tests
// (walfs_test.go) kill a writer process with SIGKILL and reopen, with and
// without a torn last record and with an older WAL still to replay.
//
// Only WAL files are changed: the MANIFEST and sstables keep Pebble's
// behaviour. Files without a descriptor (an in-memory FS) are left alone.
type sizedWALFS struct {
	vfs.FS
}

// withSizedWALs wraps fs so that its WAL files are preallocated with their
// size set (sizedWALFS).
func withSizedWALs(fs vfs.FS) vfs.FS { return sizedWALFS{FS: fs} }

// Create implements vfs.FS.
func (fs sizedWALFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return wrapWAL(name, category, f, err)
}

// ReuseForWrite implements vfs.FS: a recycled WAL is a WAL too (already at
// its full size, so its Preallocate changes nothing until it outgrows it).
func (fs sizedWALFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return wrapWAL(newname, category, f, err)
}

// Unwrap returns the wrapped FS (vfs.Root looks through wrappers with it).
func (fs sizedWALFS) Unwrap() vfs.FS { return fs.FS }

func wrapWAL(name string, category vfs.DiskWriteCategory, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !isWAL(name, category) || f.Fd() == vfs.InvalidFd {
		return f, err
	}
	return sizedFile{File: f}, nil
}

// isWAL reports whether Pebble is creating a WAL file: its write category
// says so, and its name is NNNNNN.log (the check on the name keeps any
// other file Pebble might file under the same category, such as WAL
// failover's marker files, out).
func isWAL(name string, category vfs.DiskWriteCategory) bool {
	return category == walCategory && strings.HasSuffix(name, ".log")
}

// sizedFile is a WAL file whose Preallocate sets the file's size.
type sizedFile struct {
	vfs.File
}

// Preallocate reserves [offset, offset+length) and extends the file's size
// over it (preallocateSized). Pebble ignores its error
// (syncingFile.preallocate): a file system without fallocate just grows.
func (f sizedFile) Preallocate(offset, length int64) error {
	return preallocateSized(f.File, offset, length)
}
