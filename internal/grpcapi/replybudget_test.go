package grpcapi

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
)

// stalledStream is a callStream whose client reads slowly: its first Send
// waits for gate, as a send to a client that does not read waits for it.
type stalledStream struct {
	reqs    chan *concordpb.StreamRequest // Recv's; closed: the client's side ends
	gate    chan struct{}
	entered chan struct{} // closed when the first Send starts

	mu    sync.Mutex
	sends []*concordpb.StreamResponse // guarded by mu
}

func (s *stalledStream) Recv() (*concordpb.StreamRequest, error) {
	req, ok := <-s.reqs
	if !ok {
		return nil, io.EOF
	}
	return req, nil
}

func (s *stalledStream) Send(m *concordpb.StreamResponse) error {
	s.mu.Lock()
	s.sends = append(s.sends, m)
	first := len(s.sends) == 1
	s.mu.Unlock()
	if first {
		close(s.entered)
		<-s.gate
	}
	return nil
}

// TestQueuedRepliesBoundedInBytes: while a stream's client reads slowly,
// the replies ready and not yet sent hold at most the queued replies'
// bound (here 1 MiB): the calls that finish past it wait, so no message
// sent carries more than the bound unless it is one reply alone. Before,
// every finished call's reply queued (up to 512 in the queue and 4,096
// waiting on it), 10 MiB of get replies here, however large.
func TestQueuedRepliesBoundedInBytes(t *testing.T) {
	const (
		calls   = 40
		valSize = 256 << 10
		bound   = 1 << 20
	)
	f := newFakeNode(t, 1, 4, 1)
	keys := fillShards(f, calls)
	big := bytes.Repeat([]byte("v"), valSize)
	for _, kvs := range f.data {
		for _, kv := range kvs {
			kv.Value = big
		}
	}
	var served atomic.Int32
	s := NewKV(f, testLimits).WithCallInterceptors(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer served.Add(1)
		return h(ctx, req)
	})
	s.maxQueuedReplyBytes = bound
	st := &stalledStream{reqs: make(chan *concordpb.StreamRequest, 1), gate: make(chan struct{}), entered: make(chan struct{})}
	var req concordpb.StreamRequest
	for i, k := range keys {
		req.Calls = append(req.Calls, &concordpb.StreamCall{Id: uint64(i + 1), Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{
			Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Key: []byte(k)}}})
	}
	st.reqs <- &req
	close(st.reqs)
	done := make(chan error, 1)
	go func() { done <- s.serveStream(context.Background(), st) }()
	<-st.entered
	// Every get has run: its reply is queued, or waits to be.
	waitFor(t, func() bool { return served.Load() == calls })
	close(st.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	answered := map[uint64]bool{}
	for i, m := range st.sends {
		var n int64
		for _, r := range m.GetReplies() {
			if len(r.GetGet().GetValue()) != valSize {
				t.Fatalf("reply %d: code %d %q, %d bytes of value", r.GetId(), r.GetCode(), r.GetMessage(), len(r.GetGet().GetValue()))
			}
			answered[r.GetId()] = true
			n += replyBytes(r)
		}
		if n > bound && len(m.GetReplies()) > 1 {
			t.Fatalf("message %d carried %d replies, %d bytes: over the %d-byte bound of queued replies", i, len(m.GetReplies()), n, bound)
		}
	}
	if len(answered) != calls {
		t.Fatalf("%d calls answered, want %d", len(answered), calls)
	}
}

// TestReplyLargerThanTheBoundGoesAlone: a reply larger than the queued
// replies' bound is still sent, alone, rather than wait for ever.
func TestReplyLargerThanTheBoundGoesAlone(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	keys := fillShards(f, 3)
	for _, kvs := range f.data {
		for _, kv := range kvs {
			kv.Value = bytes.Repeat([]byte("v"), 64<<10)
		}
	}
	s := NewKV(f, testLimits)
	s.maxQueuedReplyBytes = 1 << 10
	st := &stalledStream{reqs: make(chan *concordpb.StreamRequest, 1), gate: make(chan struct{}), entered: make(chan struct{})}
	close(st.gate)
	var req concordpb.StreamRequest
	for i, k := range keys {
		req.Calls = append(req.Calls, &concordpb.StreamCall{Id: uint64(i + 1), Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{
			Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Key: []byte(k)}}})
	}
	st.reqs <- &req
	close(st.reqs)
	if err := s.serveStream(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range st.sends {
		if len(m.GetReplies()) != 1 {
			t.Fatalf("a message of %d replies of 64 KiB each, past a bound of 1 KiB", len(m.GetReplies()))
		}
		n++
	}
	if n != len(keys) {
		t.Fatalf("%d replies sent, want %d", n, len(keys))
	}
}

