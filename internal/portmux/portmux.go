// Package portmux serves several protocols on one TCP port: gRPC (HTTP/2),
// the Redis protocol, and any protocol registered with Match (the framed
// raft transport, whose connections open with a magic of their own). Both are client-speaks-first, and every HTTP/2
// connection opens with the same 24-byte preface, so the first bytes of a
// connection say which it is: a connection whose bytes match the preface
// goes to the gRPC listener, any other to the Redis one. This is what lets
// a client given only a node's address (the CS739 library, redis-cli
// pointed at `--addr`) talk RESP to it, as cmux does for etcd's ports.
//
// With TLS the mux sits above a tls.Listener: its first read of a
// connection runs the handshake (under the same timeout), and the bytes it
// sniffs are the decrypted ones, so both protocols work over TLS on the one
// port. A connection it hands on still exposes the TLS state beneath
// (NetConn), for gRPC's credentials.
//
// A connection not yet told apart holds a goroutine and a socket: it has
// the mux's timeout to say which it is, and at most SetMaxPending of them
// wait at once; one more closes the oldest, so a flood of silent
// connections pushes out only itself, never a client that speaks at once.
package portmux

import (
	"bytes"
	"container/list"
	"errors"
	"net"
	"sync"
	"time"
)

// DefaultMaxPending is how many connections may wait for their first bytes
// at once unless SetMaxPending says otherwise: every client speaks at once,
// so a connection waits here for a round trip (and a TLS handshake), and
// a thousand clients reconnecting together fit.
const DefaultMaxPending = 1024

// preface opens every HTTP/2 connection (RFC 9113, section 3.4).
var preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// Mux splits one listener into several.
type Mux struct {
	l       net.Listener
	timeout time.Duration
	grpc    *sub
	other   *sub
	// routes are the listeners of connections that open with a prefix:
	// gRPC's preface and those of Match. Fixed once Serve starts.
	routes []route

	// maxPending bounds pending: the connections not yet told apart
	// (each holds a goroutine, a socket and, with TLS, its handshake).
	maxPending int
	mu         sync.Mutex
	pending    *list.List // guarded by mu: of net.Conn, oldest first

	closeOnce sync.Once
	doneC     chan struct{}
}

// New splits l. timeout bounds how long a new connection may take to send
// enough bytes to be told apart; one that takes longer is closed.
func New(l net.Listener, timeout time.Duration) *Mux {
	m := &Mux{l: l, timeout: timeout, maxPending: DefaultMaxPending, pending: list.New(), doneC: make(chan struct{})}
	m.grpc = &sub{m: m, c: make(chan net.Conn)}
	m.other = &sub{m: m, c: make(chan net.Conn)}
	m.routes = []route{{prefix: preface, sub: m.grpc}}
	return m
}

// route sends the connections that open with prefix to sub.
type route struct {
	prefix []byte
	sub    *sub
}

// Match returns the listener of connections whose first bytes are prefix
// (which must not begin with, or be a beginning of, another's). Call it
// before Serve.
func (m *Mux) Match(prefix []byte) net.Listener {
	s := &sub{m: m, c: make(chan net.Conn)}
	m.routes = append(m.routes, route{prefix: append([]byte(nil), prefix...), sub: s})
	return s
}

// SetMaxPending bounds the connections waiting for their first bytes (n
// at least 1; DefaultMaxPending otherwise). Call it before Serve.
func (m *Mux) SetMaxPending(n int) {
	m.maxPending = max(n, 1)
}

// Pending is how many connections wait for their first bytes.
func (m *Mux) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pending.Len()
}

// GRPC is the listener of HTTP/2 connections.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// Other is the listener of every other connection (the Redis protocol).
func (m *Mux) Other() net.Listener { return m.other }

