package grpcapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

// The framed client wire: KV.Stream without gRPC. The Go client, by
// default (client.Options.Wire "" or "tcp"), opens a TCP connection (TLS
// when the port is) to the node's port, whose mux routes it here by its
// magic:
//
//	StreamMagic | token length (uint16) | token     (internal/frame's hello)
//	client → node: frames of one StreamRequest each
//	node → client: frames of one StreamResponse each
//
// The calls and replies are those of KV.Stream, served by the same code
// (serveStream); the wire saves, per message, HTTP/2 framing and flow
// control and gRPC's goroutine hand-offs — a quarter of a node's CPU per
// get (docs/benchmarks.md, "Client wire over framed TCP"). A keepalive
// ping (a StreamCall carrying ping) is answered at once with a pong of its
// id; the client sends one with its hello and waits for the answer before
// any call, and after 10 s without anything received; a connection silent
// for connIdleTimeout is closed. A hello the node
// refuses is answered with one StreamResponse whose only reply has id 0
// and the refusal's code, then the connection closes; anything malformed
// closes it at once, and nothing of it runs.

// StreamMagic opens every framed client connection (portmux routes on it).
var StreamMagic = frame.KVMagic

// Timeouts of the framed client wire.
const (
	// connHelloTimeout bounds a new connection's hello.
	connHelloTimeout = 10 * time.Second
	// connWriteTimeout bounds one write of replies: a client that reads
	// nothing for this long loses the connection (its calls fail and it
	// reconnects) rather than holding the node's replies.
	connWriteTimeout = 10 * time.Second
	// connIdleTimeout closes a connection from which nothing came for this
	// long: a client pings after 10 s without an answer (dial.Keepalive's
	// Time), so this one is gone (paused, unplugged) and holds the node's
	// buffers and goroutines for nothing.
	connIdleTimeout = time.Minute
)

// Bounds on a node's framed client connections. A Go client opens one per
// node (and a node one per peer, for forwarding), so ten thousand served
// are ten thousand client processes; each may hold a frame being read (up
// to the message limit) and maxStreamInFlight calls. A connection in its
// hello holds one of connMaxHellos slots apart from them: a client writes
// its hello at once, so those are few, and one more closes the oldest (a
// silent connection), never the newest (maybe a client), as the raft
// transport's hello slots do.
const (
	connMaxConns  = 10000
	connMaxHellos = 256
)

// keepReplyBuf is the largest reply buffer a connection keeps between
// writes.
const keepReplyBuf = 1 << 20

// ConnServer serves framed client connections with a KV's stream handler.
type ConnServer struct {
	kv       *KV
	auth     func(c net.Conn, token string) error
	maxFrame int
	log      *slog.Logger
	// writeTimeout and idleTimeout are connWriteTimeout and
	// connIdleTimeout; tests shorten them.
	writeTimeout, idleTimeout time.Duration
	// maxConns and maxHellos are connMaxConns and connMaxHellos, and
	// maxInFlight maxStreamInFlightBytes; tests lower them.
	maxConns, maxHellos int
	maxInFlight         int64

	mu       sync.Mutex
	conns    map[net.Conn]struct{} // every connection, for Close
	greeting []net.Conn            // those in their hello, oldest first
	served   int                   // those past it
	closed   bool
	wg       sync.WaitGroup
}

// NewConnServer serves s's calls over framed connections. auth checks a
// connection's hello (nil: every one passes); maxFrame bounds a frame
// either way, as gRPC's message size limits bound a message.
func (s *KV) NewConnServer(auth func(c net.Conn, token string) error, maxFrame int, log *slog.Logger) *ConnServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ConnServer{kv: s, auth: auth, maxFrame: maxFrame, log: log, writeTimeout: connWriteTimeout, idleTimeout: connIdleTimeout,
		maxConns: connMaxConns, maxHellos: connMaxHellos, maxInFlight: maxStreamInFlightBytes, conns: map[net.Conn]struct{}{}}
}

// Serve serves the connections l accepts until it fails (the port closes).
func (cs *ConnServer) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		ok, oldest := cs.track(c)
		if oldest != nil {
			cs.log.Debug("client connection closed in its hello for a newer one", "remote", oldest.RemoteAddr())
			_ = oldest.Close() // its own goroutine untracks it
		}
		if !ok {
			_ = c.Close()
			continue
		}
		go func() {
			defer cs.untrack(c)
			cs.serveConn(c)
		}()
	}
}

// Close closes every connection (their calls are cancelled) and waits for
// their handlers; connections accepted after it are closed at once.
func (cs *ConnServer) Close() {
	cs.mu.Lock()
	cs.closed = true
	for c := range cs.conns {
		_ = c.Close()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
}

// Open is how many framed connections are being served.
func (cs *ConnServer) Open() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.conns)
}

// track records c, in its hello; false once the server is closed. When
// maxHellos are in their hello already, the oldest of them leaves the
// count and is returned for the caller to close.
func (cs *ConnServer) track(c net.Conn) (ok bool, oldest net.Conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return false, nil
	}
	if len(cs.greeting) >= cs.maxHellos {
		oldest = cs.greeting[0]
		cs.greeting = slices.Delete(cs.greeting, 0, 1)
	}
	cs.greeting = append(cs.greeting, c)
	cs.conns[c] = struct{}{}
	cs.wg.Add(1)
	return true, oldest
}

