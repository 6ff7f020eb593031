// Package backupfile is the format of a Concord backup file (`concord
// backup`, `concord restore`): the live user keys of every shard, with
// their expiry, each shard read at one applied index.
//
// Layout (integers big-endian unless marked uvarint):
//
//	"CONCORDB" <version 4> <cluster id 8> <created unix ms 8>   the header
//	'S' <shard 8> <start hash 8> <end hash 8> <applied index 8>  a shard begins
//	'R' <key len uvarint> <key> <value len uvarint> <value> <expire at unix ms 8, 0: none>
//	'E' <records of the shard 8>                                  the shard ends
//	... more shards ...
//	'T' <records 8> <shards 4> <SHA-256 of every byte before it, 32>
//
// Nothing may follow the trailer. A key is at most MaxKeyBytes, a value
// at most MaxValueBytes, and a file holds at most MaxShards sections. A
// reader verifies the whole file (the frames, each shard's count, the
// totals and the digest) before it hands out any record, so a restore
// never starts from a truncated or corrupt file. The digest is written
// last, over the finished file, so a writer may drop a shard it failed to
// read completely (AbortShard) and read it again.
package backupfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Magic opens every backup file.
const Magic = "CONCORDB"

// Version is the format version this package writes and reads.
const Version = 1

// The largest record fields and the most shard sections a file may hold:
// what a node can store (--max-key-bytes is capped at 64 KiB,
// --max-value-bytes at 8 MiB, --shards at 4096; a test in internal/node
// keeps them in step). A reader refuses a length past them before reading
// the field, so a hostile file cannot make it hold more than this in
// memory whatever the lengths it announces.
const (
	MaxKeyBytes   = 64 << 10
	MaxValueBytes = 8 << 20
	MaxShards     = 4096
)

// PendingName is the file, in a data dir, that `concord restore` stages a
// verified backup in and that a node's first start loads.
const PendingName = "restore.pending"

const (
	frameShard   = 'S'
	frameRecord  = 'R'
	frameEnd     = 'E'
	frameTrailer = 'T'

	headerLen = len(Magic) + 4 + 8 + 8
)

// ErrCorrupt wraps every reason a file is refused.
var ErrCorrupt = errors.New("backup file is corrupt or truncated")

// Header describes the backup as a whole.
type Header struct {
	Version   uint32
	ClusterID uint64
	Created   time.Time
}

// Shard is one shard's section: the hash range it held and the applied
// index its keys were read at.
type Shard struct {
	ID, StartHash, EndHash, AppliedIndex uint64
	// Records is the number of keys in the section (filled in by the
	// writer and the reader).
	Records uint64
}

// Record is one user key.
type Record struct {
	Key, Value []byte
	// ExpireAtMs is when the key expires (Unix ms); 0: never.
	ExpireAtMs int64
}

// Summary is what a complete file holds.
type Summary struct {
	Header
	Shards  []Shard
	Records uint64
	// Digest is the file's SHA-256 trailer (set by a reader, once the
	// whole file verified): what identifies the file.
	Digest []byte
}

// Writer writes a backup file. It writes to a new PATH.partial-RANDOM and
// renames it to PATH only in Close, so an interrupted backup never leaves
// a file at PATH, and backups to one PATH at once never share a file (the
// last to finish is at PATH).
type Writer struct {
	path, tmp string
	f         *os.File
	bw        *bufio.Writer
	sum       Summary
	off       int64  // bytes written so far
	shardOff  int64  // where the open shard began; -1: none open
	cur       *Shard // the open shard
}

// Create starts a backup file at path with header h (its Version is set).
func Create(path string, h Header) (*Writer, error) {
	// A new file of this writer's own (PATH.partial-RANDOM), never one
	// another backup to PATH is writing; created owner-only (0600): it
	// holds every key of the cluster.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	h.Version = Version
	w := &Writer{path: path, tmp: tmp, f: f, bw: bufio.NewWriterSize(f, 1<<20), shardOff: -1}
	w.sum.Header = h
	hdr := append([]byte(Magic), make([]byte, 20)...)
	binary.BigEndian.PutUint32(hdr[8:], h.Version)
	binary.BigEndian.PutUint64(hdr[12:], h.ClusterID)
	binary.BigEndian.PutUint64(hdr[20:], uint64(h.Created.UnixMilli()))
	if err := w.write(hdr); err != nil {
		w.Discard()
		return nil, err
	}
	return w, nil
}

