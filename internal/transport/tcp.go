package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/concord-kv/concord/internal/ids"
)

// The framed TCP wire (frame.go): each lane of a peer is one TCP connection
// (TLS when Config.TLS is set) through the peer's port mux, carrying
// length-prefixed RaftBatches. Against a gRPC stream it saves, per frame,
// HTTP/2 framing and flow control and two goroutine hand-offs (sender to
// gRPC's writer goroutine, gRPC's reader goroutine to the handler): the
// lane's goroutine writes a wake's frames with one write, and the
// receiver's goroutine reads and delivers them itself.

// Wire names for Config.Wire.
const (
	WireTCP  = "tcp"
	WireGRPC = "grpc"
)

// Timeouts of the framed wire.
const (
	dialTimeout = 5 * time.Second
	// helloTimeout bounds the TLS handshake of a connection this node
	// dials.
	helloTimeout = 10 * time.Second
	// helloReadTimeout bounds how long a receiver waits for an incoming
	// connection's hello past the magic (Transport.helloWait, which tests
	// change). The port mux has run the TLS handshake and read the magic
	// already, and a sender writes its whole hello at once, so the rest
	// is in flight: short, so that silent connections hold a hello slot
	// (Config.MaxHelloConns) only briefly.
	helloReadTimeout = 2 * time.Second
	// writeTimeout bounds one write (Transport.writeWait, which tests
	// shorten): a peer that takes no bytes for this long (stopped, or its
	// host gone) costs the connection; what was queued is dropped and raft
	// retransmits over the next one.
	writeTimeout = 30 * time.Second
	// keepaliveInterval is how often a lane's connection carries a frame
	// of no messages: a bulk lane is silent while no shard appends, and a
	// control lane while this node leads nothing its peer hosts, yet both
	// must outlive the receiver's idle deadline.
	keepaliveInterval = 2 * time.Second
	// idleTimeout is how long a receiver waits for the next bytes of a
	// connection past its hello before it closes it (Transport.idleWait,
	// which tests shorten): five keepalives, and ten election timeouts
	// (10 ticks of 100 ms), so a live sender never reaches it, while a
	// stalled or vanished one does not hold a goroutine and its buffers
	// for ever.
	idleTimeout = 10 * time.Second
	// quietTimeout is idleTimeout for a connection that has carried no
	// keepalive yet: its sender may be a node from before keepalives,
	// whose lane says nothing for as long as its shards are quiet, and
	// whose every closed connection reports this node unreachable to its
	// raft (a rolling upgrade). Long, so that such lanes live; bounded, so
	// that a sender that vanished without a FIN, or one that said its
	// hello and then nothing, does not hold a goroutine for ever (the TCP
	// keepalive of the accepted socket ends a dead host's sooner).
	quietTimeout = 10 * time.Minute
)

// writeChunk is how many bytes of frames the sender gathers before a write.
const writeChunk = 1 << 20

// errConnClosed ends a lane's connection that the receiver closed.
var errConnClosed = errors.New("transport: peer closed the connection")

// tcpStream sends l's queue over one framed connection until it fails or p
// stops; sent says whether any frame went out on it.
func (t *Transport) tcpStream(p *peer, l *lane) (sent bool, err error) {
	conn, err := t.dialPeer(p.addr)
	if err != nil {
		return false, err
	}
	deadC, release := t.watch(p, conn)
	defer release()
	hello, err := appendHello(nil, t.cfg.Token)
	if err != nil {
		return false, err
	}
	// A keepalive right after the hello tells the receiver that this
	// sender keeps its connection alive: only then does it hold the
	// connection to idleTimeout (ServeConn). A receiver from before
	// keepalives delivers it as an empty batch, as every later one.
	hello = append(hello, l.keepalive()...)
	if err := t.writeAll(conn, hello); err != nil {
		return false, err
	}
	keep := time.NewTicker(t.keepaliveWait)
	defer keep.Stop()
	for {
		select {
		case <-l.wakeC:
		case <-keep.C:
			if t.retireIfGone(p) { // a removed node's connection ends here
				return sent, errPeerClosed
			}
			if err := t.writeAll(conn, l.keepalive()); err != nil {
				return sent, err
			}
			continue
		case <-deadC:
			return sent, errConnClosed
		case <-t.stopC:
			return sent, errPeerClosed
		case <-p.stopC:
			return sent, errPeerClosed
		}
		wrote, err := t.writeQueue(conn, p, l)
		sent = sent || wrote
		if err != nil {
			return sent, err
		}
	}
}

