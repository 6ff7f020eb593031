package portmux_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/portmux"
)

// tlsHandoff records whether the connections the mux hands to gRPC still
// expose their TLS state (NetConn down to a *tls.Conn).
type tlsHandoff struct{ seen chan bool }

func (h tlsHandoff) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	isTLS := false
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		_, isTLS = nc.NetConn().(*tls.Conn)
	}
	select {
	case h.seen <- isTLS:
	default:
	}
	return c, credentials.TLSInfo{}, nil
}

func (tlsHandoff) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	panic("server only")
}
func (tlsHandoff) Info() credentials.ProtocolInfo            { return credentials.ProtocolInfo{} }
func (h tlsHandoff) Clone() credentials.TransportCredentials { return h }
func (tlsHandoff) OverrideServerName(string) error           { return nil }

// TestOverTLS protects the mux above a tls.Listener: gRPC and RESP both work
// over TLS on one port, gRPC's connections expose the TLS state beneath,
// and bytes that are not a TLS handshake get the connection closed while
// the port serves on.
func TestOverTLS(t *testing.T) {
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
	m := portmux.New(tls.NewListener(l, srvCfg), 5*time.Second)
	handoff := tlsHandoff{seen: make(chan bool, 1)}
	srv := grpc.NewServer(grpc.Creds(handoff))
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
	addr := l.Addr().String()

	garbage, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(garbage, "*1\r\n$4\r\nPING\r\n") // plaintext RESP on a TLS port
	_ = garbage.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(garbage); err != nil {
		t.Fatalf("plaintext on the TLS port: %v, want the connection closed", err)
	}
	garbage.Close()

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cliCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC over TLS through the mux: %v", err)
	}
	if !<-handoff.seen {
		t.Fatal("the connection handed to gRPC does not expose its *tls.Conn")
	}

	c, err := tls.Dial("tcp", addr, cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	line := "*1\r\n$4\r\nPING\r\n"
	if _, err := io.WriteString(c, line); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(line))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != line {
		t.Fatalf("RESP echo over TLS through the mux: %q, %v", got, err)
	}
}
