// Package client is Concord's Go client.
//
//	c, err := client.New(ctx, "127.0.0.1:7001", "127.0.0.1:7002")
//	_, _, err = c.Put(ctx, []byte("k"), []byte("v"))                           // a blind write
//	prev, existed, err := c.Put(ctx, []byte("k"), []byte("w"), client.ReturnPrev()) // and the previous value
//	v, found, err := c.Get(ctx, []byte("k"))
//
// New takes any subset of the cluster's node addresses and learns the rest
// from the routing table. Each request goes straight to the leader of its
// key's shard when the client knows it (any node would forward it there).
// On leader changes and unavailability the client retries with backoff until
// the context's deadline (DefaultTimeout if it has none). Each attempt (one
// RPC to one node) is bounded by Options.AttemptTimeout, so a node that
// stalls (paused, black-holed) costs one attempt, not the whole deadline: the
// next attempt goes to another node within the same call.
//
// Mutations are at-most-once: each carries a session id and sequence number
// (blind writes share one windowed session: window.go), and a retry reuses
// them, so a shard that already applied the request
// answers with the first result instead of applying it again. When the
// deadline passes and the client cannot know whether a mutation applied, it
// returns an error wrapping ErrAmbiguous. It says so only when some attempt
// may have applied: a call whose every attempt was refused before proposing
// (or never reached a node) fails with a plain error. A call that stops at
// an error it does not retry wraps that error in ErrAmbiguous when an
// earlier attempt may have applied, and so does a mutation answered
// Internal, or ResourceExhausted other than a shard's full window or a
// space alarm's refusal (ErrNoSpace; the others may come after it applied). A read answered ResourceExhausted (a batch
// of GETs past what one read returns) fails with it at once.
//
// A call that runs out of its deadline (or whose context is cancelled)
// while it retries returns an error that wraps both the context's error
// and its last attempt's: errors.Is(err, context.DeadlineExceeded) is
// true, errors.Is and errors.As reach the last attempt's error, and
// status.Code reads the last attempt's code (Unavailable: no leader or no
// node answered, or the request was not sent, no connection being ready;
// DeadlineExceeded: the attempts timed out after sending; the context's
// code when the last error has none, or has Unknown). New, Status and the
// other helpers that retry or ask node after node say the same. A call
// whose context is done before it starts makes no attempt: its error is
// the context's alone, with the context's code.
//
// TLS and authentication: Options.TLSCAFile turns TLS on (trusting the
// nodes' CA), TLSCertFile/TLSKeyFile add a client certificate, and
// Options.AuthToken is sent with every call to a cluster that requires one.
//
// A Client is safe for concurrent use.
//
// The examples run each common task against a real 3-node cluster, their
// output checked by go test; docs/client.md says the same in prose, with
// the errors a caller must handle.
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/routing"
)

// DefaultTimeout bounds a request whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Bounds of the default per-attempt timeout (Options.AttemptTimeout).
const (
	MinAttemptTimeout = 500 * time.Millisecond
	MaxAttemptTimeout = 2 * time.Second
)

// ErrAmbiguous means a mutation may or may not have been applied: the
// deadline passed, or an error that is not retried ended the call, after at
// least one attempt whose outcome is unknown. Reads never report it.
var ErrAmbiguous = errors.New("concord: outcome unknown (ambiguous)")

// ErrNoSpace means a write that adds data was refused because the
// cluster's space alarm is on: some live node's data disk has less free
// space than its --reserve-disk-bytes (docs/operations.md, "When a disk
// fills"). The node refused it before proposing it, so it was not applied
// (unless an earlier attempt of the same call may have been: then the
// error wraps ErrAmbiguous too). It is not retried: the alarm clears only
// once space is freed (deletes and reads still work) or added. The error
// wraps the node's answer (a gRPC ResourceExhausted), which names the node
// and its free space.
var ErrNoSpace = errors.New("concord: space alarm")

// ErrNoEndpoints is returned by New without addresses.
var ErrNoEndpoints = errors.New("concord: no endpoints given")

// ErrClosed is the error of a call made on, or still running at, Close. A
// mutation whose earlier attempt may have applied reports it wrapped in
// ErrAmbiguous.
var ErrClosed = errors.New("concord: client closed")

