package client

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/frame"
)

// The framed TCP wire (Options.Wire = WireTCP, the default): the requests
// to a node go over one TCP connection to its port (TLS when
// Options.TLSCAFile is set) as length-prefixed StreamRequest frames, and
// replies come back as StreamResponse frames, after a hello carrying the
// auth token (internal/grpcapi/conn.go). The calls, their ids, the batching
// and the failure of a broken connection are those of the gRPC stream; the
// wire only saves the node HTTP/2's and gRPC's cost per message. Unary
// calls (the routing table, admin) stay on gRPC.
//
// What gRPC's transport gave the stream, the wire does itself:
//
//   - Hello acknowledged: the hello goes out with a keepalive ping, and no
//     call is written until its answer comes back. A node that does not
//     speak the wire (an older build, whose port hands the bytes to gRPC or
//     the Redis protocol, or one that refuses the hello as Unimplemented)
//     answers something else or closes: the stream then goes over gRPC, and
//     the client remembers that for wireReprobe (errNoWire). No call's bytes
//     ever reach a protocol that would read them as something else.
//   - Keepalive (dial.Keepalive's figures, as the gRPC connections): after
//     Time with nothing received, a ping; nothing received within Timeout
//     after it, and the connection is closed, which fails the calls on it as
//     a broken stream's (Unavailable, after the request was sent: ambiguous
//     for a mutation) and makes the next call redial.

// Wire names for Options.Wire.
const (
	WireGRPC = "grpc"
	WireTCP  = "tcp"
)

// Timeouts of the framed wire.
const (
	// wireDialTimeout bounds connecting, the TLS handshake and the answer
	// to the hello.
	wireDialTimeout = 5 * time.Second
	// wireWriteTimeout bounds one write: a node that takes no bytes for
	// this long costs the connection (its calls fail as a broken stream's).
	wireWriteTimeout = 10 * time.Second
	// wireWriteSlack is how much longer than wireWriteTimeout a write may
	// wait: the deadline is moved once per wireWriteSlack, not per write.
	wireWriteSlack = time.Second
	// wireReprobe is how long a node found not to speak the framed wire is
	// called over gRPC before a new stream to it tries the wire again (it
	// may have been upgraded): one probe per node per period, not per call.
	wireReprobe = time.Minute
)

// keepWireBuf is the largest send buffer a connection keeps between writes.
const keepWireBuf = 1 << 20

// pingBit marks the ids of keepalive pings: the mux numbers calls from 1
// up and never reaches it, so a ping's answer is never taken for a call's
// (the mux drops replies to ids it does not wait for).
const pingBit = 1 << 63

// errNoWire says a node does not speak the framed wire: no call was sent,
// and the stream goes over gRPC instead.
var errNoWire = errors.New("concord: the node does not speak the framed wire")

// wireDialer opens framed connections to nodes.
type wireDialer struct {
	tls   *tls.Config // nil: plaintext
	token string
	// keepTime and keepTimeout are dial.Keepalive's Time and Timeout; tests
	// shorten them.
	keepTime, keepTimeout time.Duration
}

// newWireDialer returns the dialer of opts' wire: nil for gRPC (and for
// Unary, which has no stream, unless the wire was asked for by name).
func newWireDialer(opts Options) (*wireDialer, error) {
	switch opts.Wire {
	case WireGRPC:
		return nil, nil
	case "":
		if opts.Unary {
			return nil, nil
		}
	case WireTCP:
		if opts.Unary {
			return nil, errors.New("the framed wire carries the request stream: it does not go with Unary")
		}
	default:
		return nil, fmt.Errorf("unknown wire %q (want %q or %q)", opts.Wire, WireTCP, WireGRPC)
	}
	d := &wireDialer{token: opts.AuthToken, keepTime: dial.Keepalive.Time, keepTimeout: dial.Keepalive.Timeout}
	if opts.TLSCAFile != "" {
		cfg, err := certs.ClientConfig(opts.TLSCAFile, opts.TLSCertFile, opts.TLSKeyFile)
		if err != nil {
			return nil, err
		}
		d.tls = cfg
	}
	return d, nil
}

// opener returns what opens addr's streams over the framed wire.
func (d wireDialer) opener(addr string) func(ctx context.Context) (callStream, error) {
	return func(ctx context.Context) (callStream, error) {
		s, err := d.open(ctx, addr)
		switch {
		case err == nil:
			return s, nil
		case errors.Is(err, errNoWire):
			return nil, err
		case status.Code(err) == codes.Unauthenticated, status.Code(err) == codes.PermissionDenied:
			return nil, err // the node refused the hello: retrying will not help
		}
		// Marked unsent: no call was written to this connection.
		return nil, status.Errorf(codes.Unavailable, "concord: Error while dialing %s over the framed wire: %v", addr, err)
	}
}

