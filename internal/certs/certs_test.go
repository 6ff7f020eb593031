package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/certs"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

func TestGenerateChainAndSANs(t *testing.T) {
	dir := t.TempDir()
	written, err := certs.Generate(dir, certs.Options{Hosts: []string{"127.0.0.1", "localhost", "node-a.example"}, Days: 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(certs.Files) {
		t.Fatalf("wrote %v, want %d files", written, len(certs.Files))
	}
	for _, f := range []string{certs.CAKeyFile, certs.NodeKey, certs.ClientKey} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	ca := readCert(t, filepath.Join(dir, certs.CAFile))
	if !ca.IsCA {
		t.Fatal("ca.crt is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	node := readCert(t, filepath.Join(dir, certs.NodeFile))
	for _, host := range []string{"127.0.0.1", "localhost", "node-a.example"} {
		if _, err := node.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("node cert for %s as a server: %v", host, err)
		}
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.9.9.9"}); err == nil {
		t.Error("node cert verified for a host not in --hosts")
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node cert as a client (peer traffic): %v", err)
	}
	client := readCert(t, filepath.Join(dir, certs.ClientFile))
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client cert: %v", err)
	}
	if d := node.NotAfter.Sub(time.Now()); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Errorf("node cert valid for %v more, want about 30 days", d)
	}
	other := t.TempDir()
	if _, err := certs.Generate(other, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := readCert(t, filepath.Join(other, certs.NodeFile)).Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err == nil {
		t.Error("a certificate of another CA verified against this one")
	}
}

func TestGenerateRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, certs.CAFile))
	if _, err := certs.Generate(dir, certs.Options{}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second Generate: err %v, want a refusal naming --force", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, certs.CAFile)); string(after) != string(before) {
		t.Fatal("a refused Generate changed ca.crt")
	}
	if _, err := certs.Generate(dir, certs.Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, certs.CAFile)); string(after) == string(before) {
		t.Fatal("--force did not replace ca.crt")
	}
}

func TestGenerateBadInput(t *testing.T) {
	for _, o := range []certs.Options{{Hosts: []string{"127.0.0.1:7001"}}, {Hosts: []string{" "}}, {Days: -1}} {
		dir := t.TempDir()
		if _, err := certs.Generate(dir, o); err == nil {
			t.Errorf("Generate(%+v) succeeded", o)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("Generate(%+v) failed but wrote %d files", o, len(ents))
		}
	}
}

// handshake runs one TLS handshake over 127.0.0.1 and returns the client's
// error and whether the server saw a verified client certificate.
func handshake(t *testing.T, srv, cli *tls.Config) (error, bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	verified := make(chan bool, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			verified <- false
			return
		}
		tc := tls.Server(c, srv)
		defer tc.Close()
		if tc.Handshake() != nil {
			verified <- false
			return
		}
		verified <- certs.Verified(tc.ConnectionState())
		_, _ = tc.Write([]byte("x")) // the client's Read sees the end of a TLS 1.3 handshake
	}()
	c, err := tls.Dial("tcp", l.Addr().String(), cli)
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	return err, <-verified
}

func TestConfigsHandshake(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if _, err := certs.Generate(d, certs.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	p := func(d, f string) string { return filepath.Join(d, f) }
	srv, err := certs.ServerConfig(p(dir, certs.NodeFile), p(dir, certs.NodeKey), p(dir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := certs.ClientConfig(p(dir, certs.CAFile), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err, ok := handshake(t, srv, noCert); err != nil || ok {
		t.Fatalf("client without certificate: err %v, verified %v; want accepted, unverified", err, ok)
	}
	peer, err := certs.ClientConfig(p(dir, certs.CAFile), p(dir, certs.NodeFile), p(dir, certs.NodeKey))
	if err != nil {
		t.Fatal(err)
	}
	if err, ok := handshake(t, srv, peer); err != nil || !ok {
		t.Fatalf("peer with the CA's certificate: err %v, verified %v; want verified", err, ok)
	}
	stranger, err := certs.ClientConfig(p(dir, certs.CAFile), p(other, certs.ClientFile), p(other, certs.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	if err, _ := handshake(t, srv, stranger); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	wrongCA, err := certs.ClientConfig(p(other, certs.CAFile), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err, _ := handshake(t, srv, wrongCA); err == nil {
		t.Fatal("a client trusting another CA accepted the node's certificate")
	}
	if _, err := certs.ServerConfig(p(dir, certs.NodeFile), p(dir, certs.NodeKey), ""); err == nil {
		t.Fatal("ServerConfig without a CA succeeded")
	}
	if _, err := certs.ClientConfig(p(dir, certs.NodeKey), "", ""); err == nil {
		t.Fatal("ClientConfig with a key as the CA succeeded")
	}
}