// Serve accepts connections until the listener fails or Close is called.
// A temporary failure (the process out of file descriptors, the kernel
// out of buffers) is waited out, backing off from 5 ms to 1 s as net/http
// and gRPC do: the port must outlive a flood of connections.
func (m *Mux) Serve() error {
	var delay time.Duration
	for {
		c, err := m.l.Accept()
		if err != nil {
			if !temporary(err) {
				m.Close()
				return err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
				continue
			case <-m.doneC:
				t.Stop()
				return net.ErrClosed
			}
		}
		delay = 0
		e, oldest := m.admit(c)
		if oldest != nil {
			_ = oldest.Close() // its route goroutine ends on the failed read
		}
		go m.route(c, e)
	}
}

// admit records c as pending. When maxPending are pending already, the
// oldest of them leaves the count and is returned for the caller to close:
// not c, since a real client speaks at once, so silent connections then
// push out only each other, while refusing c would let them keep every
// client out (the rule of the raft transport's hello slots).
func (m *Mux) admit(c net.Conn) (e *list.Element, oldest net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending.Len() >= m.maxPending {
		front := m.pending.Front()
		oldest = m.pending.Remove(front).(net.Conn)
		front.Value = nil // for settle: pushed out
	}
	return m.pending.PushBack(c), oldest
}

// settle takes e's connection off the pending ones; false when admit
// pushed it out meanwhile (and closed it, or is about to).
func (m *Mux) settle(e *list.Element) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Value == nil {
		return false
	}
	m.pending.Remove(e)
	return true
}

// temporary reports whether an Accept error may pass (EMFILE, ENFILE,
// ENOBUFS, ...: the errors net.Error's deprecated Temporary still names).
func temporary(err error) bool {
	var te interface{ Temporary() bool }
	return errors.As(err, &te) && te.Temporary()
}

// Close closes the listener; both sub-listeners then fail Accept. Closing
// either sub-listener closes the Mux: the two protocols stop together.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.doneC)
		err = m.l.Close()
		m.mu.Lock()
		for e := m.pending.Front(); e != nil; e = e.Next() {
			_ = e.Value.(net.Conn).Close()
		}
		m.mu.Unlock()
	})
	return err
}

// route reads c's first bytes and hands it to the listener they belong to:
// the route whose prefix they are, or Other as soon as they match none.
// Until then it is pending, as e.
func (m *Mux) route(c net.Conn, e *list.Element) {
	_ = c.SetReadDeadline(time.Now().Add(m.timeout))
	longest := 0
	for _, r := range m.routes {
		longest = max(longest, len(r.prefix))
	}
	buf := make([]byte, longest)
	n := 0
	var dst *sub
	for dst == nil {
		k, err := c.Read(buf[n:])
		n += k
		var open bool // whether some prefix still matches what was read
		dst, open = m.match(buf[:n])
		if dst == nil && !open {
			dst = m.other
		}
		if dst == nil && err != nil {
			m.settle(e)
			_ = c.Close() // ended, silent or pushed out before saying which it is
			return
		}
	}
	if !m.settle(e) {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &peeked{Conn: c, head: buf[:n]}
	select {
	case dst.c <- pc:
	case <-m.doneC:
		_ = c.Close()
	}
}

// match returns the route whose whole prefix head begins with, or (nil,
// true) while head is still the beginning of some prefix.
func (m *Mux) match(head []byte) (*sub, bool) {
	open := false
	for _, r := range m.routes {
		switch {
		case len(head) >= len(r.prefix) && bytes.HasPrefix(head, r.prefix):
			return r.sub, true
		case bytes.HasPrefix(r.prefix, head):
			open = true
		}
	}
	return nil, open
}

// sub is one of the listeners.
type sub struct {
	m *Mux
	c chan net.Conn
}

func (s *sub) Accept() (net.Conn, error) {
	select {
	case c := <-s.c:
		return c, nil
	case <-s.m.doneC:
		return nil, net.ErrClosed
	}
}

func (s *sub) Close() error   { return s.m.Close() }
func (s *sub) Addr() net.Addr { return s.m.l.Addr() }

// peeked is a connection whose first bytes were read already: Read returns
// them first.
type peeked struct {
	net.Conn
	head []byte
}

func (p *peeked) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// NetConn returns the connection under p, as tls.Conn does: gRPC's
// credentials find the TLS state of a decrypted connection through it.
func (p *peeked) NetConn() net.Conn { return p.Conn }
