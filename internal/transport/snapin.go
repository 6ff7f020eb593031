package transport

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
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
