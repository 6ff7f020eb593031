package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/transport"
)

// refusedWithin is how long a client that must be refused may try: the
// client retries Unavailable (a failed handshake) until its deadline.
const refusedWithin = 2 * time.Second

// TestTLSCluster runs a 3-node cluster with TLS on every port: writes and
// reads through the CLI and the Go client with the CA, replication to every
// node (raft and forwarding over mutual TLS), and refusals of a plaintext
// client, of a client certificate from another CA, of a raft stream without
// a CA-signed certificate and of a node with another CA's certificates
// trying to join. Garbage on the TLS port does not hurt the node.
func TestTLSCluster(t *testing.T) {
	c := startCluster(t, testcluster.Options{TLS: true, HTTP: true, Redis: true})
	ca := filepath.Join(c.CertDir(), certs.CAFile)

	// The CLI with --tls-ca: a write through one node, a read through another.
	if out, err := cli(t, c, "put", "tls-cli", "v1", "--tls-ca", ca); err != nil || strings.TrimSpace(out) != "OK" {
		t.Fatalf("put over TLS: %q, %v", out, err)
	}
	if out, err := cliAt(t, c.Addr(2), "get", "tls-cli", "--tls-ca", ca); err != nil || strings.TrimSpace(out) != "v1" {
		t.Fatalf("get over TLS from node 2: %q, %v", out, err)
	}

	// The Go client with the CA, through node 0 alone (forwarding to every
	// shard's leader), and every node's replicas hold the writes.
	ctx := context.Background()
	cl, err := client.NewWithOptions(ctx, client.Options{Endpoints: []string{c.Addr(0)}, TLSCAFile: ca, ThroughEndpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[string]string{"tls-cli": "v1"}
	for i := range 20 {
		k, v := fmt.Sprintf("tls-%02d", i), fmt.Sprintf("val-%d", i)
		if _, _, err := cl.Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatalf("put %s over TLS: %v", k, err)
		}
		want[k] = v
	}
	for i := range c.N() {
		waitStaleHasAll(t, c, i, want, 30*time.Second)
	}
	// Node 0 forwarded to the other shards' leaders over the framed wire,
	// under mutual TLS, never falling back to gRPC.
	if framed, grpc := forwardedCalls(t, c, 0); framed == 0 || grpc != 0 {
		t.Fatalf("node 0 forwarded %d calls over the framed wire and %d over gRPC; want some and none", framed, grpc)
	}

	// (a) A plaintext client is refused, by the Go client and the CLI.
	if _, err := newClientWithin(client.Options{Endpoints: c.Endpoints()}); err == nil {
		t.Fatal("a plaintext client reached a TLS cluster")
	}
	if out, err := cliAt(t, c.Addr(0), "get", "tls-cli", "--timeout", "1s"); err == nil {
		t.Fatalf("the CLI without --tls-ca read %q from a TLS cluster", out)
	}

	// (b) A client certificate from another CA is refused at the handshake,
	// and so is a client that trusts another CA; one from the cluster's CA
	// is accepted.
	other := t.TempDir()
	if _, err := certs.Generate(other, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := newClientWithin(client.Options{Endpoints: c.Endpoints(), TLSCAFile: ca,
		TLSCertFile: filepath.Join(other, certs.ClientFile), TLSKeyFile: filepath.Join(other, certs.ClientKey)}); err == nil {
		t.Fatal("a client certificate signed by another CA was accepted")
	}
	if _, err := newClientWithin(client.Options{Endpoints: c.Endpoints(), TLSCAFile: filepath.Join(other, certs.CAFile)}); err == nil {
		t.Fatal("a client trusting another CA accepted the nodes' certificates")
	}
	if out, err := cliAt(t, c.Addr(1), "get", "tls-05", "--tls-ca", ca, "--tls-cert", filepath.Join(c.CertDir(), certs.ClientFile),
		"--tls-key", filepath.Join(c.CertDir(), certs.ClientKey)); err != nil || strings.TrimSpace(out) != "val-5" {
		t.Fatalf("get with the CA's client certificate: %q, %v", out, err)
	}

	// (c) Raft traffic without a CA-signed certificate is refused, and a node
	// with another CA's certificates cannot join.
	raftRefused(t, c.Addr(1), dial.Security{CAFile: ca})
	// The framed raft wire, likewise: a connection without a CA-signed
	// certificate is closed after its hello; one with the nodes'
	// certificate that then sends garbage is closed too (the node serves
	// on: the read after the garbage below).
	caOnly, err := certs.ClientConfig(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	framedRaftClosed(t, c.Addr(1), caOnly, "", nil)
	withCert, err := certs.ClientConfig(ca, filepath.Join(c.CertDir(), certs.NodeFile), filepath.Join(c.CertDir(), certs.NodeKey))
	if err != nil {
		t.Fatal(err)
	}
	framedRaftClosed(t, c.Addr(1), withCert, "", []byte{0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	checkJoinRefused(t, c, other)

	checkTLSSidePorts(t, c, ca)

	// Garbage on the TLS port: the node drops the connection and serves on.
	for _, junk := range [][]byte{randomBytes(t, 4096), []byte("\x16\x03\x01\xff\xffnot a handshake"), []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")} {
		sendGarbage(t, c.Addr(0), junk)
	}
	if v, found, err := cl.Get(ctx, []byte("tls-07")); err != nil || !found || string(v) != "val-7" {
		t.Fatalf("read after garbage on the TLS port: %q %v %v", v, found, err)
	}
	if !c.Running(0) {
		t.Fatal("node 0 exited after garbage on its TLS port")
	}
}

// cliAt runs the CLI against one node.
func cliAt(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return runConcord(ctx, t, append(args, "--endpoints", addr)...)
}

// runConcord runs the concord binary; the error carries its standard error.
func runConcord(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, testcluster.Binary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("concord %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// newClientWithin is a client that gets refusedWithin to reach the cluster.
func newClientWithin(opts client.Options) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), refusedWithin)
	defer cancel()
	cl, err := client.NewWithOptions(ctx, opts)
	if err == nil {
		cl.Close()
	}
	return cl, err
}

// raftRefused opens a raft stream to addr with sec and checks that the node
// refuses it as unauthenticated.
func raftRefused(t *testing.T, addr string, sec dial.Security) {
	t.Helper()
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
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("raft stream to %s with %+v: err %v, want Unauthenticated", addr, sec, err)
	}
}

// framedRaftClosed opens a framed raft connection (internal/transport's
// TCP wire; TLS with tlsCfg unless nil), says hello with token, writes
// after, and checks that the node closes the connection. A node that takes
// the hello waits for frames: only a refusal (or bad frames) closes it.
func framedRaftClosed(t *testing.T, addr string, tlsCfg *tls.Config, token string, after []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		tlsCfg = tlsCfg.Clone()
		tlsCfg.ServerName, _, _ = net.SplitHostPort(addr)
		conn = tls.Client(conn, tlsCfg)
	}
	defer conn.Close()
	hello := append(append([]byte(nil), transport.Magic...), byte(len(token)>>8), byte(len(token)))
	if _, err := conn.Write(append(append(hello, token...), after...)); err != nil {
		t.Fatalf("framed raft connection to %s: %v", addr, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	if _, err := io.Copy(io.Discard, conn); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("framed raft connection to %s (token %q, %d bytes after the hello): not closed by the node", addr, token, len(after))
	}
}

// checkJoinRefused starts a fourth node with the certificates in otherDir
// (another CA) joining through node 0, waits until it has failed to join,
// and checks that the cluster still has three nodes.
func checkJoinRefused(t *testing.T, c *testcluster.Cluster, otherDir string) {
	t.Helper()
	j := c.AddJoiner([]int{0}, "--tls-cert", filepath.Join(otherDir, certs.NodeFile), "--tls-key", filepath.Join(otherDir, certs.NodeKey),
		"--tls-ca", filepath.Join(otherDir, certs.CAFile))
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if log := c.Log(j); !strings.Contains(log, "no member answered the join yet") {
			return fmt.Errorf("the joiner has not tried to join yet")
		}
		return nil
	})
	if log := c.Log(j); !strings.Contains(log, "certificate") {
		t.Errorf("the joiner's failed join does not mention the certificate:\n%s", log)
	}
	rt, err := c.RoutingTable(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rt.GetNodes()); n != 3 {
		t.Fatalf("a node with another CA's certificate joined: the cluster has %d nodes", n)
	}
	c.Stop(j)
}

// checkTLSSidePorts checks that the HTTP port serves HTTPS with the node's
// certificate (and not plain HTTP), and that RESP works over TLS on the main
// port and on --redis-addr.
func checkTLSSidePorts(t *testing.T, c *testcluster.Cluster, ca string) {
	t.Helper()
	cfg, err := certs.ClientConfig(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.HTTPClient().Get(c.HTTPURL(0, "/healthz"))
	if err != nil {
		t.Fatalf("HTTPS /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTPS /healthz: %s", resp.Status)
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + c.HTTPAddr(0) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the HTTP port of a TLS node answered plain HTTP")
		}
	}
	for _, addr := range []string{c.Addr(1), c.RedisAddr(1)} {
		if got := respOverTLS(t, addr, cfg, "*2\r\n$3\r\nGET\r\n$6\r\ntls-03\r\n"); got != "$5\r\nval-3\r\n" {
			t.Fatalf("RESP GET over TLS on %s: %q", addr, got)
		}
	}
}

// respOverTLS sends one RESP command over TLS and returns the reply's bytes.
func respOverTLS(t *testing.T, addr string, cfg *tls.Config, cmd string) string {
	t.Helper()
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1"
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, cmd); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("RESP reply from %s: %v", addr, err)
	}
	return string(buf[:n])
}

