package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// RaftLog is raft.Storage for one shard replica, backed by the node's Pebble.
//
// Log entries are stored as an 8-byte term followed by the marshalled entry,
// so Term reads a few bytes instead of decoding the entry.
//
// Not safe for concurrent use: the multiraft loop owns it.
type RaftLog struct {
	db *pebble.DB
	// shard is only ever encoded into keys, which take a plain uint64.
	shard uint64

	// hardState is raft's hard state as of the last Ready; stored is the
	// one on disk, which lags it in the commit index only (SetHardState).
	// Both are updated in place (no allocation per Ready).
	hardState, stored hardStateBlock
	// hsKey and hsBuf: the hard state's key, and the buffer it is
	// marshalled into, kept for every write.
	hsKey, hsBuf []byte
	// Invariant: truncIndex <= lastIndex. The log holds (truncIndex, lastIndex].
	truncIndex, truncTerm uint64
	lastIndex, lastTerm   uint64

	// cache holds the newest entries, which raft reads back soonest.
	cache entryCache
	// logPrefix starts every log entry key of the shard (setEntry).
	logPrefix []byte

	// snapshot builds the snapshot raft asks for; set by the replica.
	snapshot func() (*pb.Snapshot, error)
}

// entryCacheBytes bounds each replica's entry cache.
const entryCacheBytes = 4 << 20

var _ raft.Storage = (*RaftLog)(nil)

// LoadRaftLog reads a replica's Raft state. A replica with nothing stored
// (created to receive a snapshot) has an empty log at index 0.
func LoadRaftLog(db *pebble.DB, id ids.ShardID) (*RaftLog, error) {
	shard := uint64(id)
	l := &RaftLog{db: db, shard: shard, hsKey: keys.HardState(shard), cache: entryCache{maxBytes: entryCacheBytes}}
	var hs pb.HardState
	if _, err := GetProto(db, l.hsKey, &hs); err != nil {
		return nil, err
	}
	l.hardState.set(&hs)
	l.stored.set(&hs)
	var ts storepb.TruncatedState
	if _, err := GetProto(db, keys.Truncated(shard), &ts); err != nil {
		return nil, err
	}
	l.truncIndex, l.truncTerm = ts.GetIndex(), ts.GetTerm()
	l.lastIndex, l.lastTerm = l.truncIndex, l.truncTerm
	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: keys.LogEntry(shard, l.truncIndex+1),
		UpperBound: keys.LogEntry(shard, 1<<64-1),
	})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if it.Last() {
		l.lastIndex = keys.LogIndex(it.Key())
		l.lastTerm = binary.BigEndian.Uint64(it.Value())
	}
	return l, it.Error()
}

// SetSnapshotFunc sets the function that builds snapshots for raft.
func (l *RaftLog) SetSnapshotFunc(f func() (*pb.Snapshot, error)) { l.snapshot = f }

// InitialState implements raft.Storage.
func (l *RaftLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	cs := &pb.ConfState{}
	if _, err := GetProto(l.db, keys.ConfState(l.shard), cs); err != nil {
		return nil, nil, err
	}
	return l.hardState.clone(), cs, nil
}

// Entries implements raft.Storage: entries in [lo, hi), at least one if any,
// and no more than maxSize bytes beyond the first.
func (l *RaftLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if lo <= l.truncIndex {
		return nil, raft.ErrCompacted
	}
	if hi > l.lastIndex+1 {
		return nil, fmt.Errorf("storage: shard %d: entries [%d, %d) beyond last index %d", l.shard, lo, hi, l.lastIndex)
	}
	if ents, ok := l.cache.get(lo, hi, maxSize); ok {
		return ents, nil
	}
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: keys.LogEntry(l.shard, lo),
		UpperBound: keys.LogEntry(l.shard, hi),
	})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ents []*pb.Entry
	var size uint64
	next := lo
	for ok := it.First(); ok; ok = it.Next() {
		e, err := decodeEntry(it.Value())
		if err != nil {
			return nil, err
		}
		if e.GetIndex() != next {
			return nil, fmt.Errorf("storage: shard %d: log gap: want index %d, found %d", l.shard, next, e.GetIndex())
		}
		size += uint64(proto.Size(e))
		if len(ents) > 0 && size > maxSize {
			break
		}
		ents = append(ents, e)
		next++
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if len(ents) == 0 && lo < hi {
		return nil, fmt.Errorf("storage: shard %d: entries [%d, %d) missing", l.shard, lo, hi)
	}
	return ents, nil
}

