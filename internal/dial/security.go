package dial

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/concord-kv/concord/internal/certs"
)

// Security is how a connection proves itself and checks the node it
// reaches: TLS when CAFile is set (presenting CertFile/KeyFile when given,
// as nodes do to their peers), and a bearer token on every call when Token
// is set. The zero value is plaintext without a token.
type Security struct {
	CAFile, CertFile, KeyFile string
	Token                     string
}

// TokenKey is the metadata key that carries the token, as "Bearer TOKEN".
const TokenKey = "authorization"

// Options returns the dial options of s, to pass to Dial.
func (s Security) Options() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if s.CAFile != "" {
		cfg, err := certs.ClientConfig(s.CAFile, s.CertFile, s.KeyFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else if s.CertFile != "" || s.KeyFile != "" {
		return nil, errIgnoredCert
	}
	if s.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(s.Token)))
	}
	return opts, nil
}

// errIgnoredCert refuses a client certificate without a CA: it would be
// silently unused on a plaintext connection.
var errIgnoredCert = errors.New("--tls-cert and --tls-key need --tls-ca (TLS is off without it)")

// bearer sends a token with every call. It goes over plaintext too (a
// cluster without TLS but with a token): the operator chose that network.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{TokenKey: "Bearer " + string(b)}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }
