package redisapi

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/portmux"
)

// firstDeadline is the first-command deadline of these tests: the
// trickles below take several times as long.
const firstDeadline = 400 * time.Millisecond

// trickle writes b to nc in n chunks, one every 40 ms: a slow link. The
// pause is the test's pace, not synchronisation.
func trickle(t *testing.T, nc net.Conn, b []byte, n int) {
	t.Helper()
	step := (len(b) + n - 1) / n
	for len(b) > 0 {
		k := min(step, len(b))
		if _, err := nc.Write(b[:k]); err != nil {
			t.Fatalf("write: %v", err)
		}
		b = b[k:]
		if len(b) > 0 {
			time.Sleep(40 * time.Millisecond)
		}
	}
}

// TestSlowFirstCommandServed: a first command that arrives slowly but
// steadily, over several times the first-command deadline, is executed,
// on a plain socket, over TLS and through the port mux. Before, the
// deadline covered the whole first command, and such a client (a large
// SET over a slow link) was cut off mid-command, while the same command
// sent second worked.
func TestSlowFirstCommandServed(t *testing.T) {
	set := []byte(encode("SET k " + strings.Repeat("v", 64<<10)))
	for _, how := range []string{"plain", "tls", "mux"} {
		t.Run(how, func(t *testing.T) {
			f := &fakeKV{counters: map[string]int64{}}
			s := New(f, Config{FirstCommandTimeout: firstDeadline})
			nc := dialFirstCmd(t, s, how)
			start := time.Now()
			trickle(t, nc, set, 24) // 920 ms
			if took := time.Since(start); took < 2*firstDeadline {
				t.Fatalf("the trickle took %v, not past the deadline", took)
			}
			c := &sockClient{t: t, nc: nc, br: bufio.NewReader(nc)}
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if v := c.reply(); v.Str != "OK" {
				t.Fatalf("a slow first SET: %v", v)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.log) != 1 || f.log[0] != "batch k" {
				t.Fatalf("the backend saw %q, want the SET", f.log)
			}
		})
	}
}

// dialFirstCmd serves s on a 127.0.0.1 listener (plain, TLS, or the
// Other side of a port mux, as the node's --addr) and dials it.
func dialFirstCmd(t *testing.T, s *Server, how string) net.Conn {
	t.Helper()
	t.Cleanup(func() { s.Close(time.Second) })
	switch how {
	case "tls":
		l, srvCfg, cliCfg := tlsListener(t)
		s.Serve(tls.NewListener(l, srvCfg))
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Addr().String(), cliCfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	case "mux":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := portmux.New(l, firstDeadline)
		go func() { _ = m.Serve() }()
		s.Serve(m.Other())
		return dialRESP(t, s)
	}
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return dialRESP(t, s)
}

// TestStalledFirstCommandClosed: the deadline still holds a connection to
// progress: one that sends nothing, one byte then nothing, or part of its
// first command (over longer than the deadline) then nothing, is closed
// once the deadline passes without bytes.
func TestStalledFirstCommandClosed(t *testing.T) {
	set := []byte(encode("SET k " + strings.Repeat("v", 64<<10)))
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"one byte", set[:1]},
		{"half a command", set[:len(set)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(&fakeKV{counters: map[string]int64{}}, Config{FirstCommandTimeout: firstDeadline})
			nc := dialFirstCmd(t, s, "plain")
			trickle(t, nc, tc.send, 8)
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, nc); err != nil && !isReset(err) {
				t.Fatalf("a stalled first command: read %v, want it closed by the server", err)
			}
			pollUntil(t, "the stalled connection forgotten", func() bool { return s.Clients() == 0 })
		})
	}
}

// isReset reports whether err is the server closing a connection with
// unread bytes (a reset), which is also the server closing it.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(err.Error(), "reset")
}

