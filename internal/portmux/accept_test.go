package portmux_test

import (
	"bufio"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/portmux"
)

// exhausted is a listener out of file descriptors: its Accept fails with
// EMFILE, as the kernel's does, while fail says so.
type exhausted struct {
	net.Listener
	mu   sync.Mutex
	fail int // Accepts left to fail; -1: every one
}

func (l *exhausted) Accept() (net.Conn, error) {
	l.mu.Lock()
	failing := l.fail != 0
	if l.fail > 0 {
		l.fail--
	}
	l.mu.Unlock()
	if failing {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptOutOfDescriptors: a node out of file descriptors for a moment
// (a flood of connections) keeps its port: the mux waits and accepts
// again, as net/http and gRPC do, instead of closing the port for good;
// before, the first such error closed the mux and every protocol on it.
func TestAcceptOutOfDescriptors(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &exhausted{Listener: tl, fail: 3}
	m := portmux.New(l, 5*time.Second)
	served := make(chan error, 1)
	go func() { served <- m.Serve() }()
	go func() {
		for {
			c, err := m.Other().Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	defer func() {
		m.Close()
		<-served
	}()
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "PING\r\n" {
		t.Fatalf("after failed accepts: echo %q, %v", line, err)
	}
}

// TestCloseWhileAcceptFails: Close ends Serve even while every Accept
// fails with a temporary error.
func TestCloseWhileAcceptFails(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := portmux.New(&exhausted{Listener: tl, fail: -1}, 5*time.Second)
	served := make(chan error, 1)
	go func() { served <- m.Serve() }()
	m.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
}