// Client talks to one Concord cluster.
type Client struct {
	endpoints []string
	opts      Options
	dialOpts  []grpc.DialOption // TLS and token, from opts
	wire      *wireDialer       // nil with Options.Wire = WireGRPC, or Unary

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // guarded by mu
	muxes map[string]*streamMux       // guarded by mu; per address, unless Options.Unary
	// closed is set by Close (guarded by mu): no connection is opened
	// after it, so a call in flight ends instead of redialling.
	closed bool

	routes     atomic.Pointer[routes]
	refreshing atomic.Bool

	sessions chan *session
	// win is the windowed session of blind writes (window.go).
	winMu sync.Mutex
	win   *winSession
}

// routes is an immutable snapshot of the routing table.
type routes struct {
	table   *routing.Table
	leaders map[uint64]uint64 // shard → node
	addrs   map[uint64]string // node → address
}

type session struct {
	id  uint64
	seq uint64
}

// New connects to the cluster at endpoints (any subset of its nodes) and
// fetches the routing table.
func New(ctx context.Context, endpoints ...string) (*Client, error) {
	return NewWithOptions(ctx, Options{Endpoints: endpoints})
}

// Options configures a client beyond its endpoints.
type Options struct {
	// Endpoints are node addresses: any subset of the cluster.
	Endpoints []string
	// ThroughEndpoints sends every request to the endpoints given, in turn,
	// and lets those nodes forward it to the shard's leader, instead of
	// sending it to the leader directly. For clients that must go through
	// particular nodes (a load balancer, a test of the nodes' forwarding).
	ThroughEndpoints bool
	// AttemptTimeout bounds one attempt of a request: one RPC to one node.
	// When it passes, the client tries another node within the same call; a
	// mutation's retry carries the same session id and sequence number, so
	// it applies at most once however many attempts reached a leader. Zero
	// means a third of the call's deadline, at least MinAttemptTimeout and at
	// most MaxAttemptTimeout (1 s for a 3 s call, 2 s for DefaultTimeout). A
	// negative value disables it: each attempt may take the whole deadline.
	// An attempt never outlives the call's own deadline.
	AttemptTimeout time.Duration
	// TLSCAFile, when set, makes every connection TLS, trusting the nodes'
	// certificates that this CA (PEM) signed; plaintext otherwise.
	// TLSCertFile and TLSKeyFile add a client certificate, which a node
	// accepts only if its CA signed it, and which then stands in for the
	// auth token.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// AuthToken is sent with every call ("authorization: Bearer TOKEN") to
	// a cluster started with --auth-token-file. A wrong or missing token
	// fails calls with codes.Unauthenticated, at once, without retries. It
	// must be visible ASCII of at most 4,096 bytes (no spaces or
	// newlines: trim a token read from a file), or New refuses it.
	AuthToken string
	// Unary sends each request as its own gRPC call. By default requests
	// to a node share one KV.Stream, many to a message (fewer frames and
	// syscalls per request on both sides); a node that does not serve
	// Stream is called unary either way.
	Unary bool
	// Wire is what the stream of requests to a node travels on: WireTCP
	// (or empty, the default), a framed TCP connection to the node's port
	// (TLS and token as above), which spares the node HTTP/2's and gRPC's
	// cost per message; or WireGRPC, a KV.Stream over gRPC. The framed wire
	// has gRPC's keepalive (dial.Keepalive) and falls back to gRPC, for a
	// while, with a node that does not speak it (an older version). Calls
	// that are not KV requests stay on gRPC either way.
	Wire string
}

// checkToken refuses a token the wires cannot carry, as a node refuses its
// --auth-token-file at start: sent as it is, a newline left from a file
// read without trimming failed every call, after New had retried until its
// deadline, with gRPC's words about a header value. The error never quotes
// the token.
func checkToken(token string) error {
	if err := frame.CheckToken(token); err != nil {
		return fmt.Errorf("concord: Options.AuthToken: %w (read from a file? trim its surrounding white space, as concord --auth-token-file does)", err)
	}
	return nil
}

