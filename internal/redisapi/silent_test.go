package redisapi

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/certs"
)

// TestSilentConnectionsClosed: a connection that sends no command within
// FirstCommandTimeout is closed, and one that has sent a command may then
// idle past it (Redis's timeout 0). Before, a silent socket held its
// MaxClients slot for ever.
func TestSilentConnectionsClosed(t *testing.T) {
	s := New(&fakeKV{counters: map[string]int64{}}, Config{FirstCommandTimeout: 300 * time.Millisecond})
	spoke := serveOnSocket(t, s)
	spoke.send(encode("PING"))
	if v := spoke.reply(); v.Str != "PONG" {
		t.Fatalf("PING: %v", v)
	}
	silent := dialRESP(t, s)
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a silent connection: read %v, want it closed by the server", err)
	}
	// The one that spoke has idled as long as the silent one lived, and
	// more: it is still served.
	time.Sleep(400 * time.Millisecond) // idling is the point here, not synchronisation
	spoke.send(encode("PING"))
	if v := spoke.reply(); v.Str != "PONG" {
		t.Fatalf("PING after idling past the first-command timeout: %v", v)
	}
}

// TestStalledTLSHandshakeClosed: over TLS, a connection that starts its
// handshake and stalls is closed at FirstCommandTimeout too (the handshake
// runs on the first read, under its deadline), and a TLS client is served.
func TestStalledTLSHandshakeClosed(t *testing.T) {
	l, srvCfg, cliCfg := tlsListener(t)
	s := New(&fakeKV{counters: map[string]int64{}}, Config{FirstCommandTimeout: 300 * time.Millisecond})
	s.Serve(tls.NewListener(l, srvCfg))
	t.Cleanup(func() { s.Close(time.Second) })
	stalled := dialRESP(t, s)
	if _, err := stalled.Write([]byte{0x16, 0x03, 0x01}); err != nil { // a record header, no more
		t.Fatal(err)
	}
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := stalled.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a stalled TLS handshake: read %v, want it closed by the server", err)
	}
	pollUntil(t, "the stalled connection forgotten", func() bool { return s.Clients() == 0 })
	c, err := tls.Dial("tcp", s.Addr().String(), cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := pingOn(c); got != "+PONG\r\n" {
		t.Fatalf("a TLS client: %q", got)
	}
}

// TestSilentFloodDoesNotLockOutClients: with every MaxClients slot held by
// silent sockets, a new client is served at once (the oldest silent one
// is closed for it), and clients that have spoken are never pushed out:
// with every slot held by them, a new one is refused as before.
func TestSilentFloodDoesNotLockOutClients(t *testing.T) {
	const max = 8
	s := New(&fakeKV{counters: map[string]int64{}}, Config{MaxClients: max})
	first := serveOnSocket(t, s)
	first.send(encode("PING"))
	if v := first.reply(); v.Str != "PONG" {
		t.Fatalf("PING: %v", v)
	}
	var flood []net.Conn
	for range max - 1 {
		flood = append(flood, dialRESP(t, s))
	}
	pollUntil(t, "the flood admitted", func() bool { return s.Clients() == max })
	real := dialRESP(t, s)
	if got := pingOn(real); got != "+PONG\r\n" {
		t.Fatalf("a client while silent sockets hold every slot: %q", got)
	}
	// The oldest silent socket made room for it.
	_ = flood[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := flood[0].Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the oldest silent socket: read %v, want it closed", err)
	}
	// Every slot now held by clients that spoke: a new one is refused.
	for _, nc := range flood[1:] {
		if got := pingOn(nc); got != "+PONG\r\n" {
			t.Fatalf("PING: %q", got)
		}
	}
	if got := pingOn(dialRESP(t, s)); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("a client past maxclients, all of them active: %q", got)
	}
	if got := pingOn(first.nc); got != "+PONG\r\n" {
		t.Fatalf("the first client after the flood: %q", got)
	}
}

