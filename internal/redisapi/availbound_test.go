package redisapi

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// stuckKV is fakeKV whose Put waits as one to a shard without a quorum
// does: until its context ends, unless more than gate Puts are in flight
// at once (then every waiting one is answered: nothing bounded them). It
// counts the Puts in flight, and the most at once.
type stuckKV struct {
	*fakeKV
	gate     int32
	inFlight atomic.Int32
	most     atomic.Int32
	once     sync.Once
	past     chan struct{} // closed once more than gate were in flight
}

func (k *stuckKV) Put(ctx context.Context, _ *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	n := k.inFlight.Add(1)
	defer k.inFlight.Add(-1)
	for m := k.most.Load(); n > m && !k.most.CompareAndSwap(m, n); m = k.most.Load() {
	}
	if n > k.gate {
		k.once.Do(func() { close(k.past) })
	}
	select {
	case <-k.past:
		return &concordpb.PutResponse{Header: &concordpb.ResponseHeader{Tentative: true}}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// streamConn is a client that sends in at once, counts the bytes of the
// replies, and hangs up once everything was read.
type streamConn struct {
	net.Conn
	in      *bytes.Reader
	written int
}

func (s *streamConn) Read(b []byte) (int, error)       { return s.in.Read(b) }
func (s *streamConn) Write(b []byte) (int, error)      { s.written += len(b); return len(b), nil }
func (s *streamConn) SetWriteDeadline(time.Time) error { return nil }
func (s *streamConn) Close() error                     { return nil }

// TestAvailableWritesInFlightBounded: a client that pipelines more plain
// SETs under available than one pipeline step reads (maxPipeline) to a
// node whose shard cannot answer has at most maxPipeline of them waiting
// for the shard at once, each on a goroutine of its own, not one per SET
// it sent: the connection reads the next commands only once the ones
// before were answered. Every SET is still answered, in order.
func TestAvailableWritesInFlightBounded(t *testing.T) {
	const sets = maxPipeline + 1
	k := &stuckKV{fakeKV: &fakeKV{}, gate: maxPipeline, past: make(chan struct{})}
	s := New(k, Config{CommandTimeout: 500 * time.Millisecond})
	defer s.Close(time.Second)
	cmds := []string{"CONCORD.CONSISTENCY available"}
	for i := range sets {
		cmds = append(cmds, fmt.Sprintf("SET k%d v", i))
	}
	sc := &streamConn{in: bytes.NewReader([]byte(encode(cmds...)))}
	newConn(s, sc, 1).serve()
	if most := k.most.Load(); most > maxPipeline {
		t.Fatalf("%d available SETs waited for their shard at once, want at most %d (one pipeline step)", most, maxPipeline)
	}
	// Each SET timed out (its shard never answered) as the connection's
	// command timeout: AMBIGUOUS, the connection's reply first.
	want := len("+OK\r\n") + sets*len(ambiguousReply(t))
	if sc.written != want {
		t.Errorf("wrote %d bytes of replies, want %d", sc.written, want)
	}
}

// ambiguousReply is the reply to a SET whose call ran out of time.
func ambiguousReply(t *testing.T) string {
	t.Helper()
	msg := fromStatus(status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error()), true).Error()
	if !strings.HasPrefix(msg, "AMBIGUOUS") {
		t.Fatalf("a write past its deadline answers %q, want AMBIGUOUS", msg)
	}
	return "-" + msg + "\r\n"
}