// NewWithOptions is New with Options.
func NewWithOptions(ctx context.Context, opts Options) (*Client, error) {
	endpoints := opts.Endpoints
	if len(endpoints) == 0 {
		return nil, ErrNoEndpoints
	}
	if err := checkToken(opts.AuthToken); err != nil {
		return nil, err
	}
	dialOpts, err := dial.Security{CAFile: opts.TLSCAFile, CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile, Token: opts.AuthToken}.Options()
	if err != nil {
		return nil, fmt.Errorf("concord: %w", err)
	}
	wire, err := newWireDialer(opts)
	if err != nil {
		return nil, fmt.Errorf("concord: %w", err)
	}
	c := &Client{endpoints: endpoints, opts: opts, dialOpts: dialOpts, wire: wire, conns: map[string]*grpc.ClientConn{}, muxes: map[string]*streamMux{}, sessions: make(chan *session, 1024)}
	c.routes.Store(&routes{table: routing.NewTable(nil), leaders: map[uint64]uint64{}, addrs: map[uint64]string{}})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	// A cluster that is starting may not answer yet: keep trying until the deadline.
	for attempt := 0; ; attempt++ {
		err := c.refresh(ctx)
		if err == nil {
			return c, nil
		}
		if errors.As(err, new(finalError)) { // refused: waiting will not help
			c.Close()
			return nil, noRoutes(err)
		}
		if werr := sleep(ctx, backoff(attempt), deadlineOf(ctx)); werr != nil {
			c.Close()
			return nil, noRoutes(expired(werr, err))
		}
	}
}

// noRoutes is New's error when no node gave it the routing table.
func noRoutes(err error) error {
	return fmt.Errorf("concord: no node answered with a routing table: %w", err)
}

// Close closes the client's connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for a, m := range c.muxes {
		m.close()
		delete(c.muxes, a)
	}
	for a, conn := range c.conns {
		conn.Close()
		delete(c.conns, a)
	}
	return nil
}

// kv returns the KV client for addr's connection: its stream mux, or
// plain unary calls with Options.Unary.
func (c *Client) kv(addr string, conn *grpc.ClientConn) concordpb.KVClient {
	if c.opts.Unary {
		return concordpb.NewKVClient(conn)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.muxes[addr]
	if !ok {
		m = newStreamMux(conn)
		if c.wire != nil {
			m.openFn = c.wire.opener(addr)
		}
		c.muxes[addr] = m
	}
	return streamKV{m}
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[addr]; ok {
		return conn, nil
	}
	if c.closed {
		return nil, ErrClosed
	}
	conn, err := dial.Dial(addr, c.dialOpts...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = conn
	return conn, nil
}

// refresh fetches the routing table from the first node that answers.
func (c *Client) refresh(ctx context.Context) error {
	return c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		rt, err := concordpb.NewClusterClient(conn).RoutingTable(ctx, &concordpb.RoutingTableRequest{})
		if err == nil {
			c.routes.Store(newRoutes(rt))
		}
		if status.Code(err) == codes.Unauthenticated { // every node has the same token
			return finalError{err}
		}
		return err
	})
}

func newRoutes(rt *concordpb.RoutingTableResponse) *routes {
	r := &routes{leaders: map[uint64]uint64{}, addrs: map[uint64]string{}}
	var descs []*concordpb.ShardDescriptor
	for _, s := range rt.GetShards() {
		descs = append(descs, s.GetShard())
		if s.GetLeaderNodeId() != 0 {
			r.leaders[s.GetShard().GetShardId()] = s.GetLeaderNodeId()
		}
	}
	for _, n := range rt.GetNodes() {
		if n.GetState() == concordpb.NodeState_NODE_UP {
			r.addrs[n.GetNodeId()] = n.GetAddress()
		}
	}
	r.table = routing.NewTable(descs)
	return r
}

// maybeRefresh refreshes the routing table in the background, one at a time.
func (c *Client) maybeRefresh() {
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = c.refresh(ctx)
	}()
}

// candidates lists every address known, the endpoints given first.
func (c *Client) candidates() []string {
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range c.endpoints {
		add(a)
	}
	for _, a := range c.routes.Load().addrs {
		add(a)
	}
	return out
}

// target returns the address to send a request for key to, and its shard:
// the shard's leader, else (and after three attempts) a random node, never
// one in avoid (nodes that failed this call without refusing) while another
// is known.
func (c *Client) target(key []byte, attempt int, avoid map[string]bool) (string, uint64) {
	r := c.routes.Load()
	var shard uint64
	if d := r.table.Lookup(key); d != nil {
		shard = d.GetShardId()
		if leader, ok := r.leaders[shard]; ok && attempt < 3 {
			if a, ok := r.addrs[leader]; ok && !avoid[a] {
				return a, shard
			}
		}
	}
	cands := c.candidates()
	if len(avoid) > 0 {
		var fresh []string
		for _, a := range cands {
			if !avoid[a] {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) > 0 {
			cands = fresh
		}
	}
	return cands[mrand.IntN(len(cands))], shard
}

// attemptTimeout is the bound of each attempt of a call whose deadline is
// total away (see Options.AttemptTimeout).
func (c *Client) attemptTimeout(total time.Duration) time.Duration {
	if t := c.opts.AttemptTimeout; t != 0 {
		return t
	}
	return min(max(total/3, MinAttemptTimeout), MaxAttemptTimeout)
}

// deadlineOf is ctx's deadline, which it must have.
func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}