// watch starts the two goroutines of a lane's connection: one reads it,
// to learn when it ends (deadC closes) or that the peer does not speak this
// wire (it answered: the peer is marked grpcOnly); one closes it on Stop,
// when the peer goes, or on release, so that a blocked write returns.
// release closes the connection and waits for the reader.
func (t *Transport) watch(p *peer, conn net.Conn) (deadC <-chan struct{}, release func()) {
	dead, closed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(dead)
		var b [64]byte
		for {
			n, err := conn.Read(b[:])
			if n > 0 {
				if !p.grpcOnly.Swap(true) {
					t.log.Info("peer answered a framed raft connection: sending it raft messages over gRPC (a node from before the framed wire?)",
						"peer", p.node, "addr", p.addr)
				}
				_ = conn.Close()
				return
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		select {
		case <-t.stopC:
		case <-p.stopC:
		case <-dead:
		case <-closed:
		}
		_ = conn.Close()
	}()
	return dead, func() { close(closed); <-dead }
}

// writeQueue writes everything queued on l: the queue is its frames
// (lane.go), written as they are, in writes of at most writeChunk bytes
// (each gets its own deadline). It says whether it wrote.
func (t *Transport) writeQueue(conn net.Conn, p *peer, l *lane) (wrote bool, err error) {
	for q := l.take(); q.msgs > 0; q = l.take() {
		if t.isBlocked(p.node) {
			l.recycle(q)
			continue // drop
		}
		for b := q.buf; len(b) > 0; {
			n := min(len(b), writeChunk)
			if err := t.writeAll(conn, b[:n]); err != nil {
				return wrote, err
			}
			b, wrote = b[n:], true
		}
		for _, n := range q.counts {
			t.countFrame(true, n)
		}
		l.recycle(q)
	}
	return wrote, nil
}

func (t *Transport) writeAll(conn net.Conn, b []byte) error {
	_ = conn.SetWriteDeadline(time.Now().Add(t.writeWait))
	_, err := conn.Write(b) // a net.Conn writes all of b or fails
	return err
}

// dialPeer opens a connection to a peer's port, with TLS when configured.
func (t *Transport) dialPeer(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if t.cfg.TLS == nil {
		return conn, nil
	}
	cfg := t.cfg.TLS.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	tc := tls.Client(conn, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return tc, nil
}

// ServeConn receives framed raft traffic from one connection (which the
// port mux found to open with Magic) until it ends, fails to authenticate,
// or sends anything malformed; then it closes the connection. It returns
// at once, closing c, once the transport is stopped.
//
// Until its hello is read and authenticated, a connection has
// helloReadTimeout for it and holds one of Config.MaxHelloConns slots;
// one more closes the oldest in its hello. Past the hello it holds one of
// Config.MaxInboundConns; one more is closed at once (its sender
// retries). Slots apart, so that connections that never finish a hello
// cannot keep peers that do out. Past the hello, a connection that sends
// nothing for idleTimeout is closed once it has sent a keepalive: a live
// sender's lanes send one right after the hello and then every
// keepaliveInterval. Before its first keepalive (a sender from before
// keepalives) the bound is quietTimeout.
func (t *Transport) ServeConn(c net.Conn) {
	oldest, err := t.trackHello(c)
	if oldest != nil {
		t.log.Debug("raft connection closed in its hello for a newer one", "remote", oldest.RemoteAddr())
		_ = oldest.Close() // its own ServeConn untracks it
	}
	if err != nil {
		t.log.Debug("raft connection refused", "remote", c.RemoteAddr(), "err", err)
		_ = c.Close()
		return
	}
	defer t.untrack(c)
	if !t.greet(c) {
		return
	}
	unproven, err := t.promote(c)
	if unproven != nil {
		t.log.Debug("raft connection that carried no frame closed for a newer one", "remote", unproven.RemoteAddr())
		_ = unproven.Close() // its own ServeConn untracks it
	}
	if err != nil {
		t.log.Debug("raft connection refused", "remote", c.RemoteAddr(), "err", err)
		return
	}
	t.serveFrames(c)
}

// greet reads c's hello, under one deadline for all of it, and checks its
// token; it says whether c may go on.
func (t *Transport) greet(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(t.helloWait))
	token, err := readHello(c)
	if err != nil {
		t.log.Debug("raft connection refused", "remote", c.RemoteAddr(), "err", err)
		return false
	}
	if t.cfg.AuthConn != nil {
		if err := t.cfg.AuthConn(c, token); err != nil {
			t.log.Warn("raft connection refused", "remote", c.RemoteAddr(), "err", err)
			return false
		}
	}
	return true
}

// serveFrames reads and delivers c's frames past its hello until c ends or
// sends anything malformed. They are read through idleReader, which sets
// its own deadlines.
func (t *Transport) serveFrames(c net.Conn) {
	idle := &idleReader{c: c, wait: t.quietWait}
	fr := newFrameReader(idle, t.cfg.MaxFrameBytes)
	var sender ids.NodeID
	var dec batchDecoder
	proven := false
	for {
		data, err := fr.NextBytes()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Warn("raft connection ended", "remote", c.RemoteAddr(), "from_node", sender, "err", err)
			}
			return
		}
		// b aliases data, which the next frame overwrites: receive's
		// Deliver copies what it keeps.
		b, err := dec.decode(data)
		if err != nil {
			t.log.Warn("raft connection ended", "remote", c.RemoteAddr(), "from_node", sender, "err", err)
			return
		}
		if len(b.GetMessages()) == 0 {
			t.keepalives.Add(1)
			// The sender sends keepalives: from now on its silence
			// means it is gone.
			idle.wait = t.idleWait
		}
		if err := t.receive(t.ctx, &sender, b); err != nil {
			t.log.Warn("raft connection ended", "remote", c.RemoteAddr(), "from_node", sender, "err", err)
			return
		}
		if !proven {
			t.prove(c)
			proven = true
		}
	}
}

