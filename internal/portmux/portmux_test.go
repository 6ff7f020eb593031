package portmux_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/concord-kv/concord/internal/portmux"
)

// start serves gRPC's health service and a line echo server on one port.
func start(t *testing.T, timeout time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := portmux.New(l, timeout)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(m.GRPC()) }()
	go func() {
		for {
			c, err := m.Other().Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	go func() { _ = m.Serve() }()
	t.Cleanup(func() { srv.Stop(); m.Close() })
	return l.Addr().String()
}

// TestBothProtocolsOnOnePort protects the split: a gRPC client and a
// plain-text client (an inline "PING" starts with the preface's first
// byte, and "PRI * HTTP/1.1" with its first nine) reach their own servers
// on one port, with not one byte of what they sent lost.
func TestBothProtocolsOnOnePort(t *testing.T) {
	addr := start(t, 5*time.Second)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health check through the mux: %v %v", resp, err)
	}
	for _, line := range []string{"PING\r\n", "*1\r\n$4\r\nPING\r\n", "PRI * HTTP/1.1\r\n", "P\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(line))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(bufio.NewReader(c), got); err != nil || string(got) != line {
			t.Fatalf("echo of %q through the mux: %q, %v", line, got, err)
		}
		c.Close()
	}
}

// TestSilentConnectionClosed protects the mux from connections that never
// say which protocol they speak (or stop half-way through the preface):
// they are closed after the timeout rather than held forever.
func TestSilentConnectionClosed(t *testing.T) {
	addr := start(t, 200*time.Millisecond)
	for _, head := range []string{"", "PRI * HT"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, head)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("connection that sent %q: read gave %v, want EOF (closed by the mux)", head, err)
		}
		c.Close()
	}
}

// TestMatchedPrefixOwnListener protects the third protocol (the framed raft
// wire): a connection opening with a Match prefix reaches that listener
// with every byte, one that shares only the prefix's first bytes goes to
// Other, and gRPC and Other still work beside it.
func TestMatchedPrefixOwnListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := portmux.New(l, 5*time.Second)
	magic := []byte("\x00magic/1\n")
	matched := m.Match(magic)
	echo := func(l net.Listener, tag string) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, tag+line)
			}()
		}
	}
	go echo(matched, "matched:")
	go echo(m.Other(), "other:")
	go func() { _ = m.Serve() }()
	defer m.Close()
	for _, tc := range []struct{ send, want string }{
		{"\x00magic/1\n", "matched:\x00magic/1\n"},
		{"\x00mag\n", "other:\x00mag\n"},
		{"PING\n", "other:PING\n"},
	} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.send); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if string(got) != tc.want {
			t.Errorf("sent %q: got %q (%v), want %q", tc.send, got, err, tc.want)
		}
	}
}
