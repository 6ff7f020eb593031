package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/transport"
)

// TestClientCertIsNotANode: `concord certs` signs the node certificate and
// the client certificate with the same CA, so "signed by the CA" cannot be
// what makes a caller a node. The client certificate lets its holder make
// client calls (TestClientWireTLS), but the calls only nodes make (Probe,
// Join, Heartbeat, the raft transport over gRPC and the framed raft wire)
// are refused to it; the node certificate still passes.
func TestClientCertIsNotANode(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	n := startSolo(t, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = f(certs.NodeFile), f(certs.NodeKey), f(certs.CAFile)
	})
	asClient := dial.Security{CAFile: f(certs.CAFile), CertFile: f(certs.ClientFile), KeyFile: f(certs.ClientKey)}
	asNode := dial.Security{CAFile: f(certs.CAFile), CertFile: f(certs.NodeFile), KeyFile: f(certs.NodeKey)}

	if err := probe(t, n.Addr(), asNode); err != nil {
		t.Fatalf("Probe with the node certificate: %v", err)
	}
	if err := probe(t, n.Addr(), asClient); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Probe with the client certificate: err %v, want Unauthenticated", err)
	}
	if err := join(t, n.Addr(), asClient); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Join with the client certificate: err %v, want Unauthenticated", err)
	}
	if err := raftSend(t, n.Addr(), asClient); status.Code(err) != codes.Unauthenticated {
		t.Errorf("RaftTransport.Send with the client certificate: err %v, want Unauthenticated", err)
	}
	// Every method, so that one added later is classified too: exactly the
	// raft transport's and Probe, Join, Heartbeat are for nodes.
	opts, err := asClient.Options()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial.Dial(n.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	nodeOnly := map[string]bool{"/concord.v1.RaftTransport/Send": true, "/concord.v1.RaftTransport/SendSnapshot": true,
		"/concord.v1.Cluster/Probe": true, "/concord.v1.Cluster/Join": true, "/concord.v1.Cluster/Heartbeat": true}
	for svc, info := range n.srv.GetServiceInfo() {
		for _, m := range info.Methods {
			method := "/" + svc + "/" + m.Name
			err := callEmpty(conn, method, m.IsClientStream || m.IsServerStream)
			if refused := status.Code(err) == codes.Unauthenticated; refused != nodeOnly[method] {
				t.Errorf("%s with the client certificate: %v (node-only: %v)", method, err, nodeOnly[method])
			}
		}
	}
	clientTLS, err := certs.ClientConfig(f(certs.CAFile), f(certs.ClientFile), f(certs.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	if !framedRaftRefused(t, n.Addr(), clientTLS) {
		t.Error("framed raft connection with the client certificate: not closed after its hello")
	}
}

// dialAs is a gRPC connection to addr made as sec says.
func dialAs(t *testing.T, addr string, sec dial.Security) concordpb.ClusterClient {
	t.Helper()
	opts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return concordpb.NewClusterClient(conn)
}

func probe(t *testing.T, addr string, sec dial.Security) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dialAs(t, addr, sec).Probe(ctx, &concordpb.ProbeRequest{})
	return err
}

func join(t *testing.T, addr string, sec dial.Security) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dialAs(t, addr, sec).Join(ctx, &concordpb.JoinRequest{Address: "127.0.0.1:1"})
	return err
}

func raftSend(t *testing.T, addr string, sec dial.Security) error {
	opts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := concordpb.NewRaftTransportClient(conn).Send(ctx)
	if err == nil {
		_ = stream.Send(&concordpb.RaftBatch{})
		_, err = stream.CloseAndRecv()
	}
	return err
}

// framedRaftRefused says hello on the framed raft wire over TLS with cfg and
// reports whether the node closed the connection (within 10 s). A node that
// takes the hello waits for frames, so only a refusal closes it.
func framedRaftRefused(t *testing.T, addr string, cfg *tls.Config) bool {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	hello := append(append([]byte(nil), transport.Magic...), 0, 0)
	if _, err := conn.Write(hello); err != nil {
		t.Fatalf("framed raft hello: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	_, err = io.Copy(io.Discard, conn)
	return !(errors.As(err, &ne) && ne.Timeout())
}
