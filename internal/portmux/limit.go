package portmux

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limit returns a listener of l's connections that keeps at most n of
// them open at once (n at least 1): while n are open, one more is closed
// as soon as it is accepted, and Accept waits for the next. Closing it at
// once, not leaving it in the backlog as netutil.LimitListener does, lets
// its client see the failure (gRPC's Unavailable, which clients retry)
// instead of hanging; and the listener's server (gRPC's) never sees it, so
// a flood of connections costs it nothing past the cap. A connection
// counts until it is closed. EvictIdle makes room by closing an idle
// connection instead, where there is one.
func Limit(l net.Listener, n int) *LimitListener {
	return &LimitListener{Listener: l, max: int64(max(n, 1)), epoch: time.Now()}
}

// LimitListener is a listener bounded by Limit.
type LimitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
	evicted atomic.Int64
	// epoch is what the connections' activity times count from: time.Since
	// on it reads only the monotonic clock.
	epoch time.Time

	// idleAfter, when set (EvictIdle), lets Accept at the limit close a
	// connection with no call in flight that has read nothing for this long.
	idleAfter time.Duration
	mu        sync.Mutex
	conns     map[*limitedConn]struct{} // open ones; only with idleAfter
	nextScan  time.Duration             // no idle connection before this (since epoch)
}

// EvictIdle makes l, at its limit, close the connection that has been
// idle longest, if one has been for at least after, and serve the new one
// instead of closing it: otherwise connections that opened and then sat
// idle (a flood of them, or a leaky client pool) would hold every slot and
// lock real clients out. Idle means no call in flight, as the server
// counts them with CallStarted and CallEnded (every call must be), and
// nothing read from the client (not even a keepalive ping, which Concord's
// clients send every 10 s: they are never idle this way) and no call ended
// for after. Closing such a connection loses no call; its client, if it
// is still there, reconnects for its next. Call it before Accept.
func (l *LimitListener) EvictIdle(after time.Duration) *LimitListener {
	l.idleAfter = after
	l.conns = make(map[*limitedConn]struct{})
	return l
}

// Accept returns the next connection while fewer than the limit are
// open, or an idle one can be closed (EvictIdle), closing those that come
// past it.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		l.refused.Add(1)
		_ = c.Close()
	}
}

// admit takes a slot for c, making one by closing an idle connection if
// it must and may; nil if there is none.
func (l *LimitListener) admit(c net.Conn) *limitedConn {
	for {
		if l.open.Add(1) <= l.max {
			lc := &limitedConn{Conn: c, l: l}
			lc.addr = connAddr{Addr: c.RemoteAddr(), c: lc}
			lc.touch()
			l.track(lc)
			return lc
		}
		l.open.Add(-1)
		victim := l.idlest()
		if victim == nil {
			return nil
		}
		l.evicted.Add(1)
		victim.evict() // its slot is back at once: try again
	}
}

// track registers lc among the open connections EvictIdle looks through.
func (l *LimitListener) track(lc *limitedConn) {
	if l.conns == nil {
		return
	}
	l.mu.Lock()
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
}

func (l *LimitListener) untrack(lc *limitedConn) {
	if l.conns == nil {
		return
	}
	l.mu.Lock()
	delete(l.conns, lc)
	l.mu.Unlock()
}

// idlest returns the open connection idle longest, if it has been idle
// for at least idleAfter, or nil. It looks through every open connection,
// so a fruitless look is not repeated before some connection could have
// become idle (at most a second later: a call in flight may end at any
// time): a flood of new connections at the limit costs a scan a second,
// not a scan each.
func (l *LimitListener) idlest() *limitedConn {
	if l.conns == nil {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now < l.nextScan {
		return nil
	}
	var victim *limitedConn
	next := now + time.Second
	for c := range l.conns {
		last := time.Duration(c.lastActive.Load())
		switch {
		case c.calls.Load() != 0:
		case now-last < l.idleAfter:
			next = min(next, last+l.idleAfter)
		case victim == nil || last < time.Duration(victim.lastActive.Load()):
			victim = c
		}
	}
	if victim == nil {
		l.nextScan = next
	}
	return victim
}

// now is the time since l's epoch, from the monotonic clock.
func (l *LimitListener) now() time.Duration { return time.Since(l.epoch) }

// Open is how many of its connections are open.
func (l *LimitListener) Open() int { return int(l.open.Load()) }

// Refused is how many connections it has closed for the limit.
func (l *LimitListener) Refused() int64 { return l.refused.Load() }

// Evicted is how many idle connections it has closed to make room.
func (l *LimitListener) Evicted() int64 { return l.evicted.Load() }

// CallStarted counts a call in flight on the connection whose remote
// address is addr (gRPC's peer.Peer.Addr), when it is one of a
// LimitListener's; CallEnded ends it. O(1), atomics only: they run on
// every call.
func CallStarted(addr net.Addr) {
	if a, ok := addr.(*connAddr); ok {
		a.c.calls.Add(1)
	}
}

// CallEnded ends a call CallStarted counted. Its end counts as activity,
// so that EvictIdle leaves the connection its reply and the client's next
// call: a long call reads nothing from a quiet client.
func CallEnded(addr net.Addr) {
	if a, ok := addr.(*connAddr); ok {
		a.c.touch()
		a.c.calls.Add(-1)
	}
}

// limitedConn gives its slot back when first closed, and keeps what
// EvictIdle asks of it: calls in flight and the time of its last activity.
type limitedConn struct {
	net.Conn
	l          *LimitListener
	addr       connAddr
	calls      atomic.Int64
	lastActive atomic.Int64 // since l.epoch
	once       sync.Once
}

// Read notes the time of every read: anything the client sends, a
// keepalive ping included, shows it is there. One read fills gRPC's
// buffer, so this is per batch of frames, not per call.
func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *limitedConn) touch() { c.lastActive.Store(int64(c.l.now())) }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// release gives c's slot back, once.
func (c *limitedConn) release() {
	c.once.Do(func() {
		c.l.untrack(c)
		c.l.open.Add(-1)
	})
}

// evict gives c's slot back now and closes it in the background: closing
// a TLS connection writes its close_notify, which a client that reads
// nothing (its socket buffer full) could make wait for seconds, and Accept,
// which evicts, serves every new connection.
func (c *limitedConn) evict() {
	c.release()
	go c.Conn.Close()
}

// RemoteAddr is the client's address, carrying the connection, so that
// CallStarted and CallEnded find it from a call's peer address.
func (c *limitedConn) RemoteAddr() net.Addr { return &c.addr }

// NetConn returns the connection beneath, as tls.Conn does: gRPC's
// credentials look through it for the TLS state.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// connAddr is a Limit connection's remote address: the address beneath
// (its Network and String), and the connection.
type connAddr struct {
	net.Addr
	c *limitedConn
}
