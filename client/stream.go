package client

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

// The client's requests to one node travel on one KV.Stream: concurrent
// calls are queued, and one sender writes every call queued so far as one
// message, so a busy client pays one HTTP/2 frame (and one server read) per
// batch instead of per request. Replies come back by id, batched likewise.
// streamKV presents that as a concordpb.KVClient, so the retry loop (call)
// is the same on either path; a node that does not serve Stream (an older
// version) is used through unary calls instead.

// maxStreamBatchBytes bounds one outgoing message (well under the gRPC
// message limit); calls past it wait for the next message.
const maxStreamBatchBytes = 4 << 20

// errNoStream says the node does not serve KV.Stream; the call was not
// served and goes unary.
var errNoStream = errors.New("concord: node does not serve KV.Stream")

// errNotSent fails a call whose attempt ended while it still waited in the
// queue (the node's stream could not be opened in time): it never left
// this process, so it is no reason to think a mutation applied (notSent).
var errNotSent = status.Error(codes.Unavailable, "concord: the request was not sent: "+notSentMark)

type pendingCall struct {
	msg   *concordpb.StreamCall
	res   chan callResult // buffered: the deliverer never blocks
	timer *time.Timer     // the call's deadline; stopped while unused
}

type callResult struct {
	reply *concordpb.StreamReply
	err   error
}

// streamMux multiplexes calls to one node over its current stream.
type streamMux struct {
	unary  concordpb.KVClient
	openFn func(ctx context.Context) (callStream, error) // the framed wire's; nil: KV.Stream over gRPC
	ctx    context.Context                               // the mux's life: ends with Client.Close
	cancel context.CancelFunc
	wake   chan struct{}
	start  sync.Once

	mu          sync.Mutex
	queue       []*pendingCall
	spare       []*pendingCall // an empty array for the queue (recycleBatch)
	lent        bool           // the sender's batch is a whole former queue array
	cur         *streamConn    // nil: opened by the next send
	nextID      uint64
	unsupported bool

	// grpcUntil: until then the stream goes over gRPC, the node having
	// answered the framed wire's hello as one that does not speak it. The
	// sender's alone.
	grpcUntil time.Time

	// req is the sender's message, reused on the framed wire.
	req concordpb.StreamRequest

	// fromNode, cluster and sent are PeerWire's (nil for clients).
	fromNode func() uint64
	cluster  func() uint64
	sent     func(framed bool, calls int)
}

// callStream is what calls go over: a gRPC KV.Stream, or a framed TCP
// connection (wire.go). Send is called by the sender alone, Recv by the
// receiver alone.
type callStream interface {
	Send(*concordpb.StreamRequest) error
	Recv() (*concordpb.StreamResponse, error)
}

// streamConn is one stream and the calls sent on it awaiting replies.
type streamConn struct {
	s       callStream
	pending map[uint64]*pendingCall // guarded by the mux's mu
	done    bool                    // broken; guarded by the mux's mu
}

func newStreamMux(conn grpc.ClientConnInterface) *streamMux {
	ctx, cancel := context.WithCancel(context.Background())
	return &streamMux{unary: concordpb.NewKVClient(conn), ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
}

func (m *streamMux) close() { m.cancel() }

// do sends one call and waits for its reply, for ctx to end, or for ctx's
// deadline: it arms a timer of its own for that, so that the client's
// attemptCtx, whose Done does not close at its deadline, needs none.
func (m *streamMux) do(ctx context.Context, msg *concordpb.StreamCall) (*concordpb.StreamReply, error) {
	p := getPending()
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		msg.TimeoutMs = uint32(max(left.Milliseconds(), 1))
		p.timer.Reset(left)
	}
	p.msg = msg
	m.mu.Lock()
	if m.unsupported {
		m.mu.Unlock()
		putPending(p)
		return nil, errNoStream
	}
	m.nextID++
	msg.Id = m.nextID
	m.queue = append(m.queue, p)
	m.mu.Unlock()
	m.start.Do(func() { go m.sendLoop() })
	select {
	case m.wake <- struct{}{}:
	default:
	}
	var err error
	select {
	case r := <-p.res: // delivered once out of the queue and the pending set
		putPending(p)
		if r.err != nil {
			return nil, r.err
		}
		if r.reply.GetCode() != 0 {
			return nil, status.Error(codes.Code(r.reply.GetCode()), r.reply.GetMessage())
		}
		return r.reply, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-p.timer.C:
		err = context.DeadlineExceeded
	case <-m.ctx.Done():
		err = errClientClosed
	}
	unsent, found := m.forget(p)
	if found {
		putPending(p)
	} else {
		p.timer.Stop()
	}
	switch {
	case err == errClientClosed:
		return nil, err
	case unsent:
		return nil, errNotSent
	}
	return nil, status.FromContextError(err).Err()
}

