// Package certs makes and loads the certificates of a Concord cluster: a
// development CA with one node certificate (server and client use, shared by
// every node) and one client certificate (`concord certs`), and the
// tls.Configs built from such files for servers, peers and clients.
//
// Everything is ECDSA P-256, made with crypto/x509 alone: no openssl step.
// A node presents its certificate to clients and, as a client, to its peers;
// it accepts a client certificate only if the CA signed it, which is what
// makes peer traffic mutually authenticated.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The files Generate writes, in its directory.
const (
	CAFile     = "ca.crt"
	CAKeyFile  = "ca.key"
	NodeFile   = "node.crt"
	NodeKey    = "node.key"
	ClientFile = "client.crt"
	ClientKey  = "client.key"
)

// Files are every file Generate writes.
var Files = []string{CAFile, CAKeyFile, NodeFile, NodeKey, ClientFile, ClientKey}

// DefaultHosts are the names and addresses the node certificate is valid for
// when Options.Hosts is empty: this machine, over loopback.
var DefaultHosts = []string{"127.0.0.1", "::1", "localhost"}

// DefaultDays is how long certificates are valid when Options.Days is 0.
const DefaultDays = 365

// Options says what Generate makes.
type Options struct {
	// Hosts are the node certificate's subject alternative names: each an
	// IP address or a DNS name. Clients check the address they dial
	// against them. Empty: DefaultHosts.
	Hosts []string
	// Days is how long the certificates are valid; 0: DefaultDays.
	Days int
	// Force overwrites existing files; without it Generate refuses to
	// write into a directory that holds any of Files.
	Force bool
}

// Generate writes a new CA, a node certificate and a client certificate
// into dir (created if missing) and returns the paths it wrote. Keys are
// written 0600. Unless o.Force is set it writes nothing if any of the files
// exists already: replacing a CA would lock every node and client out.
func Generate(dir string, o Options) ([]string, error) {
	hosts := o.Hosts
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	days := o.Days
	if days == 0 {
		days = DefaultDays
	}
	if days < 0 {
		return nil, fmt.Errorf("certs: --days must be positive, got %d", days)
	}
	ips, names, err := splitHosts(hosts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	if !o.Force {
		for _, f := range Files {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				return nil, fmt.Errorf("certs: %s exists already; use --force to replace every file in %s", filepath.Join(dir, f), dir)
			}
		}
	}
	now := time.Now()
	notAfter := now.Add(time.Duration(days) * 24 * time.Hour)
	ca, err := newCA(now, notAfter)
	if err != nil {
		return nil, err
	}
	node, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"Concord"}, CommonName: "concord-node"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: ips, DNSNames: names,
	}, now, notAfter)
	if err != nil {
		return nil, err
	}
	client, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"Concord"}, CommonName: "concord-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now, notAfter)
	if err != nil {
		return nil, err
	}
	var written []string
	for _, p := range []struct {
		name string
		kp   *keyPair
	}{{CAFile, ca}, {NodeFile, node}, {ClientFile, client}} {
		certPath := filepath.Join(dir, p.name)
		keyPath := strings.TrimSuffix(certPath, ".crt") + ".key"
		if err := p.kp.write(certPath, keyPath); err != nil {
			return written, err
		}
		written = append(written, certPath, keyPath)
	}
	return written, nil
}

// splitHosts sorts hosts into IP addresses and DNS names.
func splitHosts(hosts []string) ([]net.IP, []string, error) {
	var ips []net.IP
	var names []string
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			continue
		case net.ParseIP(h) != nil:
			ips = append(ips, net.ParseIP(h))
		case strings.ContainsAny(h, ":/ "):
			return nil, nil, fmt.Errorf("certs: host %q is neither an IP address nor a DNS name (give hosts without ports)", h)
		default:
			names = append(names, h)
		}
	}
	if len(ips)+len(names) == 0 {
		return nil, nil, errors.New("certs: --hosts names no host")
	}
	return ips, names, nil
}

// keyPair is a certificate with its private key.
type keyPair struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

func newCA(notBefore, notAfter time.Time) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"Concord"}, CommonName: "Concord development CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return create(tmpl, nil, notBefore, notAfter)
}

// sign issues a leaf certificate from tmpl, signed by ca.
func (ca *keyPair) sign(tmpl *x509.Certificate, notBefore, notAfter time.Time) (*keyPair, error) {
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	return create(tmpl, ca, notBefore, notAfter)
}

// create makes a key and a certificate from tmpl, signed by parent (nil:
// self-signed). Validity starts an hour early to absorb clock skew between
// machines.
func create(tmpl *x509.Certificate, parent *keyPair, notBefore, notAfter time.Time) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = notBefore.Add(-time.Hour), notAfter
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("certs: create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, der: der, key: key}, nil
}

// write stores the certificate (0644) and the key (0600) as PEM.
func (kp *keyPair) write(certPath, keyPath string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := writePEM(certPath, "CERTIFICATE", kp.der, 0o644); err != nil {
		return err
	}
	return writePEM(keyPath, "PRIVATE KEY", keyDER, 0o600)
}

// writePEM replaces path with one PEM block. The file is created with perm
// and chmodded too, since an existing file (with --force) keeps its mode.
func writePEM(path, typ string, der []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("certs: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	return nil
}