// sendGarbage writes junk to addr and waits for the node to close the
// connection.
func sendGarbage(t *testing.T, addr string, junk []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write(junk)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil && !isReset(err) {
		t.Fatalf("garbage to %s: the node did not close the connection: %v", addr, err)
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAuthToken runs a 3-node cluster without TLS but with an auth token:
// calls without it or with a wrong one fail with Unauthenticated, the right
// one works, through the CLI and the Go client, and the cluster replicates
// (raft and forwarding carry the token between nodes).
func TestAuthToken(t *testing.T) {
	const token = "e2e-secret-token"
	c := startCluster(t, testcluster.Options{AuthToken: token})
	ctx := context.Background()

	conn, err := dial.Dial(c.Addr(0)) // plaintext, no token
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	get := func(md ...string) error {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, md...), 5*time.Second)
		defer cancel()
		_, err := concordpb.NewKVClient(conn).Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
		return err
	}
	if err := get(); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "auth token") {
		t.Fatalf("get without a token: %v, want Unauthenticated naming the auth token", err)
	}
	if err := get("authorization", "Bearer wrong"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("get with a wrong token: %v, want Unauthenticated", err)
	}
	if err := get("authorization", "Bearer "+token); err != nil {
		t.Fatalf("get with the token: %v", err)
	}
	raftRefused(t, c.Addr(1), dial.Security{})
	framedRaftClosed(t, c.Addr(1), nil, "wrong", nil)

	// The Go client: without a token it is refused at once (no retries
	// until the deadline), with it it writes through node 0 alone, which
	// forwards to the shards' leaders.
	start := time.Now()
	if _, err := client.NewWithOptions(ctx, client.Options{Endpoints: c.Endpoints()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("client without a token: %v, want Unauthenticated", err)
	} else if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing a client without a token took %v: Unauthenticated must not be retried", d)
	}
	cl, err := client.NewWithOptions(ctx, client.Options{Endpoints: []string{c.Addr(0)}, AuthToken: token, ThroughEndpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[string]string{}
	for i := range 20 {
		k, v := fmt.Sprintf("auth-%02d", i), fmt.Sprintf("val-%d", i)
		if _, _, err := cl.Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatalf("put %s with the token: %v", k, err)
		}
		want[k] = v
	}
	for i := range c.N() {
		waitStaleHasAll(t, c, i, want, 30*time.Second)
	}

	// The CLI, with and without --auth-token-file.
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cliAt(t, c.Addr(2), "get", "auth-04", "--auth-token-file", tokFile); err != nil || strings.TrimSpace(out) != "val-4" {
		t.Fatalf("CLI get with the token: %q, %v", out, err)
	}
	if out, err := cliAt(t, c.Addr(2), "get", "auth-04"); err == nil || !strings.Contains(err.Error(), "auth token") {
		t.Fatalf("CLI get without the token: %q, %v; want a refusal naming the auth token", out, err)
	}
	backupNeedsToken(t, c, conn, token, tokFile, want)
}