// promote moves c, past its authenticated hello, from the connections in
// their hello to those served; an error when it was pushed out of its
// hello slot meanwhile (it is closed) or maxConns are served already.
func (cs *ConnServer) promote(c net.Conn) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	i := slices.Index(cs.greeting, c)
	if i < 0 {
		// Unavailable, not the Unauthenticated an unknown error is
		// refused with: its token was good, and the client retries.
		return status.Error(codes.Unavailable, "closed in its hello for a newer connection")
	}
	cs.greeting = slices.Delete(cs.greeting, i, i+1)
	if cs.served >= cs.maxConns {
		// Not Unauthenticated: the client reports it Unavailable and
		// retries, here or at another node.
		return status.Errorf(codes.ResourceExhausted, "concord: %d framed client connections open on this node already (at most %d)", cs.served, cs.maxConns)
	}
	cs.served++
	return nil
}

func (cs *ConnServer) untrack(c net.Conn) {
	_ = c.Close()
	cs.mu.Lock()
	delete(cs.conns, c)
	if i := slices.Index(cs.greeting, c); i >= 0 {
		cs.greeting = slices.Delete(cs.greeting, i, i+1)
	}
	cs.mu.Unlock()
	cs.wg.Done()
}

// serveConn authenticates c's hello and serves its calls until it ends.
func (cs *ConnServer) serveConn(c net.Conn) {
	fr := frame.NewReader(c, cs.maxFrame)
	_ = c.SetReadDeadline(time.Now().Add(connHelloTimeout))
	token, err := frame.ReadHello(fr, StreamMagic)
	if err != nil {
		cs.log.Debug("client connection refused", "remote", c.RemoteAddr(), "err", err)
		return
	}
	if cs.auth != nil {
		if err := cs.auth(c, token); err != nil {
			cs.log.Debug("client connection refused", "remote", c.RemoteAddr(), "err", err)
			refuse(c, err)
			return
		}
	}
	if err := cs.promote(c); err != nil {
		cs.log.Debug("client connection refused", "remote", c.RemoteAddr(), "err", err)
		refuse(c, err)
		return
	}
	defer cs.demote()
	_ = c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &connStream{c: c, fr: fr, max: cs.maxFrame, writeTimeout: cs.writeTimeout, idle: cs.idleTimeout, cancel: cancel,
		maxInFlight: cs.maxInFlight}
	if err := cs.kv.serveStream(ctx, st); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
		cs.log.Debug("client connection ended", "remote", c.RemoteAddr(), "err", err)
	}
}

// demote takes a served connection, ending, off the count.
func (cs *ConnServer) demote() {
	cs.mu.Lock()
	cs.served--
	cs.mu.Unlock()
}

// refuse tells the client why its hello was refused: one reply, id 0, with
// the refusal's code, so the client fails its calls with it (an
// Unauthenticated call is not retried) instead of seeing a broken stream.
func refuse(c net.Conn, err error) {
	st := status.Convert(err)
	if st.Code() == codes.Unknown {
		st = status.New(codes.Unauthenticated, err.Error())
	}
	buf, ferr := frame.Append(nil, &concordpb.StreamResponse{Replies: []*concordpb.StreamReply{{Code: uint32(st.Code()), Message: st.Message()}}})
	if ferr != nil {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(connWriteTimeout))
	_, _ = c.Write(buf)
}

// connStream is a framed connection as a callStream. Recv and Send are
// each called from one goroutine (serveStream's reader and sender).
type connStream struct {
	c            net.Conn
	fr           *frame.Reader
	max          int
	writeTimeout time.Duration
	idle         time.Duration
	cancel       context.CancelFunc
	buf          []byte
	// lastBytes is the size of the frame Recv read last; maxInFlight
	// bounds the bytes of the calls in flight (sizedStream).
	lastBytes   int
	maxInFlight int64
	// refreshAt is when the read deadline (idle from when it was set) is
	// next pushed back: not on every read, which would cost a timer update
	// per message, but often enough that at least 7/8 of idle remains.
	refreshAt time.Time
}

// Recv reads the next request. The client never closes only its sending
// side, so any end of the reading is the connection's: the calls in flight
// are cancelled, as gRPC cancels a stream's context when its connection
// goes.
func (s *connStream) Recv() (*concordpb.StreamRequest, error) {
	if now := time.Now(); now.After(s.refreshAt) {
		_ = s.c.SetReadDeadline(now.Add(s.idle))
		s.refreshAt = now.Add(s.idle / 8)
	}
	data, err := s.fr.NextBytes()
	s.lastBytes = len(data)
	var req *concordpb.StreamRequest
	if err == nil {
		req, err = decodeRequest(data) // copies data: the calls outlive the frame buffer
	}
	if err != nil {
		s.cancel()
		_ = s.c.Close()
		return nil, err
	}
	return req, nil
}

func (s *connStream) lastRecvBytes() int      { return s.lastBytes }
func (s *connStream) maxInFlightBytes() int64 { return s.maxInFlight }

// Send writes resp as one frame (appendResponse), within writeTimeout. A failed write
// closes the connection, which ends Recv too.
func (s *connStream) Send(resp *concordpb.StreamResponse) error {
	buf, err := appendResponse(append(s.buf[:0], make([]byte, frame.Header)...), resp)
	if err == nil {
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-frame.Header))
	}
	if err == nil && len(buf)-frame.Header > s.max {
		err = fmt.Errorf("%w: a reply message of %d bytes (at most %d)", frame.ErrTooLarge, len(buf)-frame.Header, s.max)
	}
	if err == nil {
		_ = s.c.SetWriteDeadline(time.Now().Add(s.writeTimeout))
		_, err = s.c.Write(buf)
	}
	if cap(buf) <= keepReplyBuf {
		s.buf = buf
	} else {
		s.buf = nil
	}
	if err != nil {
		_ = s.c.Close()
	}
	return err
}
