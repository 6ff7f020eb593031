package grpcapi

import (
	"cmp"
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Stream limits. A stream's calls run concurrently, at most
// maxStreamInFlight at a time: past that the handler stops reading, and
// gRPC's flow control pushes back on the client. Replies that are ready
// together leave in one message of at most maxRepliesPerMessage.
const (
	maxStreamInFlight    = 4096
	maxRepliesPerMessage = 512
	defaultCallTimeout   = 30 * time.Second
)

// maxStreamInFlightBytes bounds the request bytes of a framed
// connection's calls in flight (each call charged its share of its
// message): past it the reader waits for calls to end, as it waits for a
// slot. A call may hold its message's bytes (a put's value, or unknown
// fields proto keeps) until it ends, so 4,096 calls of a 64 MiB message
// each were 256 GiB. A message is read whenever nothing is in flight,
// however large. A gRPC stream reports no message sizes: gRPC bounds
// only each message (MaxRecvMsgSize).
const maxStreamInFlightBytes = 64 << 20

// maxQueuedReplyBytes bounds the bytes of a stream's replies that are
// ready and not yet sent (queued, or in the message being sent): past it
// a call's worker waits, holding its slot, for the sender to catch up, as
// the reader waits on maxStreamInFlightBytes. Up to maxStreamInFlight
// finished calls and two messages of maxRepliesPerMessage replies were
// otherwise held whole, however large their values (a scan page or a get
// of megabytes each) while the client read slowly. The calls waiting get
// room in the order they began to wait (byteBudget): a large reply holds
// back the later ones until it fits, and one larger than the bound goes,
// alone, once the replies queued before it are sent; a steady stream of
// small replies cannot starve it. A reply counts the keys and values it
// carries (replyBytes); one that carries none does not wait.
const maxQueuedReplyBytes = 64 << 20

// WithCallInterceptors sets what runs around every call of a Stream, as
// the server's unary interceptors run around a unary call (tracking,
// metrics), so a request is accounted the same way on either path.
func (s *KV) WithCallInterceptors(ics ...grpc.UnaryServerInterceptor) *KV {
	s.methods = s.streamMethods(ics)
	return s
}

// The unary methods a stream call may name, as indexes into KV.methods.
const (
	methodGet = iota
	methodPut
	methodDelete
	methodCompareAndSwap
	methodScan
	methodBatch
	numMethods
)

// streamMethod is a unary method as a stream call runs it: its info and
// its handler with the call interceptors around it, built once, so a call
// allocates neither (a UnaryServerInfo, a closure per interceptor and one
// for the handler were five allocations per put).
type streamMethod struct {
	info *grpc.UnaryServerInfo
	run  grpc.UnaryHandler
}

// streamMethods builds every method's streamMethod with ics around it, the
// first outermost, as a unary call's interceptors run.
func (s *KV) streamMethods(ics []grpc.UnaryServerInterceptor) *[numMethods]streamMethod {
	base := [numMethods]struct {
		name string
		h    grpc.UnaryHandler
	}{
		methodGet:    {"Get", func(ctx context.Context, req any) (any, error) { return s.Get(ctx, req.(*concordpb.GetRequest)) }},
		methodPut:    {"Put", func(ctx context.Context, req any) (any, error) { return s.Put(ctx, req.(*concordpb.PutRequest)) }},
		methodDelete: {"Delete", func(ctx context.Context, req any) (any, error) { return s.Delete(ctx, req.(*concordpb.DeleteRequest)) }},
		methodCompareAndSwap: {"CompareAndSwap", func(ctx context.Context, req any) (any, error) {
			return s.CompareAndSwap(ctx, req.(*concordpb.CompareAndSwapRequest))
		}},
		methodScan:  {"Scan", func(ctx context.Context, req any) (any, error) { return s.Scan(ctx, req.(*concordpb.ScanRequest)) }},
		methodBatch: {"Batch", func(ctx context.Context, req any) (any, error) { return s.Batch(ctx, req.(*concordpb.BatchRequest)) }},
	}
	var out [numMethods]streamMethod
	for i, m := range base {
		info := &grpc.UnaryServerInfo{Server: s, FullMethod: kvMethod + m.name}
		h := m.h
		for j := len(ics) - 1; j >= 0; j-- {
			ic, next := ics[j], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		out[i] = streamMethod{info: info, run: h}
	}
	return &out
}

// Stream serves many calls per message: each call runs as its unary
// method would, concurrently with the others, and its reply joins the next
// message back. The stream ends when the client closes its side (after
// every call in flight is answered) or the connection goes.
func (s *KV) Stream(stream concordpb.KV_StreamServer) error {
	return s.serveStream(stream.Context(), stream)
}

// callStream is what a stream of calls comes over: a gRPC KV.Stream, or a
// framed client connection (conn.go). ctx ends when it does.
type callStream interface {
	Recv() (*concordpb.StreamRequest, error)
	Send(*concordpb.StreamResponse) error
}

// sizedStream is a callStream that knows the size on the wire of the
// message Recv returned last (a framed connection's frame), and bounds
// the bytes of its calls in flight.
type sizedStream interface {
	lastRecvBytes() int
	maxInFlightBytes() int64
}

// serveStream serves the calls of stream until its client closes its side
// or it fails, then answers those in flight.
func (s *KV) serveStream(ctx context.Context, stream callStream) error {
	replies := make(chan *concordpb.StreamReply, maxRepliesPerMessage)
	queued := newByteBudget(cmp.Or(s.maxQueuedReplyBytes, maxQueuedReplyBytes))
	if s.replyBudgetSeen != nil {
		s.replyBudgetSeen(queued)
	}
	sent := make(chan error, 1)
	go func() { sent <- sendReplies(stream, replies, queued) }()

	slots := make(chan struct{}, maxStreamInFlight)
	var calls sync.WaitGroup
	w := &callWorkers{s: s, ctx: ctx, slots: slots, calls: &calls, replies: replies, queued: queued, work: make(chan streamWork)}
	if ss, ok := stream.(sizedStream); ok {
		w.bytes = newByteBudget(ss.maxInFlightBytes())
	}
	recvErr := s.startCalls(ctx, stream, w)
	w.deadlines.close()
	close(w.work) // idle workers end; busy ones end after their call
	calls.Wait()
	close(replies)
	sendErr := <-sent
	if errors.Is(recvErr, io.EOF) {
		return sendErr
	}
	return recvErr
}

// startCalls reads the stream and starts each call it carries, until the
// client closes its side, the stream fails or ctx ends.
func (s *KV) startCalls(ctx context.Context, stream callStream, w *callWorkers) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		cut := s.refusal(req)
		share, extra, err := w.charge(ctx, stream, req, cut)
		if err != nil {
			return err
		}
		for _, call := range req.GetCalls() {
			if call.GetPing() != nil {
				if err := w.pong(call); err != nil {
					return err
				}
				continue
			}
			if cut != nil {
				if err := w.refuse(call, cut); err != nil {
					return err
				}
				continue
			}
			select {
			case w.slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			w.start(call, share+extra)
			extra = 0
		}
	}
}

// charge takes from w's byte budget the size of req's message, waiting
// while the calls in flight hold the budget; it returns each call's share
// of it (and the rest, for the first call) for the call to give back when
// it ends. Nothing when the stream reports no sizes or no call of req
// runs (pings, a refused message). The reader is the budget's only taker
// and reads messages in order, so no later message passes one that waits.
func (w *callWorkers) charge(ctx context.Context, stream callStream, req *concordpb.StreamRequest, cut error) (share, extra int64, err error) {
	if w.bytes == nil || cut != nil {
		return 0, 0, nil
	}
	runs := 0
	for _, call := range req.GetCalls() {
		if call.GetPing() == nil {
			runs++
		}
	}
	if runs == 0 {
		return 0, 0, nil
	}
	n := int64(stream.(sizedStream).lastRecvBytes())
	if err := w.bytes.acquire(ctx, n); err != nil {
		return 0, 0, err
	}
	share = n / int64(runs)
	return share, n - share*int64(runs), nil
}

// callWorkers run a stream's calls. A worker outlives its call and takes
// the next one: a goroutine started per call began with a small stack and
// grew it (copied it) on every write, since a command's marshal is deep —
// 3 % of server CPU at put c100 (docs/benchmarks.md, "Decode once"). A
// worker keeps its grown stack, and there are never more workers than
// maxStreamInFlight.
type callWorkers struct {
	s       *KV
	ctx     context.Context
	slots   chan struct{} // one per call in flight; the caller takes it
	calls   *sync.WaitGroup
	replies chan<- *concordpb.StreamReply
	// queued bounds the bytes of the replies ready and not yet sent: a
	// worker takes its reply's, the sender gives them back once sent.
	queued *byteBudget
	work   chan streamWork // unbuffered: only idle workers take from it
	n      int             // workers started; touched only by startCalls
	// deadlines gives each call its context; touched only by startCalls.
	deadlines callDeadlines
	// bytes bounds the request bytes of the calls in flight; nil: no
	// bound (the stream reports no sizes).
	bytes *byteBudget
}

// streamWork is a call handed to a worker, with its deadline's context.
type streamWork struct {
	call     *concordpb.StreamCall
	deadline *sharedDeadline
	bytes    int64 // taken from callWorkers.bytes, given back when it ends
}

// start runs call, the caller holding a slot for it, on an idle worker or a
// new one; once every allowed worker exists it waits for one to be idle
// (soon: a slot was free, so at least one has finished its call).
func (w *callWorkers) start(call *concordpb.StreamCall, bytes int64) {
	c := streamWork{call: call, deadline: w.deadlines.forCall(w.ctx, call, time.Now()), bytes: bytes}
	select {
	case w.work <- c:
		return
	default:
	}
	if w.n >= maxStreamInFlight {
		w.work <- c
		return
	}
	w.n++
	w.calls.Add(1)
	go w.run(c)
}

// pong answers a keepalive ping at once, from the reader: it runs nothing
// and takes no slot, so it says that the connection and the node are alive
// however busy the calls are (the framed wire's keepalive, client/wire.go).
func (w *callWorkers) pong(call *concordpb.StreamCall) error {
	select {
	case w.replies <- &concordpb.StreamReply{Id: call.GetId(), Response: &concordpb.StreamReply_Pong{Pong: &concordpb.KeepalivePing{}}}:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// refusal returns why every call of req is refused, running nothing: it
// comes from a node of another cluster (otherCluster), or from one a
// fault-injected partition cuts this node off from; nil if neither.
func (s *KV) refusal(req *concordpb.StreamRequest) error {
	if err := s.otherCluster(req); err != nil {
		return err
	}
	return s.partitionedFrom(req)
}

// otherCluster refuses, with FailedPrecondition as RefuseOtherCluster
// refuses a unary call, a message forwarded by a node of another cluster:
// one that reached this node at an address its own cluster gave a member
// that is gone (a wiped node that bootstrapped a cluster of its own at it).
// Run, its writes would land in the wrong cluster; answered, its reads
// would return another cluster's data.
//
// The gate is the message's cluster id, not its sender's node id: a
// message without one passes. Clients send none; nor does a node of a
// binary older than the field (during a rolling upgrade its forwards must
// keep working, and the gRPC stream and unary calls it sends carry no more
// proof), nor a node without a cluster yet. So the refusal holds once the
// forwarding node runs a binary that stamps its cluster, as the unary
// gate does; nor can this node judge while it has no cluster itself.
func (s *KV) otherCluster(req *concordpb.StreamRequest) error {
	from, own := req.GetClusterId(), s.b.ClusterID()
	if from == 0 || own == 0 || from == own {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"a node of cluster %x forwarded calls to a node of cluster %x: the forwarder's address book is stale; nothing was run", from, own)
}

// partitionedFrom returns the refusal of a message forwarded by a node
// that a fault-injected partition cuts this node off from, as
// DropPartitioned refuses that node's unary calls; nil otherwise.
func (s *KV) partitionedFrom(req *concordpb.StreamRequest) error {
	from := ids.NodeID(req.GetFromNodeId())
	if from == 0 || !s.b.Blocked(from) {
		return nil
	}
	return status.Errorf(codes.Unavailable, "partitioned from node %d (fault injection)", from)
}

// refuse answers call with err, from the reader, running nothing.
func (w *callWorkers) refuse(call *concordpb.StreamCall, err error) error {
	st := status.Convert(err)
	select {
	case w.replies <- &concordpb.StreamReply{Id: call.GetId(), Code: uint32(st.Code()), Message: st.Message()}:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// run serves c, then each call handed to it, until work is closed.
func (w *callWorkers) run(c streamWork) {
	defer w.calls.Done()
	for ok := true; ok; c, ok = <-w.work {
		r := w.s.serveCall(c.deadline.ctx, c.call)
		c.deadline.release()
		w.queue(r)
		w.bytes.release(c.bytes)
		<-w.slots
	}
}

// queue hands r to the sender once its bytes fit under the queued
// replies' bound, after the replies that waited for room before it. When
// the stream ends first it is queued all the same:
// the sender drains every reply and gives back what it counts.
func (w *callWorkers) queue(r *concordpb.StreamReply) {
	if n := replyBytes(r); n > 0 && w.queued.acquire(w.ctx, n) != nil {
		w.queued.take(n)
	}
	w.replies <- r
}

// replyBytes is what r counts against the queued replies' bound: the
// bytes of the keys and values it carries (their framing aside, a few
// bytes each, and the few bytes of a reply without data, bounded by their
// number). Lengths only, no size computation: the put path pays a type
// switch.
func replyBytes(r *concordpb.StreamReply) int64 {
	var n int
	switch x := r.GetResponse().(type) {
	case *concordpb.StreamReply_Get:
		n = len(x.Get.GetValue())
	case *concordpb.StreamReply_CompareAndSwap:
		n = len(x.CompareAndSwap.GetCurrentValue())
	case *concordpb.StreamReply_Scan:
		n = len(x.Scan.GetNextStart())
		for _, kv := range x.Scan.GetKvs() {
			n += len(kv.GetKey()) + len(kv.GetValue())
		}
	case *concordpb.StreamReply_Batch:
		for _, res := range x.Batch.GetResults() {
			n += len(res.GetValue())
		}
	}
	return int64(n)
}

// sendReplies batches the replies that are ready into one message each
// time; after a send fails it keeps draining, so no call blocks on it.
// Once a message is sent (or dropped) its replies' bytes go back to queued.
func sendReplies(stream callStream, replies <-chan *concordpb.StreamReply, queued *byteBudget) error {
	var failed error
	_, yield := stream.(*connStream)
	for r := range replies {
		batch := gatherReplies(replies, []*concordpb.StreamReply{r})
		if yield && len(batch) < maxRepliesPerMessage {
			// A framed connection writes each message itself, at once;
			// gRPC's writer goroutine runs later and writes every message
			// queued by then in one syscall. Letting the workers that are
			// ready run first gives the framed wire the same coalescing.
			runtime.Gosched()
			batch = gatherReplies(replies, batch)
		}
		if failed == nil {
			failed = stream.Send(&concordpb.StreamResponse{Replies: batch})
		}
		var n int64
		for _, r := range batch {
			n += replyBytes(r)
		}
		queued.release(n)
	}
	return failed
}

// gatherReplies appends the replies ready now to batch, up to
// maxRepliesPerMessage.
func gatherReplies(replies <-chan *concordpb.StreamReply, batch []*concordpb.StreamReply) []*concordpb.StreamReply {
	for len(batch) < maxRepliesPerMessage {
		select {
		case r, ok := <-replies:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// serveCall runs one call through the call interceptors and its unary
// method, and turns the outcome into a reply. ctx carries the call's
// deadline (callDeadlines).
func (s *KV) serveCall(ctx context.Context, call *concordpb.StreamCall) *concordpb.StreamReply {
	method, req := callRequest(call)
	if method < 0 {
		return &concordpb.StreamReply{Id: call.GetId(), Code: uint32(codes.InvalidArgument), Message: "stream call carries no request"}
	}
	methods := s.methods
	if methods == nil {
		methods = s.plainMethods()
	}
	resp, err := methods[method].run(ctx, req)
	if err != nil {
		st := status.Convert(err)
		return &concordpb.StreamReply{Id: call.GetId(), Code: uint32(st.Code()), Message: st.Message()}
	}
	return newReply(call.GetId(), resp)
}

// plainMethods returns the methods without interceptors, built once.
func (s *KV) plainMethods() *[numMethods]streamMethod {
	s.plainOnce.Do(func() { s.plain = s.streamMethods(nil) })
	return s.plain
}

// callRequest returns the method a call names, as an index into
// KV.methods, and its request; -1 for an empty call.
func callRequest(call *concordpb.StreamCall) (int, any) {
	switch r := call.GetRequest().(type) {
	case *concordpb.StreamCall_Get:
		return methodGet, r.Get
	case *concordpb.StreamCall_Put:
		return methodPut, r.Put
	case *concordpb.StreamCall_Delete:
		return methodDelete, r.Delete
	case *concordpb.StreamCall_CompareAndSwap:
		return methodCompareAndSwap, r.CompareAndSwap
	case *concordpb.StreamCall_Scan:
		return methodScan, r.Scan
	case *concordpb.StreamCall_Batch:
		return methodBatch, r.Batch
	}
	return -1, nil
}

// kvMethod prefixes the KV service's full method names.
const kvMethod = "/concord.v1.KV/"

// newReply is the reply of call id carrying resp. A put's reply and its
// oneof wrapper come in one allocation.
func newReply(id uint64, resp any) *concordpb.StreamReply {
	switch r := resp.(type) {
	case *concordpb.PutResponse:
		b := &struct {
			reply concordpb.StreamReply
			put   concordpb.StreamReply_Put
		}{}
		b.put.Put = r
		b.reply.Id, b.reply.Response = id, &b.put
		return &b.reply
	case *concordpb.GetResponse:
		return &concordpb.StreamReply{Id: id, Response: &concordpb.StreamReply_Get{Get: r}}
	case *concordpb.DeleteResponse:
		return &concordpb.StreamReply{Id: id, Response: &concordpb.StreamReply_Delete{Delete: r}}
	case *concordpb.CompareAndSwapResponse:
		return &concordpb.StreamReply{Id: id, Response: &concordpb.StreamReply_CompareAndSwap{CompareAndSwap: r}}
	case *concordpb.ScanResponse:
		return &concordpb.StreamReply{Id: id, Response: &concordpb.StreamReply_Scan{Scan: r}}
	case *concordpb.BatchResponse:
		return &concordpb.StreamReply{Id: id, Response: &concordpb.StreamReply_Batch{Batch: r}}
	}
	return &concordpb.StreamReply{Id: id}
}