func (d wireDialer) open(ctx context.Context, addr string) (callStream, error) {
	dctx, cancel := context.WithTimeout(ctx, wireDialTimeout)
	defer cancel()
	c, raw, err := d.connect(dctx, addr)
	if err != nil {
		return nil, err
	}
	s := &framedStream{c: c, raw: raw, fr: frame.NewReader(c, dial.MaxMsgBytes), done: make(chan struct{})}
	if err := s.handshake(dctx, d.token); err != nil {
		_ = raw.Close()
		return nil, err
	}
	// The connection lives as long as the mux (ctx) and no longer than
	// its first failure.
	go s.keepalive(ctx, d.keepTime, d.keepTimeout)
	return s, nil
}

// connect opens the TCP connection to addr (raw), and TLS over it if
// asked (c; raw without TLS).
func (d wireDialer) connect(ctx context.Context, addr string) (c, raw net.Conn, err error) {
	var nd net.Dialer
	raw, err = nd.DialContext(ctx, "tcp", addr)
	if err != nil || d.tls == nil {
		return raw, raw, err
	}
	cfg := d.tls.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, nil, err
	}
	return tc, raw, nil
}

// framedStream is one framed connection as a callStream.
type framedStream struct {
	c net.Conn // TLS over raw, or raw
	// raw is what end closes: closing a TLS connection first writes its
	// close alert, which to a stalled node would wait for the write
	// deadline; the connection is dropped either way.
	raw net.Conn
	fr  *frame.Reader
	// wmu serialises writes: the sender's calls and the keepalive's pings.
	wmu           sync.Mutex
	buf           []byte
	writeDeadline time.Time              // the connection's, for writes; wmu's
	addrs         addrCache              // the receiver's
	lastRecv      atomic.Int64           // when a frame last arrived, in Unix nanoseconds
	pings         uint64                 // pings sent; the keepalive's alone
	why           atomic.Pointer[string] // why the keepalive closed the connection
	done          chan struct{}
	doneOnce      sync.Once
}

// end closes the connection, once: Recv then fails, and the receiver fails
// the calls sent on it.
func (s *framedStream) end() {
	s.doneOnce.Do(func() {
		close(s.done)
		_ = s.raw.Close()
	})
}

// handshake sends the hello and a ping, and waits for the ping's answer:
// the node speaks the wire and accepted the token. A refusal is returned
// as its status; an answer that is not a frame of the wire, or an end
// before any, is errNoWire; no answer before ctx ends is a plain error.
func (s *framedStream) handshake(ctx context.Context, token string) error {
	hello, err := frame.AppendHello(nil, frame.KVMagic, token)
	if err != nil {
		return err
	}
	id := s.nextPing()
	if hello, err = frame.Append(hello, pingRequest(id)); err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	_ = s.c.SetDeadline(dl)
	// Client.Close (the mux's context) need not wait out the deadline.
	stop := context.AfterFunc(ctx, func() { _ = s.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := s.c.Write(hello); err != nil {
		return err
	}
	resp := &concordpb.StreamResponse{}
	err = s.fr.Next(resp)
	var ne net.Error
	switch {
	case ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer to the hello: %w", err)
	case err != nil:
		return fmt.Errorf("%w (its answer to the hello: %v)", errNoWire, err)
	}
	if r := refusal(resp); r != nil {
		if status.Code(r) == codes.Unimplemented {
			return fmt.Errorf("%w (it refused the hello: %v)", errNoWire, r)
		}
		return r
	}
	if rs := resp.GetReplies(); len(rs) != 1 || rs[0].GetId() != id {
		return fmt.Errorf("%w (its answer to the hello is not the ping's)", errNoWire)
	}
	if !stop() || ctx.Err() != nil {
		return fmt.Errorf("no answer to the hello in time: %w", ctx.Err())
	}
	_ = s.c.SetDeadline(time.Time{})
	s.lastRecv.Store(time.Now().UnixNano())
	return nil
}

func (s *framedStream) nextPing() uint64 {
	s.pings++
	return pingBit | s.pings
}

// pingRequest is a message of one keepalive ping. A node answers it with a
// reply of the same id: a pong, or, from a node older than pings, a call
// without a request refused as InvalidArgument; either proves it alive.
func pingRequest(id uint64) *concordpb.StreamRequest {
	return &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: id,
		Request: &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}}}}
}