// Term implements raft.Storage. Term(FirstIndex()-1) is the truncated term.
func (l *RaftLog) Term(i uint64) (uint64, error) {
	switch {
	case i == l.truncIndex:
		return l.truncTerm, nil
	case i < l.truncIndex:
		return 0, raft.ErrCompacted
	case i > l.lastIndex:
		return 0, raft.ErrUnavailable
	case i == l.lastIndex:
		return l.lastTerm, nil
	}
	if t, ok := l.cache.term(i); ok {
		return t, nil
	}
	v, closer, err := l.db.Get(keys.LogEntry(l.shard, i))
	if err != nil {
		return 0, fmt.Errorf("storage: shard %d: term of %d: %w", l.shard, i, err)
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(v), nil
}

// LastIndex implements raft.Storage.
func (l *RaftLog) LastIndex() (uint64, error) { return l.lastIndex, nil }

// FirstIndex implements raft.Storage.
func (l *RaftLog) FirstIndex() (uint64, error) { return l.truncIndex + 1, nil }

// Snapshot implements raft.Storage.
func (l *RaftLog) Snapshot() (*pb.Snapshot, error) {
	if l.snapshot == nil {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	return l.snapshot()
}

// HardState returns the hard state of the last Ready (SetHardState), which
// is on disk but for, perhaps, its commit index.
// It is the log's own: read it, never keep it across a Ready.
func (l *RaftLog) HardState() *pb.HardState { return l.hardState.message() }

// hardStateBlock is a hard state and the values its optional fields point
// to, so that one can be set without allocating.
type hardStateBlock struct {
	m                  pb.HardState
	term, vote, commit uint64
}

func (b *hardStateBlock) set(hs *pb.HardState) {
	b.term, b.vote, b.commit = hs.GetTerm(), hs.GetVote(), hs.GetCommit()
}

// message returns the block as a HardState whose fields are all set (an
// unset field reads as 0, which is all raft and this package look at).
func (b *hardStateBlock) message() *pb.HardState {
	b.m.Term, b.m.Vote, b.m.Commit = &b.term, &b.vote, &b.commit
	return &b.m
}

func (b *hardStateBlock) clone() *pb.HardState {
	return &pb.HardState{Term: new(b.term), Vote: new(b.vote), Commit: new(b.commit)}
}

// CommitAtLeast raises the hard state's commit index to applied, an index
// the caller has applied and so knows committed. A replica calls it when it
// loads, before raft reads InitialState: the stored commit index may lag
// the applied one (SetHardState), and raft requires applied <= commit.
func (l *RaftLog) CommitAtLeast(applied uint64) {
	l.hardState.commit = max(l.hardState.commit, applied)
}

// Truncated returns the index and term of the last entry removed from the log.
func (l *RaftLog) Truncated() (index, term uint64) { return l.truncIndex, l.truncTerm }

// Append writes entries into b, discarding any stored entries they replace or
// that follow them (raft's truncate-on-conflict), and updates the in-memory
// indexes. b must be committed before raft is called again.
func (l *RaftLog) Append(b *pebble.Batch, ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	first, last := ents[0].GetIndex(), ents[len(ents)-1].GetIndex()
	if first <= l.truncIndex || first > l.lastIndex+1 {
		return fmt.Errorf("storage: shard %d: append [%d, %d] does not follow log (%d, %d]",
			l.shard, first, last, l.truncIndex, l.lastIndex)
	}
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) {
			return fmt.Errorf("storage: shard %d: append of non-contiguous entries at %d", l.shard, e.GetIndex())
		}
		if err := l.setEntry(b, e); err != nil {
			return err
		}
	}
	if last < l.lastIndex {
		if err := b.DeleteRange(keys.LogEntry(l.shard, last+1), keys.LogEntry(l.shard, l.lastIndex+1), nil); err != nil {
			return err
		}
	}
	l.lastIndex, l.lastTerm = last, ents[len(ents)-1].GetTerm()
	l.cache.append(ents)
	return nil
}