// steppedStream is a callStream whose client reads one message at a time
// when the test says: each Send shows its message on sent, then waits for
// a token on proceed (closed: every Send returns at once).
type steppedStream struct {
	reqs    chan *concordpb.StreamRequest // Recv's; closed: the client's side ends
	sent    chan *concordpb.StreamResponse
	proceed chan struct{}
}

func (s *steppedStream) Recv() (*concordpb.StreamRequest, error) {
	req, ok := <-s.reqs
	if !ok {
		return nil, io.EOF
	}
	return req, nil
}

func (s *steppedStream) Send(m *concordpb.StreamResponse) error {
	s.sent <- m
	<-s.proceed
	return nil
}

// lineLen is how many acquires wait on b.
func (b *byteBudget) lineLen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.line)
}

// TestLargeReplyNotStarvedBySmallOnes: a reply larger than the queued
// replies' bound, which waits while a small one is being sent, is sent
// next, before the small replies of calls that finish after it, though
// those keep finishing before the one being sent is done (so the queue is
// never empty). Before, each of them took the room the large one waited
// for, and the large one, which needs the queue empty, was never sent.
func TestLargeReplyNotStarvedBySmallOnes(t *testing.T) {
	const (
		small = 100
		large = 2000
		bound = 1000
		calls = 40 // the small ones; the large one is the last key
	)
	f := newFakeNode(t, 1, 4, 1)
	keys := fillShards(f, calls+1)
	big := keys[calls]
	for _, kvs := range f.data {
		for _, kv := range kvs {
			kv.Value = bytes.Repeat([]byte("v"), small)
			if string(kv.Key) == big {
				kv.Value = bytes.Repeat([]byte("v"), large)
			}
		}
	}
	// Each get runs once the test opens its key's gate.
	gates := map[string]chan struct{}{}
	for _, k := range keys {
		gates[k] = make(chan struct{})
	}
	s := NewKV(f, testLimits).WithCallInterceptors(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		<-gates[string(req.(*concordpb.GetRequest).GetKey())]
		return h(ctx, req)
	})
	s.maxQueuedReplyBytes = bound
	budgets := make(chan *byteBudget, 1)
	s.replyBudgetSeen = func(b *byteBudget) { budgets <- b }
	st := &steppedStream{reqs: make(chan *concordpb.StreamRequest, 1), sent: make(chan *concordpb.StreamResponse, calls+1), proceed: make(chan struct{})}
	var req concordpb.StreamRequest
	for i, k := range keys {
		req.Calls = append(req.Calls, &concordpb.StreamCall{Id: uint64(i + 1), Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{
			Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Key: []byte(k)}}})
	}
	st.reqs <- &req
	close(st.reqs)
	done := make(chan error, 1)
	go func() { done <- s.serveStream(context.Background(), st) }()
	b := <-budgets

	sentIDs := func(m *concordpb.StreamResponse) []uint64 {
		var ids []uint64
		for _, r := range m.GetReplies() {
			ids = append(ids, r.GetId())
		}
		return ids
	}
	// The first small reply is being sent; the large one waits for room.
	close(gates[keys[0]])
	if got := sentIDs(<-st.sent); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("first message: replies %v, want [1]", got)
	}
	close(gates[big])
	waitFor(t, func() bool { return b.lineLen() == 1 })
	// The small ones finish one at a time, each before the one being sent
	// is done: each waits behind the large one, or (before) is queued.
	k := 1
	for ; ; k++ {
		if k == calls {
			t.Fatalf("%d small replies sent ahead of a large one waiting before them: it starves", calls-1)
		}
		close(gates[keys[k]])
		waitFor(t, func() bool { return b.lineLen() == 2 || b.inUse() == 2*small })
		if b.lineLen() == 2 {
			break
		}
		st.proceed <- struct{}{}
		if got := sentIDs(<-st.sent); !slices.Equal(got, []uint64{uint64(k + 1)}) {
			t.Fatalf("message %d: replies %v, want [%d]", k+1, got, k+1)
		}
	}
	// Once the small one being sent is done, the large one goes, alone,
	// then the small one behind it.
	st.proceed <- struct{}{}
	if got := sentIDs(<-st.sent); !slices.Equal(got, []uint64{calls + 1}) {
		t.Fatalf("after the first reply: replies %v, want the large one alone, [%d]", got, calls+1)
	}
	st.proceed <- struct{}{}
	if got := sentIDs(<-st.sent); !slices.Equal(got, []uint64{uint64(k + 1)}) {
		t.Fatalf("after the large reply: replies %v, want [%d]", got, k+1)
	}
	close(st.proceed)
	for _, k := range keys[k+1 : calls] {
		close(gates[k])
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