var errClientClosed = status.Error(codes.Canceled, "concord: client closed")

// pendingPool recycles pendingCalls, with their channel and timer: a
// call that allocated both took a good part of a loaded client's
// allocations per op.
var pendingPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pendingCall{res: make(chan callResult, 1), timer: t}
}}

func getPending() *pendingCall { return pendingPool.Get().(*pendingCall) }

// putPending recycles p once no one else holds it: it was answered (a
// deliverer takes a call out of the queue or the pending set, under the
// mux's lock, before it delivers, and never touches it after), or forget
// found it in one of them. Its channel is then empty.
func putPending(p *pendingCall) {
	p.timer.Stop()
	p.msg = nil
	pendingPool.Put(p)
}

// forget drops a call whose caller gave up (its reply, if any, is
// dropped). It reports whether the call was still queued, so certainly
// never sent (once the sender has taken it, it may have been), and
// whether it was found queued or awaiting its reply: then no one holds p
// any more, and it may be recycled. A call the sender holds between the
// queue and the pending set is not: the sender may still file it there
// and deliver to it.
func (m *streamMux) forget(p *pendingCall) (unsent, found bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, q := range m.queue {
		if q == p {
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			return true, true
		}
	}
	if m.cur != nil {
		if q, ok := m.cur.pending[p.msg.GetId()]; ok && q == p {
			delete(m.cur.pending, p.msg.GetId())
			return false, true
		}
	}
	return false, false
}

// sendLoop writes what is queued, one message per wake-up (calls queued
// while a send is in progress go together in the next).
func (m *streamMux) sendLoop() {
	for {
		select {
		case <-m.wake:
		case <-m.ctx.Done():
			m.failAll(status.Error(codes.Canceled, "concord: client closed"))
			return
		}
		if m.openFn != nil {
			// The framed wire writes each message at once, where gRPC's
			// writer goroutine runs later and sends every message queued by
			// then in one write: yielding first lets the callers that are
			// ready queue their calls into this message.
			runtime.Gosched()
		}
		for m.sendQueued() {
		}
	}
}

// sendQueued sends one message of queued calls; it reports whether calls
// are left in the queue (past the message size bound).
func (m *streamMux) sendQueued() bool {
	m.mu.Lock()
	if m.unsupported {
		for _, p := range m.queue {
			p.res <- callResult{err: errNoStream}
		}
		m.queue = nil
	}
	conn := m.cur
	if conn == nil && len(m.queue) > 0 {
		// The stream is opened with the calls still queued: opening one to
		// a stalled node takes seconds (wireDialTimeout, gRPC's connect),
		// and a call whose attempt ends meanwhile is then found queued by
		// forget, so certainly unsent. Taken out of the queue first, as
		// they were, they read as sent: a write no node had seen came back
		// ErrAmbiguous.
		m.mu.Unlock()
		var err error
		if conn, err = m.open(); err != nil {
			m.mu.Lock()
			batch := m.takeBatch()
			m.mu.Unlock()
			for _, p := range batch {
				p.res <- callResult{err: err} // never sent: the caller may retry anywhere
			}
			return m.queued()
		}
		m.mu.Lock()
	}
	batch := m.takeBatch()
	m.mu.Unlock()
	if len(batch) == 0 {
		return false
	}
	// The framed wire encodes the request before Send returns: its
	// message and call list are the sender's, reused. gRPC's may hold a
	// message after SendMsg (stats handlers): a fresh one each time.
	_, framed := conn.s.(*framedStream)
	req := &m.req
	if !framed {
		req = &concordpb.StreamRequest{}
	}
	msgs := req.Calls[:0]
	m.mu.Lock()
	if conn.done { // broke before these were sent: they go on the next stream
		m.queue = append(batch, m.queue...)
		m.mu.Unlock()
		return true
	}
	for _, p := range batch {
		conn.pending[p.msg.GetId()] = p
		msgs = append(msgs, p.msg)
	}
	m.recycleBatch(batch)
	m.mu.Unlock()
	// A failed Send means the stream broke; Recv, in the receiver, gets
	// the reason and fails every call sent on it.
	req.Calls = msgs
	if framed {
		defer func() {
			clear(req.Calls) // drop the calls for the collector
			req.Calls, req.FromNodeId, req.ClusterId = req.Calls[:0], 0, 0
		}()
	}
	if m.fromNode != nil {
		req.FromNodeId = m.fromNode()
	}
	if m.cluster != nil {
		req.ClusterId = m.cluster()
	}
	if m.sent != nil { // before the send, so a caller answered has been counted
		m.sent(framed, len(msgs))
	}
	_ = conn.s.Send(req)
	return m.queued()
}