// attemptContext bounds one attempt by per (none if per is negative).
func attemptContext(ctx context.Context, per time.Duration) (context.Context, context.CancelFunc) {
	if per < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, per)
}

// learn records the leader hint of a response.
func (c *Client) learn(h *concordpb.ResponseHeader) {
	if h == nil || h.GetShardId() == 0 || h.GetLeaderNodeId() == 0 {
		return
	}
	r := c.routes.Load()
	if r.leaders[h.GetShardId()] == h.GetLeaderNodeId() && r.addrs[h.GetLeaderNodeId()] == h.GetLeaderAddress() {
		return
	}
	next := &routes{table: r.table, leaders: make(map[uint64]uint64, len(r.leaders)), addrs: make(map[uint64]string, len(r.addrs))}
	for k, v := range r.leaders {
		next.leaders[k] = v
	}
	for k, v := range r.addrs {
		next.addrs[k] = v
	}
	next.leaders[h.GetShardId()] = h.GetLeaderNodeId()
	if h.GetLeaderAddress() != "" {
		next.addrs[h.GetLeaderNodeId()] = h.GetLeaderAddress()
	}
	c.routes.Store(next)
}

func (c *Client) takeSession() *session {
	select {
	case s := <-c.sessions:
		return s
	default:
		var b [8]byte
		_, _ = rand.Read(b[:])
		return &session{id: binary.BigEndian.Uint64(b[:]) | 1}
	}
}

func (c *Client) putSession(s *session) {
	select {
	case c.sessions <- s:
	default:
	}
}

