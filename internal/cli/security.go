package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/dial"
)

// securityFlags are how a client verb reaches a cluster with TLS or an
// auth token (server --tls-* and --auth-token-file).
type securityFlags struct {
	tlsCA, tlsCert, tlsKey, tokenFile string
}

func addSecurityFlags(fs *pflag.FlagSet, s *securityFlags) {
	fs.StringVar(&s.tlsCA, "tls-ca", "", "PEM CA certificate that signed the nodes' certificates: connect over TLS (default: plaintext)")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "PEM client certificate to present (with --tls-key; needs --tls-ca), signed by the cluster's CA")
	fs.StringVar(&s.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&s.tokenFile, "auth-token-file", "", "file holding the cluster's auth token (server --auth-token-file)")
}

// security reads the token file and returns the settings.
func (s securityFlags) security() (dial.Security, error) {
	sec := dial.Security{CAFile: s.tlsCA, CertFile: s.tlsCert, KeyFile: s.tlsKey}
	if s.tokenFile != "" {
		tok, err := readToken(s.tokenFile)
		if err != nil {
			return dial.Security{}, err
		}
		sec.Token = tok
	}
	return sec, nil
}

// clientOptions are the Go client's options for the flags (Endpoints unset).
func (s securityFlags) clientOptions() (client.Options, error) {
	sec, err := s.security()
	if err != nil {
		return client.Options{}, err
	}
	return client.Options{TLSCAFile: sec.CAFile, TLSCertFile: sec.CertFile, TLSKeyFile: sec.KeyFile, AuthToken: sec.Token}, nil
}

// dialOptions are the gRPC dial options for the flags.
func (s securityFlags) dialOptions() ([]grpc.DialOption, error) {
	sec, err := s.security()
	if err != nil {
		return nil, err
	}
	return sec.Options()
}

// hint adds what to do to an error that a TLS mismatch between the client
// and the nodes causes, whose own words (from gRPC) do not say so.
func (s securityFlags) hint(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "looked like an HTTP/1.1 header"):
		// An HTTP/1 server answered (the node's --http-addr, most
		// likely): no TLS setting would help, as the hint below said.
		return fmt.Errorf("%w (that address serves HTTP/1.1, not the node's gRPC port: is it a node's --http-addr? give its --addr)", err)
	case s.tlsCA == "" && strings.Contains(msg, "error reading server preface"):
		return fmt.Errorf("%w (do the nodes use TLS? then give --tls-ca)", err)
	case s.tlsCA != "" && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("%w (the nodes do not use TLS: leave out --tls-ca)", err)
	}
	return err
}
