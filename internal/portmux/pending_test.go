package portmux_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/portmux"
)

// echoMux serves a line echo server as Other on a mux of a fresh port
// with the given timeout and cap on pending connections.
func echoMux(t *testing.T, timeout time.Duration, maxPending int) (*portmux.Mux, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := portmux.New(l, timeout)
	m.SetMaxPending(maxPending)
	go func() {
		for {
			c, err := m.Other().Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	served := make(chan error, 1)
	go func() { served <- m.Serve() }()
	t.Cleanup(func() { m.Close(); <-served })
	return m, l.Addr().String()
}

// pollFor waits (at most 10 s) until cond holds.
func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// echoes says whether a client that speaks at once is served on addr.
func echoes(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "PING\r\n" {
		t.Fatalf("a client that speaks at once, among silent connections: echo %q, %v", line, err)
	}
}

// TestSilentConnsBounded (found by review): connections that never send
// their first bytes each held a goroutine and a socket for the whole
// timeout (a minute on a node), however many there were, so a flood of
// them ran the node out of descriptors and memory. At most maxPending
// now wait: each one past it closes the oldest, whose goroutine ends,
// and a client that speaks at once is served throughout.
func TestSilentConnsBounded(t *testing.T) {
	const maxPending, flood = 8, 200
	m, addr := echoMux(t, time.Hour, maxPending)
	base := runtime.NumGoroutine()
	silent := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
		if got := m.Pending(); got > maxPending {
			t.Fatalf("%d connections pending, at most %d", got, maxPending)
		}
	}
	pollFor(t, "the newest connections pending", func() bool { return m.Pending() == maxPending })
	// The oldest were closed by the mux: a read sees their end, not the
	// test's deadline.
	for _, c := range silent[:flood-maxPending-8] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var ne net.Error
		if _, err := c.Read(make([]byte, 1)); errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a silent connection past the cap is still open")
		}
	}
	// Their goroutines are gone: far fewer than one per connection remain
	// (the test's own dials hold none).
	pollFor(t, "the pushed-out connections' goroutines to end", func() bool {
		return runtime.NumGoroutine() < base+flood/2
	})
	echoes(t, addr)
}

// TestPendingSettledOnceRouted: a connection leaves the pending count as
// soon as it is told apart, so clients that speak never fill it.
func TestPendingSettledOnceRouted(t *testing.T) {
	m, addr := echoMux(t, time.Hour, 4)
	for range 20 {
		echoes(t, addr)
	}
	pollFor(t, "no connection pending", func() bool { return m.Pending() == 0 })
}

// TestCloseClosesPending: Close ends the connections still waiting for
// their first bytes, not a timeout later.
func TestCloseClosesPending(t *testing.T) {
	m, addr := echoMux(t, time.Hour, 4)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pollFor(t, "the connection pending", func() bool { return m.Pending() == 1 })
	m.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a pending connection after Close: read gave %v, want EOF", err)
	}
}
