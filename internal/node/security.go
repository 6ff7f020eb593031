package node

import (
	"crypto/tls"
	"net"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/grpcapi"
)

// TLS and authentication (Config.TLS*, Config.AuthToken): what the node's
// ports require and how it proves itself to its peers.

// security is the node's TLS and token settings, loaded once by New so that
// a bad certificate fails the start, not the first connection.
type security struct {
	// server is the TLS config of every port; nil: plaintext.
	server *tls.Config
	// peerDial are the dial options of calls to peers (forwarding, joins,
	// raft): TLS presenting the node's certificate, and the token.
	peerDial []grpc.DialOption
	// peerTLS is the client TLS config of framed raft connections to
	// peers (the node's certificate, the CA); nil: plaintext.
	peerTLS *tls.Config
	auth    grpcapi.Auth
}

func loadSecurity(cfg Config) (security, error) {
	s := security{auth: grpcapi.Auth{Token: cfg.AuthToken, TLS: cfg.TLSCertFile != ""}}
	peer := dial.Security{Token: cfg.AuthToken}
	if cfg.TLSCertFile != "" {
		var err error
		if s.server, err = certs.ServerConfig(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile); err != nil {
			return security{}, err
		}
		peer.CAFile, peer.CertFile, peer.KeyFile = cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile
		if s.peerTLS, err = certs.ClientConfig(cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return security{}, err
		}
	}
	var err error
	if s.peerDial, err = peer.Options(); err != nil {
		return security{}, err
	}
	return s, nil
}

// listen wraps l in TLS when the node has a certificate. The handshake
// happens on a connection's first read: on the main port that is the port
// mux's, under its timeout, so a client that never finishes it (or sends
// garbage) costs one goroutine until then and is closed.
func (s security) listen(l net.Listener) net.Listener {
	if s.server == nil {
		return l
	}
	return tls.NewListener(l, s.server)
}

// grpcOptions are the gRPC server's credentials (the auth interceptors
// are chained with the node's own, in newServer).
func (s security) grpcOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if s.server != nil {
		opts = append(opts, grpc.Creds(grpcapi.AlreadyTLS()))
	}
	return opts
}

// httpTLS is the HTTP port's TLS config: the node's, with the ALPN
// protocols left to net/http (h2 and http/1.1), or nil.
func (s security) httpTLS() *tls.Config {
	if s.server == nil {
		return nil
	}
	c := s.server.Clone()
	c.NextProtos = nil
	return c
}