// TestSlowUnauthenticatedFirstCommandBounded: with a token, the small
// limits of an unauthenticated connection hold however slowly its first
// command comes: a header past them, trickled in, is refused as soon as
// it is whole and the connection closed, so a slow client without the
// token holds no more than a fast one. AUTH then a large SET, trickled in
// one stream, is served.
func TestSlowUnauthenticatedFirstCommandBounded(t *testing.T) {
	t.Run("over the limits", func(t *testing.T) {
		s := New(&fakeKV{counters: map[string]int64{}}, Config{AuthToken: "s3cret", FirstCommandTimeout: firstDeadline})
		nc := dialFirstCmd(t, s, "plain")
		trickle(t, nc, []byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$102400\r\n"), 8)
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(nc).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "-ERR Protocol error: unauthenticated bulk length") {
			t.Fatalf("answered %q, %v; want the unauthenticated bulk length refused", line, err)
		}
		pollUntil(t, "the refused connection forgotten", func() bool { return s.Clients() == 0 })
	})
	t.Run("AUTH then a large SET", func(t *testing.T) {
		f := &fakeKV{counters: map[string]int64{}}
		s := New(f, Config{AuthToken: "s3cret", FirstCommandTimeout: firstDeadline})
		nc := dialFirstCmd(t, s, "plain")
		trickle(t, nc, []byte(encode("AUTH s3cret", "SET k "+strings.Repeat("v", 64<<10))), 24)
		c := &sockClient{t: t, nc: nc, br: bufio.NewReader(nc)}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		for _, want := range []string{"OK", "OK"} {
			if v := c.reply(); v.Str != want {
				t.Fatalf("answered %.40q, want %q", v.Str, want)
			}
		}
	})
}

// TestProgressingFirstCommandNotPushedOutFirst: at MaxClients a new
// connection closes the connection that has waited longest without
// sending a byte of its first command: one whose first command is still
// arriving, slowly, counts from its last bytes, so silent sockets that
// came after it go first, and it is served once its command is whole.
// It is still pushed out once it is the longest waiting: otherwise a
// flood of sockets that send a byte now and then would hold every slot.
func TestProgressingFirstCommandNotPushedOutFirst(t *testing.T) {
	const max = 3
	f := &fakeKV{counters: map[string]int64{}}
	s := New(f, Config{MaxClients: max, FirstCommandTimeout: 10 * time.Second})
	slow := dialFirstCmd(t, s, "plain")
	set := []byte(encode("SET k " + strings.Repeat("v", 1000)))
	trickle(t, slow, set[:10], 1)
	silent := dialRESP(t, s)
	pollUntil(t, "both admitted", func() bool { return s.Clients() == 2 })
	trickle(t, slow, set[10:20], 1)
	pollUntil(t, "the slow client's bytes read", func() bool { return lastSilentIs(s, slow) })
	dialRESP(t, s)                                         // the third: the cap
	if got := pingOn(dialRESP(t, s)); got != "+PONG\r\n" { // the fourth pushes one out
		t.Fatalf("a client at the cap: %q", got)
	}
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the silent socket: read %v, want it closed", err)
	}
	trickle(t, slow, set[20:], 1)
	c := &sockClient{t: t, nc: slow, br: bufio.NewReader(slow)}
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if v := c.reply(); v.Str != "OK" {
		t.Fatalf("the slow client's SET: %v", v)
	}
}

// lastSilentIs says whether nc's server side is the last of the
// connections pushed out for new ones (the one pushed out last).
func lastSilentIs(s *Server, nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	back := s.silent.Back()
	return back != nil && back.Value.(*conn).nc.RemoteAddr().String() == nc.LocalAddr().String()
}

// TestProgressingFirstCommandStillPushedOut: at MaxClients, with every
// other connection having spoken, a connection whose first command is
// still arriving is the one pushed out for a new one: sending bytes now
// and then does not make a socket safe from eviction.
func TestProgressingFirstCommandStillPushedOut(t *testing.T) {
	const max = 2
	s := New(&fakeKV{counters: map[string]int64{}}, Config{MaxClients: max, FirstCommandTimeout: 10 * time.Second})
	spoke := dialFirstCmd(t, s, "plain")
	if got := pingOn(spoke); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	slow := dialRESP(t, s)
	trickle(t, slow, []byte(encode("SET k v")[:10]), 1)
	pollUntil(t, "the slow client's bytes read", func() bool { return lastSilentIs(s, slow) })
	if got := pingOn(dialRESP(t, s)); got != "+PONG\r\n" {
		t.Fatalf("a client at the cap: %q", got)
	}
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := slow.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the connection still in its first command: read %v, want it closed", err)
	}
	if got := pingOn(spoke); got != "+PONG\r\n" {
		t.Fatalf("the client that spoke: %q", got)
	}
}