// call runs one request with retries. For a mutation it holds a session for
// the whole call and every attempt carries the same sequence number.
//
// Each attempt is bounded by the attempt timeout. An attempt that timed out,
// or lost its connection, may have reached a leader: the call notes that the
// mutation may have applied and tries another node. When the deadline passes
// the call fails; for a mutation with ErrAmbiguous if some attempt may have
// applied, else with a plain error (every attempt was refused or never sent).
// A call that stops early, at an error not worth retrying, says the same:
// ErrAmbiguous wrapping that error if an earlier attempt may have applied,
// or if the error itself may come after applying (mayHaveApplied).
func (c *Client) call(ctx context.Context, key []byte, kind callKind, consistency concordpb.Consistency,
	do func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error)) error {
	// The call's deadline is a time, not a context of its own: a context
	// with a timer per call (and another per attempt) took a tenth of a
	// loaded client's CPU (docs/benchmarks.md, "A leaner load generator").
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultTimeout)
	}
	per := c.attemptTimeout(time.Until(deadline))
	st := &callState{h: concordpb.RequestHeader{Consistency: consistency}, actx: attemptCtx{Context: ctx}}
	h, actx := &st.h, &st.actx
	mutation := kind != read
	var win *winSession // a blind write's windowed session
	switch kind {
	case mutate:
		s := c.takeSession()
		defer c.putSession(s)
		s.seq++
		h.SessionId, h.Seq = s.id, s.seq
	case blindWrite:
		var seq, floor uint64
		win, seq, floor = c.takeWindowed()
		defer c.doneWindowed(win, seq)
		h.SessionId, h.Seq, h.SessionFloor = win.id, seq, floor
	}
	uncertain := false // some attempt may have applied the mutation
	var lastErr error
	var avoid map[string]bool // nodes that failed this call without refusing
	// A stale read reads the replica of the node that receives it: ask the
	// nodes this client was given, not the leader, so that a client of one
	// node (`concord get --stale --endpoints X`) reads X's replica. So does
	// an available call, read or write: the node it reaches holds it (a
	// node cut off from the leader is the case it is for) and reads it.
	viaEndpoints := c.opts.ThroughEndpoints || !mutation && consistency == concordpb.Consistency_STALE ||
		consistency == concordpb.Consistency_AVAILABLE
	firstEndpoint := 0
	if viaEndpoints && len(c.endpoints) > 1 {
		firstEndpoint = mrand.IntN(len(c.endpoints))
	}
	for attempt := 0; ; attempt++ {
		// A context that is done before an attempt gets none: gRPC would
		// refuse the call locally with the context's code, which reads as
		// an attempt cut in flight (a write that may have applied), and a
		// request stream would answer that nothing was sent, as if no
		// connection had been ready. Before the first attempt the error is
		// the context's alone (plain, with its code); after one, as below.
		now := time.Now()
		if err := ctx.Err(); err != nil || !now.Before(deadline) {
			if err == nil {
				err = context.DeadlineExceeded
			}
			return c.failed(err, lastErr, mutation && uncertain)
		}
		addr, _ := c.target(key, attempt, avoid)
		if viaEndpoints && (c.opts.ThroughEndpoints || attempt < len(c.endpoints)) {
			addr = c.endpoints[(firstEndpoint+attempt)%len(c.endpoints)]
		}
		conn, err := c.conn(addr)
		if err != nil {
			return c.final(fmt.Errorf("concord: connect to %s: %w", addr, err), mutation && uncertain)
		}
		if win != nil && attempt > 0 {
			// A retry carries the session's floor as it is now: calls
			// below this one that ended since raised it, and a shard whose
			// window is full (ResourceExhausted) has room only above a
			// higher floor. A new header, not the old one changed: an
			// earlier attempt's message may still be read (a stream's
			// sender encodes a call that its caller gave up on).
			if f := c.windowFloor(win); f > h.SessionFloor {
				h = &concordpb.RequestHeader{SessionId: h.SessionId, Seq: h.Seq, SessionFloor: f, Consistency: h.Consistency}
			}
		}
		actx.deadline = deadline
		if per >= 0 {
			actx.deadline = minTime(deadline, now.Add(per))
		}
		rh, err := c.attempt(actx, c.kv(addr, conn), h, do)
		if err == nil {
			c.learn(rh)
			return nil
		}
		lastErr = err
		code := status.Code(err)
		timedOut := code == codes.DeadlineExceeded || code == codes.Canceled
		// Not sent because no connection to the node was ready for the
		// attempt's whole time: a node stalled (or black-holed) before
		// this client connected. Like a timeout it is avoided and not
		// waited for again, but nothing was sent, so nothing is uncertain.
		waitedOut := notSent(err) && !time.Now().Before(actx.deadline)
		switch {
		case timedOut, waitedOut, code == codes.Unavailable && !isRefusal(err) && !notSent(err):
			if avoid == nil {
				avoid = map[string]bool{}
			}
			avoid[addr] = true // stalled, or its connection broke: try another node
		case noSpace(err):
			// Refused before proposing: only an earlier attempt may
			// have applied.
			return c.final(fmt.Errorf("%w: %w", ErrNoSpace, err), mutation && uncertain)
		case !retryable(err):
			// This error is the last attempt's alone: an earlier one that
			// may have applied still may have.
			return c.final(err, mutation && (uncertain || mayHaveApplied(code)))
		}
		if mutation && !isRefusal(err) && !notSent(err) && !windowFull(err) {
			uncertain = true
		}
		if err := callErr(ctx, deadline); err != nil {
			return c.failed(err, lastErr, mutation && uncertain)
		}
		c.maybeRefresh()
		if !timedOut && !waitedOut { // an attempt that ran out its time has waited long enough
			if werr := sleep(ctx, backoff(attempt), deadline); werr != nil {
				return c.failed(werr, lastErr, mutation && uncertain)
			}
		}
	}
}

// callState is what a call allocates, in one allocation.
type callState struct {
	h    concordpb.RequestHeader
	actx attemptCtx
}

// attempt makes one attempt on kv, bounded by a's deadline. A request
// stream's wait arms one timer for it (streamMux.do); any other kv gets a
// context that ends at the deadline.
func (c *Client) attempt(a *attemptCtx, kv concordpb.KVClient, h *concordpb.RequestHeader,
	do func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error)) (*concordpb.ResponseHeader, error) {
	if _, ok := kv.(streamKV); ok {
		rh, err := do(a, kv, h)
		return rh, unsentPick(err)
	}
	ctx, cancel := a.bounded()
	defer cancel()
	rh, err := do(ctx, kv, h)
	return rh, unsentPick(err)
}