func dialRESP(t *testing.T, s *Server) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// pingOn sends PING on nc and returns the reply's first line.
func pingOn(nc net.Conn) string {
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = nc.Write([]byte(encode("PING")))
	line, _ := bufio.NewReader(nc).ReadString('\n')
	return line
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// TestUnauthenticatedClientsPushedOut: with a token, a connection that
// has spoken but not authenticated (a PING, refused NOAUTH) is still
// pushed out for a new one at MaxClients; before, its first command made
// it unevictable, so a flood of PINGs kept every real client out. One
// that authenticated is never pushed out.
func TestUnauthenticatedClientsPushedOut(t *testing.T) {
	const max = 4
	s := New(&fakeKV{counters: map[string]int64{}}, Config{MaxClients: max, AuthToken: "tok"})
	authed := serveOnSocket(t, s)
	authed.send(encode("AUTH tok"))
	if v := authed.reply(); v.Str != "OK" {
		t.Fatalf("AUTH: %v", v)
	}
	var flood []net.Conn
	for range max - 1 {
		nc := dialRESP(t, s)
		if got := pingOn(nc); got[:7] != "-NOAUTH" {
			t.Fatalf("PING without AUTH: %q", got)
		}
		flood = append(flood, nc)
	}
	real := dialRESP(t, s)
	_ = real.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = real.Write([]byte(encode("AUTH tok") + encode("PING")))
	br := bufio.NewReader(real)
	for _, want := range []string{"+OK\r\n", "+PONG\r\n"} {
		if got, _ := br.ReadString('\n'); got != want {
			t.Fatalf("a client while unauthenticated ones hold every slot: %q, want %q", got, want)
		}
	}
	_ = flood[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := flood[0].Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the oldest unauthenticated client: read %v, want it closed", err)
	}
	authed.send(encode("PING"))
	if v := authed.reply(); v.Str != "PONG" {
		t.Fatalf("the authenticated client after the flood: %v", v)
	}
}

// TestRefusalDoesNotHoldTheServer: on a TLS port at MaxClients with every
// client proven, the refusal of a new connection that sends nothing (its
// write waits for a TLS hello) no longer holds the server's lock: a client
// that leaves frees its slot and a new one is served. Before, the refusal
// ran under the lock with no read deadline, and every accept, every
// connection's end and Close waited on it for good.
func TestRefusalDoesNotHoldTheServer(t *testing.T) {
	l, srvCfg, cliCfg := tlsListener(t)
	s := New(&fakeKV{counters: map[string]int64{}}, Config{MaxClients: 1})
	s.Serve(tls.NewListener(l, srvCfg))
	t.Cleanup(func() { s.Close(time.Second) })
	first, err := tls.Dial("tcp", s.Addr().String(), cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := pingOn(first); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	dialRESP(t, s) // silent: no TLS hello; refused, its refusal's write waits
	// Refused before first leaves: accepted after it, the silent one would
	// take its slot (and hold it for the first-command deadline).
	pollUntil(t, "the silent connection refused", func() bool { return s.Refused() == 1 })
	first.Close()
	pollUntil(t, "the first client forgotten", func() bool { return s.Clients() == 0 })
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Addr().String(), cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := pingOn(c); got != "+PONG\r\n" {
		t.Fatalf("a client after the first left: %q", got)
	}
}

// tlsListener returns a listener on 127.0.0.1 and the server and client
// TLS configurations of a CA made for the test.
func tlsListener(t *testing.T) (net.Listener, *tls.Config, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	if _, err := certs.Generate(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	srvCfg, err := certs.ServerConfig(filepath.Join(dir, certs.NodeFile), filepath.Join(dir, certs.NodeKey), filepath.Join(dir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	cliCfg, err := certs.ClientConfig(filepath.Join(dir, certs.CAFile), "", "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l, srvCfg, cliCfg
}