// takeBatch takes queued calls up to maxStreamBatchBytes and
// frame.MaxStreamCalls calls and batch ops, which a node refuses past (at
// least one).
func (m *streamMux) takeBatch() []*pendingCall {
	n, size, elems := 0, 0, 0
	for n < len(m.queue) {
		msg := m.queue[n].msg
		s, e := callSize(msg), 1+len(msg.GetBatch().GetOps())
		if n > 0 && (size+s > maxStreamBatchBytes || elems+e > frame.MaxStreamCalls) {
			break
		}
		size, elems = size+s, elems+e
		n++
	}
	if n == len(m.queue) { // all of it: the spare array takes new calls
		batch := m.queue
		m.queue, m.spare = m.spare[:0], nil
		m.lent = true
		return batch
	}
	batch := m.queue[:n:n] // shares the queue's array: not recycled
	m.queue = m.queue[n:]
	m.lent = false
	return batch
}

// recycleBatch keeps the array of a batch that took the whole queue as the
// next spare, so that a queue refilled after each message costs no
// allocation. Called with mu held, once the sender is done with batch.
func (m *streamMux) recycleBatch(batch []*pendingCall) {
	if !m.lent || m.spare != nil || cap(batch) > maxSpareQueue {
		return
	}
	clear(batch)
	m.spare, m.lent = batch[:0], false
}

// maxSpareQueue bounds the spare queue array kept (calls).
const maxSpareQueue = 4096

func (m *streamMux) queued() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue) > 0
}

// open starts a stream and its receiver.
func (m *streamMux) open() (*streamConn, error) {
	s, err := m.openStream()
	if err != nil {
		return nil, err
	}
	conn := &streamConn{s: s, pending: map[uint64]*pendingCall{}}
	m.mu.Lock()
	m.cur = conn
	m.mu.Unlock()
	go m.receive(conn)
	return conn, nil
}

// openStream opens a stream over the framed wire, or over gRPC: without
// the wire, for a node found not to speak it (for wireReprobe since), and
// when it turns out not to.
func (m *streamMux) openStream() (callStream, error) {
	if m.openFn == nil || time.Now().Before(m.grpcUntil) {
		return m.unary.Stream(m.ctx)
	}
	s, err := m.openFn(m.ctx)
	if errors.Is(err, errNoWire) {
		m.grpcUntil = time.Now().Add(wireReprobe)
		return m.unary.Stream(m.ctx)
	}
	return s, err
}

// receive delivers replies until the stream ends, then fails the calls
// still waiting on it.
func (m *streamMux) receive(conn *streamConn) {
	for {
		resp, err := conn.s.Recv()
		if err != nil {
			m.broken(conn, err)
			return
		}
		if r := refusal(resp); r != nil {
			m.broken(conn, r)
			return
		}
		m.mu.Lock()
		for _, r := range resp.GetReplies() {
			if p, ok := conn.pending[r.GetId()]; ok {
				delete(conn.pending, r.GetId())
				p.res <- callResult{reply: r}
			}
		}
		m.mu.Unlock()
	}
}