func (w *Writer) write(b []byte) error {
	n, err := w.bw.Write(b)
	w.off += int64(n)
	return err
}

// BeginShard opens the section of shard s.
func (w *Writer) BeginShard(s Shard) error {
	if w.cur != nil {
		return fmt.Errorf("backupfile: shard %d is still open", w.cur.ID)
	}
	w.shardOff = w.off
	s.Records = 0
	w.cur = &s
	b := []byte{frameShard}
	for _, v := range []uint64{s.ID, s.StartHash, s.EndHash, s.AppliedIndex} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return w.write(b)
}

// Add writes one record into the open shard.
func (w *Writer) Add(r Record) error {
	if w.cur == nil {
		return errors.New("backupfile: record outside a shard")
	}
	if len(r.Key) > MaxKeyBytes || len(r.Value) > MaxValueBytes {
		// Never write what a reader refuses.
		return fmt.Errorf("backupfile: a record of a %d-byte key and %d-byte value is over the format's limits (%d, %d)",
			len(r.Key), len(r.Value), MaxKeyBytes, MaxValueBytes)
	}
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(r.Key)+len(r.Value)+8)
	b = append(b, frameRecord)
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendUvarint(b, uint64(len(r.Value)))
	b = append(b, r.Value...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.ExpireAtMs))
	w.cur.Records++
	return w.write(b)
}

// EndShard closes the open shard's section.
func (w *Writer) EndShard() error {
	if w.cur == nil {
		return errors.New("backupfile: no shard open")
	}
	if err := w.write(binary.BigEndian.AppendUint64([]byte{frameEnd}, w.cur.Records)); err != nil {
		return err
	}
	w.sum.Shards = append(w.sum.Shards, *w.cur)
	w.sum.Records += w.cur.Records
	w.cur = nil
	return nil
}

// AbortShard drops the open shard's section from the file, so that the
// shard can be read again from the start.
func (w *Writer) AbortShard() error {
	if w.cur == nil {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		return err
	}
	if err := w.f.Truncate(w.shardOff); err != nil {
		return err
	}
	if _, err := w.f.Seek(w.shardOff, io.SeekStart); err != nil {
		return err
	}
	w.bw.Reset(w.f)
	w.off, w.cur = w.shardOff, nil
	return nil
}

// Close writes the trailer (digest of the whole file), syncs and renames
// the file into place, and returns what it holds.
func (w *Writer) Close() (Summary, error) {
	if w.cur != nil {
		w.Discard()
		return Summary{}, fmt.Errorf("backupfile: shard %d was not ended", w.cur.ID)
	}
	if err := w.finish(); err != nil {
		w.Discard()
		return Summary{}, err
	}
	return w.sum, nil
}

func (w *Writer) finish() error {
	t := []byte{frameTrailer}
	t = binary.BigEndian.AppendUint64(t, w.sum.Records)
	t = binary.BigEndian.AppendUint32(t, uint32(len(w.sum.Shards)))
	if err := w.write(t); err != nil {
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return err
	}
	// The digest is computed over the finished file rather than as it is
	// written, because AbortShard rewinds the file.
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(h, w.f); err != nil {
		return err
	}
	if _, err := w.f.Write(h.Sum(nil)); err != nil { // the file offset is at its end after the copy
		return err
	}
	if err := w.f.Sync(); err != nil {
		return err
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	w.f = nil
	if err := os.Rename(w.tmp, w.path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(w.path))
}

// Discard abandons the file.
func (w *Writer) Discard() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
	_ = os.Remove(w.tmp)
}

// SyncDir makes the entries of dir (a file created or renamed in it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Verify reads the whole file at path and checks it; it returns what the
// file holds, or an error wrapping ErrCorrupt that says what is wrong.
func Verify(path string) (Summary, error) { return scanFile(path, nil) }

// Read verifies the file at path, then calls fn for every record in file
// order, with the shard it belongs to. The record's slices are valid only
// during the call. Nothing is passed to fn unless the whole file verified.
func Read(path string, fn func(s Shard, r Record) error) (Summary, error) {
	if _, err := scanFile(path, nil); err != nil {
		return Summary{}, err
	}
	return scanFile(path, fn)
}