// keepalive pings the node after every interval with nothing received,
// and closes the connection when nothing comes back within timeout; it
// closes it too when ctx (the mux) ends, and returns once it is closed.
func (s *framedStream) keepalive(ctx context.Context, interval, timeout time.Duration) {
	t := time.NewTimer(interval)
	defer t.Stop()
	var pinged time.Time // when the ping awaiting an answer went; zero: none
	for s.await(ctx, t) {
		now := time.Now()
		last := time.Unix(0, s.lastRecv.Load())
		if !pinged.IsZero() && !last.Before(pinged) {
			pinged = time.Time{} // answered (by the pong or by anything)
		}
		if !pinged.IsZero() {
			if left := timeout - now.Sub(pinged); left > 0 {
				t.Reset(min(left, interval))
				continue
			}
			s.fail(fmt.Sprintf("keepalive: nothing received within %v of a ping", timeout))
			return
		}
		if idle := now.Sub(last); idle < interval {
			t.Reset(interval - idle)
			continue
		}
		if err := s.ping(timeout); err != nil {
			s.fail(fmt.Sprintf("keepalive ping: %v", err))
			return
		}
		pinged = now
		t.Reset(min(timeout, interval))
	}
}

// await waits for t; false when the stream ended (or ctx did, which ends
// it) first.
func (s *framedStream) await(ctx context.Context, t *time.Timer) bool {
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		s.end()
		return false
	case <-s.done:
		return false
	}
}

// ping writes one ping, within timeout. While the sender is writing, the
// ping would only queue behind its bytes: it is skipped, and the answer to
// anything sent counts as the ping's.
func (s *framedStream) ping(timeout time.Duration) error {
	if !s.wmu.TryLock() {
		return nil
	}
	defer s.wmu.Unlock()
	buf, err := frame.Append(nil, pingRequest(s.nextPing()))
	if err != nil {
		return err
	}
	_ = s.c.SetWriteDeadline(time.Now().Add(timeout))
	s.writeDeadline = time.Time{} // the next Send sets its own
	_, err = s.c.Write(buf)
	return err
}

// fail closes the connection for why, which Recv reports.
func (s *framedStream) fail(why string) {
	s.why.CompareAndSwap(nil, &why)
	s.end()
}

// Send writes req as one frame. A failed write ends the connection: Recv
// then fails, and the receiver fails the calls sent on it.
func (s *framedStream) Send(req *concordpb.StreamRequest) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	buf := append(s.buf[:0], 0, 0, 0, 0)
	buf, err := appendRequest(buf, req)
	if err == nil {
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-frame.Header))
		s.extendWriteDeadline()
		_, err = s.c.Write(buf)
	}
	if cap(buf) <= keepWireBuf {
		s.buf = buf
	} else {
		s.buf = nil
	}
	if err != nil {
		s.end()
	}
	return err
}

// extendWriteDeadline keeps the write deadline between wireWriteTimeout
// and wireWriteTimeout+wireWriteSlack away: moving it on every write, a
// timer update in the runtime, cost more than the write's bookkeeping.
// Called with wmu held.
func (s *framedStream) extendWriteDeadline() {
	now := time.Now()
	if s.writeDeadline.Sub(now) >= wireWriteTimeout {
		return
	}
	s.writeDeadline = now.Add(wireWriteTimeout + wireWriteSlack)
	_ = s.c.SetWriteDeadline(s.writeDeadline)
}

func (s *framedStream) Recv() (*concordpb.StreamResponse, error) {
	data, err := s.fr.NextBytes()
	var resp *concordpb.StreamResponse
	if err == nil {
		resp, err = decodeResponse(data, &s.addrs)
	}
	if err != nil {
		s.end()
		if why := s.why.Load(); why != nil {
			return nil, status.Error(codes.Unavailable, "framed connection: "+*why)
		}
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("framed connection: %v", err))
	}
	s.lastRecv.Store(time.Now().UnixNano())
	return resp, nil
}

// refusal returns the error of a node's answer to a refused hello: one
// reply, id 0 (no call has it), with a code.
func refusal(resp *concordpb.StreamResponse) error {
	rs := resp.GetReplies()
	if len(rs) != 1 || rs[0].GetId() != 0 || rs[0].GetCode() == 0 {
		return nil
	}
	return status.Error(codes.Code(rs[0].GetCode()), rs[0].GetMessage())
}