// broken retires conn. Its calls were sent, so for a mutation the outcome
// is unknown: they fail Unavailable with a message that marks them neither
// refused nor unsent, and the retry loop treats them as possibly applied.
// A node without Stream (Unimplemented) served none of them.
func (m *streamMux) broken(conn *streamConn, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	conn.done = true
	if m.cur == conn {
		m.cur = nil
	}
	fail := status.Errorf(codes.Unavailable, "concord: the request stream to the node broke (%s) after the request was sent", status.Code(err))
	switch status.Code(err) {
	case codes.Unimplemented:
		m.unsupported, fail = true, errNoStream
	case codes.Unauthenticated, codes.PermissionDenied: // refused before serving any call
		fail = err
	}
	for id, p := range conn.pending {
		delete(conn.pending, id)
		p.res <- callResult{err: fail}
	}
}

// failAll fails the queued calls and those awaiting replies.
func (m *streamMux) failAll(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.queue {
		p.res <- callResult{err: err}
	}
	m.queue = nil
	if m.cur != nil {
		for id, p := range m.cur.pending {
			delete(m.cur.pending, id)
			p.res <- callResult{err: err}
		}
	}
}

// getCall and putCall are a call and its oneof wrapper in one allocation.
type getCall struct {
	call concordpb.StreamCall
	w    concordpb.StreamCall_Get
}

type putCall struct {
	call concordpb.StreamCall
	w    concordpb.StreamCall_Put
}

// streamKV is a concordpb.KVClient whose calls travel on a streamMux,
// falling back to unary calls on a node without Stream.
type streamKV struct{ m *streamMux }

var _ concordpb.KVClient = streamKV{}

func (k streamKV) Get(ctx context.Context, in *concordpb.GetRequest, opts ...grpc.CallOption) (*concordpb.GetResponse, error) {
	c := &getCall{w: concordpb.StreamCall_Get{Get: in}}
	c.call.Request = &c.w
	r, err := k.m.do(ctx, &c.call)
	if errors.Is(err, errNoStream) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		return k.m.unary.Get(ctx, in, opts...)
	}
	return r.GetGet(), err
}

func (k streamKV) Put(ctx context.Context, in *concordpb.PutRequest, opts ...grpc.CallOption) (*concordpb.PutResponse, error) {
	c := &putCall{w: concordpb.StreamCall_Put{Put: in}}
	c.call.Request = &c.w
	r, err := k.m.do(ctx, &c.call)
	if errors.Is(err, errNoStream) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		return k.m.unary.Put(ctx, in, opts...)
	}
	return r.GetPut(), err
}

func (k streamKV) Delete(ctx context.Context, in *concordpb.DeleteRequest, opts ...grpc.CallOption) (*concordpb.DeleteResponse, error) {
	r, err := k.m.do(ctx, &concordpb.StreamCall{Request: &concordpb.StreamCall_Delete{Delete: in}})
	if errors.Is(err, errNoStream) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		return k.m.unary.Delete(ctx, in, opts...)
	}
	return r.GetDelete(), err
}

func (k streamKV) CompareAndSwap(ctx context.Context, in *concordpb.CompareAndSwapRequest, opts ...grpc.CallOption) (*concordpb.CompareAndSwapResponse, error) {
	r, err := k.m.do(ctx, &concordpb.StreamCall{Request: &concordpb.StreamCall_CompareAndSwap{CompareAndSwap: in}})
	if errors.Is(err, errNoStream) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		return k.m.unary.CompareAndSwap(ctx, in, opts...)
	}
	return r.GetCompareAndSwap(), err
}

func (k streamKV) Scan(ctx context.Context, in *concordpb.ScanRequest, opts ...grpc.CallOption) (*concordpb.ScanResponse, error) {
	r, err := k.m.do(ctx, &concordpb.StreamCall{Request: &concordpb.StreamCall_Scan{Scan: in}})
	if errors.Is(err, errNoStream) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		return k.m.unary.Scan(ctx, in, opts...)
	}
	return r.GetScan(), err
}

func (k streamKV) Batch(ctx context.Context, in *concordpb.BatchRequest, opts ...grpc.CallOption) (*concordpb.BatchResponse, error) {
	r, err := k.m.do(ctx, &concordpb.StreamCall{Request: &concordpb.StreamCall_Batch{Batch: in}})
	if errors.Is(err, errNoStream) {
		ctx, cancel := bounded(ctx)
		defer cancel()
		return k.m.unary.Batch(ctx, in, opts...)
	}
	return r.GetBatch(), err
}

func (k streamKV) Stream(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[concordpb.StreamRequest, concordpb.StreamResponse], error) {
	return k.m.unary.Stream(ctx, opts...)
}
