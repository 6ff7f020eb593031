package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ServerConfig is the TLS configuration of a node's ports: it presents the
// certificate in certFile/keyFile and verifies a client certificate, when
// the client presents one, against the CA in caFile. A client without a
// certificate is let through the handshake (clients authenticate with a
// token, or not at all); one with a certificate the CA did not sign is
// refused. Callers that need a verified certificate (the raft transport)
// check Verified. It offers ALPN "h2", which gRPC clients require.
func ServerConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("TLS needs all of --tls-cert, --tls-key and --tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	pool, err := loadCA(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	}, nil
}

// ClientConfig is the TLS configuration of a connection to a node: it
// trusts the CA in caFile and, when certFile and keyFile are given,
// presents that certificate (mutual TLS: what nodes do to their peers).
// The server name is left to the caller (gRPC takes the dialled host).
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, errors.New("--tls-ca is required for TLS: the CA that signed the nodes' certificates")
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	pool, err := loadCA(caFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Verified reports whether the peer of a server-side connection presented
// a certificate that the configured CA signed.
func Verified(st tls.ConnectionState) bool { return len(st.VerifiedChains) > 0 }

// VerifiedNode reports whether the peer of a server-side connection
// presented a certificate that the configured CA signed for a node: one
// whose extended key usage includes server authentication (or any usage),
// as a node's must, since it also serves. The CA signs client certificates
// too (client authentication only: Generate's client.crt); those are
// Verified but do not make their holder a node, who could otherwise send
// raft messages or join.
func VerifiedNode(st tls.ConnectionState) bool {
	if !Verified(st) || len(st.PeerCertificates) == 0 {
		return false
	}
	for _, u := range st.PeerCertificates[0].ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// loadCA reads a PEM file of one or more CA certificates into a pool.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", path)
	}
	return pool, nil
}
