package portmux

import (
	"net"
	"sync"
	"sync/atomic"
)

// Limit returns a listener of l's connections that keeps at most n of
// them open at once (n at least 1): while n are open, one more is closed
// as soon as it is accepted, and Accept waits for the next. Closing it at
// once, not leaving it in the backlog as netutil.LimitListener does, lets
// its client see the failure (gRPC's Unavailable, which clients retry)
// instead of hanging; and the listener's server (gRPC's) never sees it, so
// a flood of connections costs it nothing past the cap. A connection
// counts until it is closed.
func Limit(l net.Listener, n int) *LimitListener {
	return &LimitListener{Listener: l, max: int64(max(n, 1))}
}

// LimitListener is a listener bounded by Limit.
type LimitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

// Accept returns the next connection while fewer than the limit are
// open, closing those that come past it.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		_ = c.Close()
	}
}

// Open is how many of its connections are open.
func (l *LimitListener) Open() int { return int(l.open.Load()) }

// Refused is how many connections it has closed for the limit.
func (l *LimitListener) Refused() int64 { return l.refused.Load() }

// limitedConn gives its slot back when first closed.
type limitedConn struct {
	net.Conn
	l    *LimitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// NetConn returns the connection beneath, as tls.Conn does: gRPC's
// credentials look through it for the TLS state.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }
