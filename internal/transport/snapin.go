package transport

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storage"
)

// chunkReader receives a snapshot stream's chunks under an idle deadline
// and a deadline for the whole stream. A gRPC stream's Recv takes no
// deadline of its own and the handler cannot cancel its stream's context,
// so one goroutine receives and hands each chunk over, and next gives up
// on a chunk that takes longer than either deadline allows; the handler
// then returns, which ends the stream and the goroutine's Recv. The
// goroutine holds at most one chunk the handler has not taken.
type chunkReader struct {
	c    chan received
	done chan struct{}
	wait time.Duration
	// end is when the stream must be done (Config.SnapshotStreamTimeout,
	// total, from its start): the idle deadline alone lets a sender that
	// trickles chunks keep the stream for ever.
	end   time.Time
	total time.Duration
}

type received struct {
	chunk *concordpb.SnapshotChunk
	err   error
}

func (t *Transport) newChunkReader(s snapshotStream) *chunkReader {
	total := t.cfg.SnapshotStreamTimeout
	r := &chunkReader{c: make(chan received), done: make(chan struct{}), wait: t.cfg.SnapshotIdleTimeout,
		end: time.Now().Add(total), total: total}
	go r.receive(s)
	return r
}

// receive hands s's chunks to next until Recv fails or the handler is done.
func (r *chunkReader) receive(s snapshotStream) {
	for {
		chunk, err := s.Recv()
		select {
		case r.c <- received{chunk, err}:
		case <-r.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// next returns the stream's next chunk, or an error once it took longer
// than the idle deadline or the stream's end came.
func (r *chunkReader) next() (*concordpb.SnapshotChunk, error) {
	wait, late := r.wait, status.Errorf(codes.DeadlineExceeded, "transport: no snapshot chunk for %v", r.wait)
	if left := time.Until(r.end); left < wait {
		wait, late = left, status.Errorf(codes.DeadlineExceeded, "transport: snapshot stream not done after %v", r.total)
	}
	if wait <= 0 {
		return nil, late
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case x := <-r.c:
		return x.chunk, x.err
	case <-timer.C:
		return nil, late
	}
}

// close ends the handler's use of the reader; its goroutine returns once
// the stream ends.
func (r *chunkReader) close() { close(r.done) }

// A refused snapshot stream's status (ResourceExhausted) carries an
// errdetails.ErrorInfo of snapRefusalDomain whose reason says which kind
// of refusal it is, for the sender's backoff (snapshotBackoff.note); the
// message is for people, and matching its text would tie the sender to
// every wording the receiver ever used.
const (
	snapRefusalDomain = "concord.transport.snapshot"
	// refusedBusy: every receive slot is taken (MaxInboundSnapshots).
	// Ordinary contention while a node catches up many shards at once: a
	// slot frees as soon as any stream ends, so the sender asks again at
	// raft's next heartbeat answer, without a backoff.
	refusedBusy = "RECEIVE_SLOTS_BUSY"
	// refusedNoRoom: too many staged snapshots (MaxStagedSnapshots), a
	// stream past MaxSnapshotBytes, or too little disk
	// (SnapshotDiskMargin). These free slowly if at all, so the sender
	// backs off the node.
	refusedNoRoom = "NO_ROOM"
)

// refusal is a ResourceExhausted status marked with reason.
func refusal(reason, format string, args ...any) error {
	st := status.Newf(codes.ResourceExhausted, format, args...)
	if marked, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: snapRefusalDomain}); err == nil {
		st = marked // it fails only if the detail cannot be marshalled
	}
	return st.Err()
}

// refusalReason is the reason err's status is marked with; "" if it has
// none: not a refusal, or one from a receiver from before the marks.
func refusalReason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == snapRefusalDomain {
			return info.GetReason()
		}
	}
	return ""
}

// DefaultMaxSnapshotBytes and DefaultSnapshotDiskMargin are the defaults
// of Config.MaxSnapshotBytes and Config.SnapshotDiskMargin.
const (
	DefaultMaxSnapshotBytes   = 64 << 30
	DefaultSnapshotDiskMargin = 1 << 30
)

// reserveStaged counts a stream against Config.MaxStagedSnapshots, the
// received snapshots with files on disk (streams being received, and
// those raft has not taken or not yet discarded), or refuses it if that
// many are counted. Counting in the check (not when the stream's writer
// starts, after its first chunk) keeps streams that arrive together from
// all passing it. The caller releases the reservation once done with it.
func (t *Transport) reserveStaged() (*storage.SnapshotReservation, error) {
	r, n := t.sink.ReserveSnapshot(t.cfg.MaxStagedSnapshots)
	if r == nil {
		return nil, refusal(refusedNoRoom,
			"transport: %d received snapshots staged on disk already (at most %d); try later", n, t.cfg.MaxStagedSnapshots)
	}
	return r, nil
}

// checkChunk adds chunk's pairs to *total, the stream's bytes so far, and
// refuses the chunk if the stream goes past Config.MaxSnapshotBytes or
// writing it would leave less than Config.SnapshotDiskMargin free. The
// stream declares no size, so both are checked as it goes.
func (t *Transport) checkChunk(total *int64, chunk *concordpb.SnapshotChunk) error {
	var n int64
	for _, kv := range chunk.GetKvs() {
		n += int64(len(kv.GetKey()) + len(kv.GetValue()))
	}
	*total += n
	if *total > t.cfg.MaxSnapshotBytes {
		return refusal(refusedNoRoom, "transport: snapshot stream past %d bytes (MaxSnapshotBytes)",
			t.cfg.MaxSnapshotBytes)
	}
	return t.checkSpace(n)
}

// checkSpace refuses to stage n more bytes if that would leave less than
// Config.SnapshotDiskMargin free on the data dir's file system. A file
// system that cannot tell (in memory) is not checked.
func (t *Transport) checkSpace(n int64) error {
	margin := t.cfg.SnapshotDiskMargin
	if margin < 0 {
		return nil
	}
	free, err := t.sink.StagingSpace()
	if errors.Is(err, storage.ErrSpaceUnknown) {
		return nil
	}
	if err != nil {
		return status.Errorf(codes.Internal, "transport: snapshot refused: %v", err)
	}
	if free < uint64(margin) || free-uint64(margin) < uint64(n) {
		return refusal(refusedNoRoom,
			"transport: snapshot refused: %d bytes free on the data dir's file system, %d more would leave less than %d (SnapshotDiskMargin)",
			free, n, margin)
	}
	return nil
}