// unsentPick turns gRPC's error for a call whose context ended while it
// waited for a ready connection (its picker's: no transport was chosen, so
// nothing was sent) into the client's own not-sent Unavailable, as a
// request stream answers a call that ended still queued (errNotSent). With
// the context's code it read as an attempt cut in flight: a write that a
// stalled node (one the client had no connection to yet) never received
// was reported ErrAmbiguous, and its code differed from the stream's.
func unsentPick(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled {
		return err
	}
	if msg := st.Message(); strings.HasSuffix(msg, pickWaitMark) || strings.HasPrefix(msg, pickErrMark) {
		return status.Errorf(codes.Unavailable, "concord: the request was not sent: %s (%s)", notSentMark, msg)
	}
	return err
}

// pickWaitMark and pickErrMark are in gRPC's errors for a call whose
// context ended while its picker waited for a connection
// (grpc.pickerWrapper.pick), before any transport stream existed.
const (
	pickWaitMark = " while waiting for connections to become ready"
	pickErrMark  = "latest balancer error: "
)

// attemptCtx is a call's context during one attempt: the caller's, with
// the attempt's deadline. Its Done is the caller's, which does not close
// at the deadline: it is only for streamMux.do, which waits for the
// deadline itself, and what does not is given bounded() instead.
type attemptCtx struct {
	context.Context
	deadline time.Time
}

func (a *attemptCtx) Deadline() (time.Time, bool) { return a.deadline, true }

func (a *attemptCtx) Err() error { return callErr(a.Context, a.deadline) }

// bounded is a real context that ends at a's deadline.
func (a *attemptCtx) bounded() (context.Context, context.CancelFunc) {
	return context.WithDeadline(a.Context, a.deadline)
}

// bounded returns ctx as a context that ends at its deadline: an
// attemptCtx becomes a real one (cancel must be called); any other is
// returned as it is.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if a, ok := ctx.(*attemptCtx); ok {
		return a.bounded()
	}
	return ctx, func() {}
}

// callErr is ctx's error, or DeadlineExceeded once deadline has passed.
func callErr(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// final is the error of a call that stops at err, an error not worth
// retrying: wrapped in ErrAmbiguous if the mutation may have applied.
func (c *Client) final(err error, ambiguous bool) error {
	if ambiguous {
		return fmt.Errorf("%w: %w", ErrAmbiguous, err)
	}
	return err
}

// mayHaveApplied reports whether an error that is not retried may come
// after a mutation applied: Internal (a node's result that did not fit its
// request, or gRPC's for a reply the client could not decode), DataLoss,
// and ResourceExhausted (gRPC's, for a reply over the message limit; a
// shard's full window, which applied nothing, is retried and never gets
// here, nor does a space alarm refusal, which is ErrNoSpace). The others (InvalidArgument, FailedPrecondition, Unauthenticated,
// …) are answers given instead of applying.
func mayHaveApplied(code codes.Code) bool {
	return code == codes.Internal || code == codes.DataLoss || code == codes.ResourceExhausted
}

// failed is the error of a call that ran out of time (ctxErr) after lastErr.
func (c *Client) failed(ctxErr, lastErr error, ambiguous bool) error {
	return c.final(expired(ctxErr, lastErr), ambiguous)
}

// deadlineError is the error of a call whose context ended (ctxErr:
// context.DeadlineExceeded, or context.Canceled) while it retried, after
// last, its last attempt's error. It wraps both, so errors.Is finds the
// context's error and errors.Is/As the last attempt's (a client error, a
// gRPC status). Keeping only last's text, as it once did, left callers
// nothing to test: status.Code read Unknown whatever the cluster had said.
type deadlineError struct {
	ctxErr error
	last   error
}

func (e *deadlineError) Error() string {
	if e.last == nil {
		return e.ctxErr.Error()
	}
	return fmt.Sprintf("%v (last error: %v)", e.ctxErr, e.last)
}

func (e *deadlineError) Unwrap() []error {
	if e.last == nil {
		return []error{e.ctxErr}
	}
	return []error{e.ctxErr, e.last}
}

// GRPCStatus is what status.Code and status.FromError read: the last
// attempt's code, which says why the retries did not succeed in time
// (Unavailable: no leader, no node reachable, or no connection ready to
// send on; DeadlineExceeded: the attempts timed out after sending), with
// the whole message. A last error without a
// code, or with Unknown (which says nothing a caller can act on), gives
// the context's: DeadlineExceeded, or Canceled.
func (e *deadlineError) GRPCStatus() *status.Status {
	code := status.FromContextError(e.ctxErr).Code()
	if st, ok := status.FromError(e.last); ok && st.Code() != codes.OK && st.Code() != codes.Unknown {
		code = st.Code()
	}
	return status.New(code, e.Error())
}

// expired is the error of a call that ctxErr ended after last: a
// deadlineError, or last itself if it already is one (a helper that
// retries a call that retries).
func expired(ctxErr, last error) error {
	if de := new(deadlineError); errors.As(last, &de) {
		return last
	}
	return &deadlineError{ctxErr: ctxErr, last: last}
}

// ended is err, as a deadlineError if ctx has ended: the error of a call
// that stops at its first failure past its context's end. Its deadline
// counts once it is past, before ctx's timer has fired: gRPC may report a
// call it cut at the deadline (DeadlineExceeded) first.
func ended(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return expired(cerr, err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return expired(context.DeadlineExceeded, err)
	}
	return err
}

// retryable reports whether a failed attempt should be retried. Unknown (an
// ambiguous outcome) is retried too: the session makes the retry safe. Of
// ResourceExhausted only a shard's full window is (windowFull): it passes
// once the session's floor rises, where any other (a read's "reply too
// large", gRPC's message limit) answers every retry the same, so retrying
// only turned it into a deadline error at the call's end.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Unknown, codes.Aborted:
		return true
	case codes.ResourceExhausted:
		return windowFull(err)
	}
	return false
}

