package kv

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/storepb"
)

// Windowed sessions (the Raft dissertation's §6.3). A session that sends one
// request at a time keeps one result per shard, and a client with many
// requests in flight then needs as many sessions: at 1,000 concurrent puts
// a shard wrote a record of its own for each put, 15-25 % of a put's CPU
// (docs/benchmarks.md, "Windowed sessions"). A windowed session is shared
// by all of a client's concurrent requests: each carries its own seq and
// the session's floor, the lowest seq the client has no answer for yet.
// The shard keeps the result of every seq from the floor up that it
// applied, answers a retry of one of them with its first result, and
// refuses a seq below the floor: the client has its answer, so that is a
// stale duplicate. Its record is written once per batch however many of the
// session's commands the batch applied.
//
// Results live in the cache as their encoded bytes (they outlive the batch,
// and a result may alias buffers that do not), so writing the record is a
// concatenation.

// errSessionMode: a command's session is of the other kind (windowed, or
// one request at a time) than its record. A session never changes kind:
// each kind keeps its own cache, and only the record may decide a result,
// so that replicas whose caches differ still agree.
var errSessionMode = errors.New("kv: the session is of the other kind")

// WindowFullMark is in the message of a window-full refusal, and in no
// other ResourceExhausted: a front end tells by it a refusal that applied
// nothing from gRPC's own ResourceExhausted (a reply over the message
// limit), which may come after a write applied. The Go client's copy is
// client.windowFullMark.
const WindowFullMark = "the window is full"

// MaxSessionWindow bounds the results a windowed session keeps on one
// shard, and MaxSessionWindowBytes their encoded size: a command that finds
// its session's window at either bound is refused (ResourceExhausted) and
// applies nothing, until the client's floor frees room. The Go client
// starts a new session long before (client.maxWindow), retries such a
// refusal with its current floor, and knows it by its words ("the window
// is full", client.windowFullMark; WindowFullMark) as one before applying.
const (
	MaxSessionWindow      = 1024
	MaxSessionWindowBytes = 1 << 20
)

// MaxCachedWindows bounds the windowed sessions a shard's state machine
// keeps decoded in memory (each up to MaxSessionWindowBytes, usually a few
// hundred bytes); past it an arbitrary one is dropped and read again from
// its record when next used.
const MaxCachedWindows = 4096

// MaxCachedWindowBytes bounds the results the windows cached by one
// shard's state machine hold, in all: MaxCachedWindows windows of up to
// MaxSessionWindowBytes each would be gigabytes per shard, and any client
// can fill a window with commands that return values. The Go client's
// windows (blind writes, a few bytes a result) stay far below it: 4,096
// windows of 512 results are about 12 MiB.
const MaxCachedWindowBytes = 32 << 20

// window is a windowed session's state on one shard: its record, decoded.
type window struct {
	floor   uint64
	active  int64 // LastActiveUnixNanos
	entries []windowEntry
	bytes   int // the results' encoded size
	dirty   bool
	// counted is what the window adds to the state machine's windowBytes:
	// bytes as of its load or the last Flush that wrote it.
	counted int
}

type windowEntry struct {
	seq    uint64
	result []byte // an encoded storepb.CommandResult
}

// find returns seq's encoded result, if the window holds it.
func (w *window) find(seq uint64) ([]byte, bool) {
	for i := len(w.entries) - 1; i >= 0; i-- { // retries are of recent seqs
		if w.entries[i].seq == seq {
			return w.entries[i].result, true
		}
	}
	return nil, false
}

// raise moves the floor up to floor (never down) and forgets the results
// below it.
func (w *window) raise(floor uint64) {
	if floor <= w.floor {
		return
	}
	w.floor = floor
	kept := w.entries[:0]
	for _, e := range w.entries {
		if e.seq >= floor {
			kept = append(kept, e)
		} else {
			w.bytes -= len(e.result)
		}
	}
	clear(w.entries[len(kept):])
	w.entries = kept
}

// applyWindowed applies c, a command of a windowed session.
func (sm *StateMachine) applyWindowed(b *pebble.Batch, desc *concordpb.ShardDescriptor, e env, now int64, c *storepb.KVCommand) (*storepb.CommandResult, error) {
	id, seq, floor := c.GetSessionId(), c.GetSeq(), c.GetSessionFloor()
	if floor > seq {
		return errResult(codes.InvalidArgument, "session %x: floor %d is above sequence %d", id, floor, seq), nil
	}
	w, err := sm.loadWindow(b, id)
	if errors.Is(err, errSessionMode) {
		return errResult(codes.FailedPrecondition, "session %x sends one request at a time: a request of it carries no floor", id), nil
	}
	if err != nil {
		return nil, err
	}
	if floor > w.floor { // first: the results below it are not needed, answered or not
		w.raise(floor)
		sm.touch(id, w)
	}
	if seq < w.floor {
		return errResult(codes.FailedPrecondition,
			"session %x: sequence %d is below the session's floor %d, already answered", id, seq, w.floor), nil
	}
	if enc, ok := w.find(seq); ok && !(mutant.Enabled && mutant.On(mutant.NoSessionDedup)) {
		res := &storepb.CommandResult{} // a retry: answer as the first time
		if err := proto.Unmarshal(enc, res); err != nil {
			return nil, fmt.Errorf("kv: shard %d: session %x: result of %d: %w", sm.shard, id, seq, err)
		}
		return res, nil
	}
	if len(w.entries) >= MaxSessionWindow || w.bytes >= MaxSessionWindowBytes {
		return errResult(codes.ResourceExhausted,
			"session %x: %d results (%d bytes) above the floor %d: "+WindowFullMark, id, len(w.entries), w.bytes, w.floor), nil
	}
	res, err := sm.applyOps(b, desc, e, c.GetOps())
	if err != nil {
		return nil, err
	}
	if err := w.add(seq, res); err != nil {
		return nil, err
	}
	w.active = now
	sm.touch(id, w)
	return res, nil
}

// touch notes that the batch changed session id's window w: Flush writes
// its record.
func (sm *StateMachine) touch(id uint64, w *window) {
	if !w.dirty {
		w.dirty = true
		sm.deferred.windows = append(sm.deferred.windows, windowRef{id, w})
	}
}

// loadWindow returns session id's window: cached, or read from its record
// in b (a new, empty one if it has none).
func (sm *StateMachine) loadWindow(b pebble.Reader, id uint64) (*window, error) {
	if w, ok := sm.windows[id]; ok {
		return w, nil
	}
	if _, ok := sm.deferred.sessions[id]; ok {
		return nil, errSessionMode
	}
	if _, ok := sm.sessions[id]; ok {
		return nil, errSessionMode
	}
	w := &window{}
	v, found, err := get(b, keys.Session(sm.shard, id))
	if err != nil {
		return nil, err
	}
	if found {
		if err := w.decode(v); err != nil {
			if errors.Is(err, errSessionMode) {
				return nil, err
			}
			return nil, fmt.Errorf("kv: shard %d: session %x: %w", sm.shard, id, err)
		}
	}
	if sm.windows == nil {
		sm.windows = make(map[uint64]*window)
	}
	// Evict windows the batch has not changed (b does not hold a changed
	// one's state yet), arbitrary ones, until there is room: a batch that
	// changed more than MaxCachedWindows left the cache over the bound,
	// and evicting one per load would keep it there.
	for s, old := range sm.windows {
		if len(sm.windows) < MaxCachedWindows {
			break
		}
		if !old.dirty {
			sm.dropWindow(s, old)
		}
	}
	sm.windows[id] = w
	w.counted = w.bytes
	sm.windowBytes += w.counted
	return w, nil
}

// dropWindow takes session id's window w out of the cache; its record,
// in the batch or committed, is the truth it is read from again.
func (sm *StateMachine) dropWindow(id uint64, w *window) {
	delete(sm.windows, id)
	sm.windowBytes -= w.counted
	w.counted = 0
}

// boundWindowBytes evicts cached windows the batch has not changed
// (arbitrary ones: the cache decides no result) until the results they
// hold fit MaxCachedWindowBytes.
func (sm *StateMachine) boundWindowBytes() {
	for s, w := range sm.windows {
		if sm.windowBytes <= MaxCachedWindowBytes {
			return
		}
		if !w.dirty {
			sm.dropWindow(s, w)
		}
	}
}

// decode reads a windowed session's SessionRecord into w; a record of a
// one-at-a-time session (floor 0) is errSessionMode. (A cold path: a
// session's first command on this shard since a start or an eviction.)
func (w *window) decode(v []byte) error {
	var rec storepb.SessionRecord
	if err := proto.Unmarshal(v, &rec); err != nil {
		return err
	}
	if rec.GetFloor() == 0 {
		return errSessionMode
	}
	w.floor, w.active = rec.GetFloor(), rec.GetLastActiveUnixNanos()
	for _, e := range rec.GetWindow() {
		if err := w.add(e.GetSeq(), e.GetResult()); err != nil {
			return err
		}
	}
	return nil
}

// add records res as seq's result.
func (w *window) add(seq uint64, res *storepb.CommandResult) error {
	enc, err := proto.MarshalOptions{}.Marshal(res)
	if err != nil {
		return err
	}
	w.entries = append(w.entries, windowEntry{seq: seq, result: enc})
	w.bytes += len(enc)
	return nil
}

// appendRecord appends w's SessionRecord (fields 3, 4 and 5) to buf.
func (w *window) appendRecord(buf []byte) []byte {
	buf = protowire.AppendTag(buf, 3, protowire.VarintType)
	buf = protowire.AppendVarint(buf, uint64(w.active))
	buf = protowire.AppendTag(buf, 4, protowire.VarintType)
	buf = protowire.AppendVarint(buf, w.floor)
	for _, e := range w.entries {
		buf = protowire.AppendTag(buf, 5, protowire.BytesType)
		n := protowire.SizeTag(1) + protowire.SizeVarint(e.seq)
		if len(e.result) > 0 {
			n += protowire.SizeTag(2) + protowire.SizeBytes(len(e.result))
		}
		buf = protowire.AppendVarint(buf, uint64(n))
		buf = protowire.AppendTag(buf, 1, protowire.VarintType)
		buf = protowire.AppendVarint(buf, e.seq)
		if len(e.result) > 0 {
			buf = protowire.AppendTag(buf, 2, protowire.BytesType)
			buf = protowire.AppendBytes(buf, e.result)
		}
	}
	return buf
}

// windowRef is a window Flush writes: the batch changed it.
type windowRef struct {
	id uint64
	w  *window
}

// flushWindows writes the records of the windows the batch changed.
func (sm *StateMachine) flushWindows() error {
	d := &sm.deferred
	for _, r := range d.windows {
		r.w.dirty = false
		d.buf = r.w.appendRecord(d.buf[:0])
		if err := d.b.Set(d.sessionKey(sm.shard, r.id), d.buf, nil); err != nil {
			return err
		}
		if sm.windows[r.id] == r.w { // cached: account for what the batch added
			sm.windowBytes += r.w.bytes - r.w.counted
			r.w.counted = r.w.bytes
		}
	}
	clear(d.windows)
	d.windows = d.windows[:0]
	sm.boundWindowBytes()
	return nil
}
