package redisapi

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed says whether the client has closed its end of nc: a peek at
// the socket, without waiting, finds its end (or a reset) and no bytes
// before it. A RESP client never closes only its sending side, so that
// end is the client gone. Bytes still unread (a pipeline, a TLS alert)
// hide it: then this says no, and the command runs to its end as before.
func peerClosed(nc net.Conn) bool {
	for {
		u, ok := nc.(interface{ NetConn() net.Conn }) // TLS, the port mux's peeked
		if !ok {
			break
		}
		nc = u.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
		return true // never wait for bytes
	})
	return closed
}