// SetHardState records hs, raft's hard state after a Ready, and writes it
// into b unless it differs from the one on disk only in a higher commit
// index. Term and vote are promises and must be durable before anything of
// the Ready is sent (deps.md rule 1); the commit index is not: raft keeps
// it in volatile state (thesis §3.8: commitIndex is volatile on all
// servers), a restarted replica relearns it from the leader's appends and
// heartbeats, and a lower one only delays applying. What a restart must
// not see is a commit index below the applied index, which the replica
// prevents with CommitAtLeast. Under load nearly every Ready moves only
// the commit index, so this saves one record per replica per turn
// (docs/benchmarks.md, "Per-shard cost of a loop turn").
func (l *RaftLog) SetHardState(b *pebble.Batch, hs *pb.HardState) error {
	l.hardState.set(hs)
	if hs.GetTerm() == l.stored.term && hs.GetVote() == l.stored.vote && hs.GetCommit() >= l.stored.commit {
		return nil
	}
	if err := SetProtoReusing(b, l.hsKey, hs, &l.hsBuf); err != nil {
		return err
	}
	l.stored.set(hs)
	return nil
}

// Truncate removes entries up to and including index from the log. The
// caller guarantees index is applied; entries above stay for slow followers.
//
// The range deletion starts after the previous truncation, not at 0:
// nothing at or below truncIndex is stored (each truncation deleted up to
// it, in the batch that recorded it; a snapshot excises the shard's whole
// span), and disjoint tombstones are cheaper for Pebble than nested ones,
// which it fragments into stacks of every tombstone covering each piece
// (truncation runs every second on every shard).
func (l *RaftLog) Truncate(b *pebble.Batch, index uint64) error {
	if index <= l.truncIndex {
		return nil
	}
	if index > l.lastIndex {
		return fmt.Errorf("storage: shard %d: truncate to %d beyond last index %d", l.shard, index, l.lastIndex)
	}
	term, err := l.Term(index)
	if err != nil {
		return err
	}
	if err := b.DeleteRange(keys.LogEntry(l.shard, l.truncIndex+1), keys.LogEntry(l.shard, index+1), nil); err != nil {
		return err
	}
	if err := SetProto(b, keys.Truncated(l.shard), &storepb.TruncatedState{Index: index, Term: term}); err != nil {
		return err
	}
	l.truncIndex, l.truncTerm = index, term
	l.cache.dropTo(index)
	return nil
}

// ResetToSnapshot updates the in-memory state after a snapshot at (index,
// term) replaced the replica's log, with hs as the stored hard state.
func (l *RaftLog) ResetToSnapshot(index, term uint64, hs *pb.HardState) {
	l.truncIndex, l.truncTerm = index, term
	l.lastIndex, l.lastTerm = index, term
	l.hardState.set(hs)
	l.stored.set(hs) // installed with the snapshot
	l.cache.clear()
}

// setEntry writes e into b: an 8-byte big-endian term, then the
// marshalled entry (decodeEntry reads it back), key and value built
// in the batch itself: Set would copy a built key and value, two
// allocations and a copy of the entry per entry on every replica.
func (l *RaftLog) setEntry(b *pebble.Batch, e *pb.Entry) error {
	if l.logPrefix == nil {
		k := keys.LogEntry(l.shard, 0)
		l.logPrefix = k[:len(k)-8]
	}
	size := proto.Size(e)
	op := b.SetDeferred(len(l.logPrefix)+8, 8+size)
	binary.BigEndian.PutUint64(op.Key[copy(op.Key, l.logPrefix):], e.GetIndex()) // keys.LogEntry
	binary.BigEndian.PutUint64(op.Value, e.GetTerm())
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(op.Value[8:8], e)
	if err != nil {
		return fmt.Errorf("storage: marshal raft entry: %w", err)
	}
	if len(out) != size || (size > 0 && &out[0] != &op.Value[8]) {
		return fmt.Errorf("storage: raft entry %d marshalled to %d bytes, sized %d", e.GetIndex(), len(out), size)
	}
	return op.Finish()
}

func decodeEntry(v []byte) (*pb.Entry, error) {
	if len(v) < 8 {
		return nil, fmt.Errorf("storage: log entry of %d bytes is corrupt", len(v))
	}
	e := &pb.Entry{}
	if err := proto.Unmarshal(v[8:], e); err != nil {
		return nil, fmt.Errorf("storage: decode log entry: %w", err)
	}
	if e.GetTerm() != binary.BigEndian.Uint64(v) {
		return nil, fmt.Errorf("storage: log entry %d: term prefix %d disagrees with entry term %d",
			e.GetIndex(), binary.BigEndian.Uint64(v), e.GetTerm())
	}
	return e, nil
}