// backupNeedsToken: the Backup stream, which dumps a shard, is refused
// without the token; with it, every shard read through node 0 alone (which
// relays the shards it does not lead to their leaders, with the token)
// holds the keys written, and `concord backup` with --auth-token-file
// writes them all to a file only its owner may read.
func backupNeedsToken(t *testing.T, c *testcluster.Cluster, conn *grpc.ClientConn, token, tokFile string, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(ctx context.Context, shard uint64) (map[string]string, error) {
		s, err := concordpb.NewBackupClient(conn).Shard(ctx, &concordpb.BackupShardRequest{ShardId: shard})
		if err != nil {
			return nil, err
		}
		got := map[string]string{}
		for {
			ch, err := s.Recv()
			if err != nil {
				return got, err
			}
			for _, r := range ch.GetRecords() {
				got[string(r.GetKey())] = string(r.GetValue())
			}
			if ch.GetDone() {
				return got, nil
			}
		}
	}
	if got, err := read(ctx, 1); status.Code(err) != codes.Unauthenticated || len(got) != 0 {
		t.Fatalf("backup stream without the token: %d keys, %v; want Unauthenticated and none", len(got), err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	all := map[string]string{}
	for shard := uint64(1); ; shard++ {
		got, err := read(authed, shard)
		if status.Code(err) == codes.NotFound {
			break
		}
		if err != nil {
			t.Fatalf("backup stream of shard %d through node 0 with the token: %v", shard, err)
		}
		maps.Copy(all, got)
	}
	file := filepath.Join(t.TempDir(), "auth.bak")
	if out, err := cliAt(t, c.Addr(2), "backup", file); err == nil {
		t.Fatalf("CLI backup without the token: %q", out)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("a refused backup left %s: %v", file, err)
	}
	if out, err := cliAt(t, c.Addr(2), "backup", file, "--auth-token-file", tokFile); err != nil {
		t.Fatalf("CLI backup with the token: %q, %v", out, err)
	}
	fromFile := readBackup(t, file)
	for k, v := range want {
		if all[k] != v || string(fromFile[k].Value) != v {
			t.Fatalf("key %s: %q in the streams, %q in the file; want %q", k, all[k], fromFile[k].Value, v)
		}
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v; want mode 0600", st, err)
	}
}

// forwardedCalls reads node i's concord_forwarded_calls_total over its
// HTTP(S) port: the calls it forwarded over the framed wire and over gRPC.
func forwardedCalls(t *testing.T, c *testcluster.Cluster, i int) (framed, grpc int) {
	t.Helper()
	framed = int(max(0, metric(t, c, i, `concord_forwarded_calls_total{wire="tcp"}`)))
	grpc = int(max(0, metric(t, c, i, `concord_forwarded_calls_total{wire="grpc"}`)))
	return framed, grpc
}