// isRefusal reports whether an Unavailable error came from a node that
// refused the request before proposing it (so it certainly did not apply),
// rather than from a broken connection.
func isRefusal(err error) bool {
	st, _ := status.FromError(err)
	msg := st.Message()
	for _, s := range []string{"no leader known", "not the leader", "not initialized", "does not know the shard",
		"dropped by raft", "already forwarded", "no replica of the shard", "has no known address"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// windowFull reports whether err is a shard's refusal of a windowed
// session's command because the session's window is at its bound
// (internal/kv/window.go): refused before any op applied, so certainly not
// applied. Any other ResourceExhausted (gRPC's, for a reply larger than
// the client takes) says nothing of the kind.
func windowFull(err error) bool {
	st, _ := status.FromError(err)
	return st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), windowFullMark)
}

// windowFullMark is in the message of a shard's window-full refusal
// (kv.applyWindowed).
const windowFullMark = "the window is full"

// noSpace reports whether err is a node's refusal of a write that adds
// data while the space alarm is on (grpcapi.KV.SetNoSpace): a
// ResourceExhausted whose message starts with noSpaceMark, given before
// anything was proposed. gRPC's own ResourceExhausted (a reply over the
// message limit) never starts so.
func noSpace(err error) bool {
	st, _ := status.FromError(err)
	return st.Code() == codes.ResourceExhausted && strings.HasPrefix(st.Message(), noSpaceMark)
}

// noSpaceMark starts the message of a space alarm refusal (kv.NoSpaceMark).
const noSpaceMark = "no space: "

// notSent reports whether an Unavailable error says the client never reached
// the node (no connection could be opened), so the request was not sent.
func notSent(err error) bool {
	st, _ := status.FromError(err)
	return st.Code() == codes.Unavailable &&
		(strings.Contains(st.Message(), "Error while dialing") || strings.Contains(st.Message(), notSentMark) ||
			// a connection closed before the server's HTTP/2 preface (a
			// node past its --grpc-max-conns): gRPC sends no call before it
			strings.Contains(st.Message(), "error reading server preface"))
}

// notSentMark is in the message of the client's own errors for a request
// that never left it (client/stream.go).
const notSentMark = "no connection to the node was ready in time"

func backoff(attempt int) time.Duration {
	d := time.Duration(float64(10*time.Millisecond) * math.Pow(2, float64(min(attempt, 6))))
	d = min(d, 500*time.Millisecond)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// sleep waits for d, or until ctx ends or deadline passes (then it returns
// why).
func sleep(ctx context.Context, d time.Duration, deadline time.Time) error {
	left := time.Until(deadline)
	t := time.NewTimer(min(d, left))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		if d >= left {
			return context.DeadlineExceeded
		}
		return nil
	}
}