func scanFile(path string, fn func(Shard, Record) error) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Summary{}, err
	}
	sum, err := scanReader(f, st.Size(), fn)
	if err != nil {
		return Summary{}, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	}
	return sum, nil
}

// scanReader parses the size bytes of a file from r (apart from the file
// so that FuzzScan drives it on bytes in memory).
func scanReader(r io.Reader, size int64, fn func(Shard, Record) error) (Summary, error) {
	s := &scanner{r: bufio.NewReaderSize(r, 1<<20), h: sha256.New(), size: size, fn: fn}
	return s.scan()
}

// scanner parses a file, hashing every byte it reads.
type scanner struct {
	r    *bufio.Reader
	h    hash.Hash // of every byte consumed so far
	size int64     // the file's size, which bounds every length read
	pos  int64
	fn   func(Shard, Record) error
	buf  []byte
	// digest is the trailer's digest, once it matched.
	digest []byte
}

func (s *scanner) read(n int64) ([]byte, error) {
	if n > s.size-s.pos {
		return nil, fmt.Errorf("at byte %d: %d bytes announced, %d left in the file", s.pos, n, s.size-s.pos)
	}
	if int64(cap(s.buf)) < n {
		s.buf = make([]byte, n)
	}
	b := s.buf[:n]
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, fmt.Errorf("at byte %d: %w", s.pos, err)
	}
	s.pos += n
	s.h.Write(b)
	return b, nil
}