// prove marks c as having carried an accepted frame: from a node of this
// cluster's address book, to this node. Only then is it kept over a new
// connection at MaxInboundConns.
func (t *Transport) prove(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.unproven, c); i >= 0 {
		t.unproven = slices.Delete(t.unproven, i, i+1)
	}
}

// trackHello records an incoming connection in its hello, for Stop to
// close; an error once the transport is stopped. When Config.MaxHelloConns
// are in their hello already, the oldest of them leaves the count and is
// returned for the caller to close: not c, since a real peer says its
// hello at once, so silent connections then push out only each other,
// while refusing c would let them keep every peer out.
func (t *Transport) trackHello(c net.Conn) (oldest net.Conn, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return nil, errors.New("transport: stopped")
	}
	if len(t.greeting) >= t.cfg.MaxHelloConns {
		oldest = t.greeting[0]
		t.greeting = slices.Delete(t.greeting, 0, 1)
	}
	t.greeting = append(t.greeting, c)
	t.wg.Add(1)
	return oldest, nil
}

// promote moves c, past its hello, from the connections in their hello
// to those served, as unproven; an error when it was pushed out of its
// hello slot meanwhile. When Config.MaxInboundConns are served already,
// the oldest unproven one leaves them and is returned for the caller to
// close, or, if every one has proven itself, c is refused: a token (or
// none, without auth) is all a hello shows, so connections that say their
// hello and then nothing push out only each other, while peers' lanes,
// which carry a keepalive at once, are kept. A lane of a sender from
// before keepalives is unproven until its first message, so on a node at
// the bound it may be closed; it redials.
func (t *Transport) promote(c net.Conn) (unproven net.Conn, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := slices.Index(t.greeting, c)
	if i < 0 {
		return nil, errors.New("transport: closed in its hello for a newer connection")
	}
	t.greeting = slices.Delete(t.greeting, i, i+1)
	if len(t.conns) >= t.cfg.MaxInboundConns {
		if len(t.unproven) == 0 {
			return nil, fmt.Errorf("transport: %d raft connections open already (at most %d), each past its first frame", len(t.conns), t.cfg.MaxInboundConns)
		}
		unproven = t.unproven[0]
		t.unproven = slices.Delete(t.unproven, 0, 1)
		delete(t.conns, unproven)
	}
	t.conns[c] = struct{}{}
	t.unproven = append(t.unproven, c)
	return unproven, nil
}

// idleReader reads a connection under an idle deadline: each read must
// start getting bytes within wait. A deadline per read, not per frame, so
// that a large frame on a slow link is not cut off while it flows.
type idleReader struct {
	c    net.Conn
	wait time.Duration
}

func (r *idleReader) Read(b []byte) (int, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(r.wait))
	return r.c.Read(b)
}

func (t *Transport) untrack(c net.Conn) {
	_ = c.Close()
	t.mu.Lock()
	if i := slices.Index(t.greeting, c); i >= 0 {
		t.greeting = slices.Delete(t.greeting, i, i+1)
	}
	delete(t.conns, c)
	if i := slices.Index(t.unproven, c); i >= 0 {
		t.unproven = slices.Delete(t.unproven, i, i+1)
	}
	t.mu.Unlock()
	t.wg.Done()
}