func (s *scanner) u64() (uint64, error) {
	b, err := s.read(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

func (s *scanner) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(byteCounter{s})
	if err != nil {
		return 0, fmt.Errorf("at byte %d: bad length: %w", s.pos, err)
	}
	return v, nil
}

// byteCounter reads single bytes from the scanner, counting them.
type byteCounter struct{ s *scanner }

func (c byteCounter) ReadByte() (byte, error) {
	b, err := c.s.read(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (s *scanner) scan() (Summary, error) {
	var sum Summary
	hdr, err := s.read(int64(headerLen))
	if err != nil {
		return sum, fmt.Errorf("no complete header: %w", err)
	}
	if string(hdr[:8]) != Magic {
		return sum, fmt.Errorf("not a Concord backup file (magic %q)", hdr[:8])
	}
	sum.Version = binary.BigEndian.Uint32(hdr[8:])
	if sum.Version != Version {
		return sum, fmt.Errorf("format version %d, this binary reads version %d", sum.Version, Version)
	}
	sum.ClusterID = binary.BigEndian.Uint64(hdr[12:])
	sum.Created = time.UnixMilli(int64(binary.BigEndian.Uint64(hdr[20:])))
	var cur *Shard
	for {
		frame, err := s.read(1)
		if err != nil {
			return sum, fmt.Errorf("ends without its trailer: %w", err)
		}
		switch frame[0] {
		case frameShard:
			if cur != nil {
				return sum, fmt.Errorf("at byte %d: a shard begins inside shard %d", s.pos-1, cur.ID)
			}
			if len(sum.Shards) == MaxShards {
				return sum, fmt.Errorf("at byte %d: more than %d shards, more than any cluster has", s.pos-1, MaxShards)
			}
			cur = &Shard{}
			for _, p := range []*uint64{&cur.ID, &cur.StartHash, &cur.EndHash, &cur.AppliedIndex} {
				if *p, err = s.u64(); err != nil {
					return sum, err
				}
			}
		case frameRecord:
			if cur == nil {
				return sum, fmt.Errorf("at byte %d: a record outside any shard", s.pos)
			}
			if err := s.record(*cur); err != nil {
				return sum, err
			}
			cur.Records++
		case frameEnd:
			if cur == nil {
				return sum, fmt.Errorf("at byte %d: a shard end outside any shard", s.pos)
			}
			n, err := s.u64()
			if err != nil {
				return sum, err
			}
			if n != cur.Records {
				return sum, fmt.Errorf("shard %d: %d records, its end says %d", cur.ID, cur.Records, n)
			}
			sum.Shards = append(sum.Shards, *cur)
			sum.Records += n
			cur = nil
		case frameTrailer:
			if err := s.trailer(sum, cur); err != nil {
				return sum, err
			}
			sum.Digest = s.digest
			return sum, nil
		default:
			return sum, fmt.Errorf("at byte %d: unknown frame %q", s.pos-1, frame[0])
		}
	}
}

func (s *scanner) record(sh Shard) error {
	var r Record
	for _, f := range []struct {
		p    *[]byte
		name string
		max  uint64
	}{{&r.Key, "key", MaxKeyBytes}, {&r.Value, "value", MaxValueBytes}} {
		p := f.p
		n, err := s.uvarint()
		if err != nil {
			return err
		}
		if n > f.max {
			return fmt.Errorf("at byte %d: a record's %s of %d bytes, more than any node stores (%d)", s.pos, f.name, n, f.max)
		}
		if n > uint64(s.size-s.pos) {
			return fmt.Errorf("at byte %d: a record field of %d bytes, %d left in the file", s.pos, n, s.size-s.pos)
		}
		b, err := s.read(int64(n))
		if err != nil {
			return err
		}
		*p = bytes.Clone(b) // s.buf is reused by the next read
	}
	at, err := s.u64()
	if err != nil {
		return err
	}
	r.ExpireAtMs = int64(at)
	if s.fn != nil {
		return s.fn(sh, r)
	}
	return nil
}

// trailer checks the trailer, whose 'T' was just read, against what the
// scan counted, and the digest of every byte before the digest.
func (s *scanner) trailer(sum Summary, open *Shard) error {
	if open != nil {
		return fmt.Errorf("shard %d has no end", open.ID)
	}
	records, err := s.u64()
	if err != nil {
		return err
	}
	b, err := s.read(4)
	if err != nil {
		return err
	}
	shards := binary.BigEndian.Uint32(b)
	want := s.h.Sum(nil)
	got, err := s.read(sha256.Size)
	if err != nil {
		return err
	}
	switch {
	case !bytes.Equal(got, want):
		return fmt.Errorf("SHA-256 mismatch: the content does not match its digest")
	case records != sum.Records || int(shards) != len(sum.Shards):
		return fmt.Errorf("trailer says %d records in %d shards, the file holds %d in %d", records, shards, sum.Records, len(sum.Shards))
	case s.pos != s.size:
		return fmt.Errorf("%d bytes follow the trailer", s.size-s.pos)
	}
	s.digest = bytes.Clone(got)
	return nil
}

// TrailerDigest returns the last sha256.Size bytes of the file at path,
// where a complete file's digest is, without verifying anything: enough to
// tell whether it is the file whose Summary.Digest was recorded.
func TrailerDigest(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < int64(headerLen+sha256.Size) {
		return nil, fmt.Errorf("%s: %w: %d bytes", path, ErrCorrupt, st.Size())
	}
	b := make([]byte, sha256.Size)
	if _, err := f.ReadAt(b, st.Size()-sha256.Size); err != nil {
		return nil, err
	}
	return b, nil
}

// Stage verifies the backup at src and copies it into dataDir as
// PendingName, for a node's first start to load. dataDir must not exist or
// be empty: a restore prepares a new node and never touches a data dir in
// use. Nothing is left in dataDir unless it succeeds; the copy is synced
// and renamed into place, so a crash leaves either no PendingName or a
// complete one (which the node verifies again before loading it).
func Stage(src, dataDir string) (Summary, error) {
	sum, err := Verify(src)
	if err != nil {
		return Summary{}, err
	}
	entries, err := os.ReadDir(dataDir)
	switch {
	case err == nil && len(entries) > 0:
		return Summary{}, fmt.Errorf("data dir %s is not empty: restore prepares a new node's data dir and never writes into one in use", dataDir)
	case err != nil && !os.IsNotExist(err):
		return Summary{}, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return Summary{}, err
	}
	dst := filepath.Join(dataDir, PendingName)
	if err := copyFile(src, dst+".tmp"); err != nil {
		_ = os.Remove(dst + ".tmp")
		return Summary{}, err
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		return Summary{}, err
	}
	if err := SyncDir(dataDir); err != nil {
		return Summary{}, err
	}
	return sum, SyncDir(filepath.Dir(filepath.Clean(dataDir)))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) // every key of the cluster: owner only
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
