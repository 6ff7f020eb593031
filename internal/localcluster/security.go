package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
)

// TLS and auth of a local cluster (Config.TLS, Config.AuthToken): the
// certificates live in Dir/tls, made by the first start and reused by the
// next ones, so a restarted `cluster up` keeps trusting its own nodes.

// CertDir is where a TLS cluster's certificates are (see concord certs).
func (c *Cluster) CertDir() string { return filepath.Join(c.cfg.Dir, "tls") }

// CAFile is the CA certificate clients of a TLS cluster need, "" without TLS.
func (c *Cluster) CAFile() string {
	if !c.cfg.TLS {
		return ""
	}
	return filepath.Join(c.CertDir(), certs.CAFile)
}

// tokenFile is where the cluster's auth token is written for the nodes.
func (c *Cluster) tokenFile() string { return filepath.Join(c.cfg.Dir, "auth-token") }

// Security is how the launcher, and a client of the cluster, reach its
// nodes: TLS presenting the node certificate (as a peer would) and the token.
func (c *Cluster) Security() dial.Security {
	s := dial.Security{Token: c.cfg.AuthToken}
	if c.cfg.TLS {
		d := c.CertDir()
		s.CAFile, s.CertFile, s.KeyFile = filepath.Join(d, certs.CAFile), filepath.Join(d, certs.NodeFile), filepath.Join(d, certs.NodeKey)
	}
	return s
}

// prepareSecurity makes the certificates (unless Dir/tls has them) and the
// token file that the nodes' flags name.
func (c *Cluster) prepareSecurity() error {
	if c.cfg.AuthToken != "" {
		if err := os.MkdirAll(c.cfg.Dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(c.tokenFile(), []byte(c.cfg.AuthToken+"\n"), 0o600); err != nil {
			return fmt.Errorf("localcluster: write the auth token: %w", err)
		}
	}
	if !c.cfg.TLS {
		return nil
	}
	if _, err := os.Stat(c.CAFile()); err == nil {
		return nil // made by an earlier start
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	hosts := slices.Clone(certs.DefaultHosts)
	for _, a := range c.Addrs() {
		if h, _, err := net.SplitHostPort(a); err == nil && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if _, err := certs.Generate(c.CertDir(), certs.Options{Hosts: hosts}); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	return nil
}

// securityArgs are the nodes' TLS and token flags.
func (c *Cluster) securityArgs() []string {
	var args []string
	if c.cfg.TLS {
		s := c.Security()
		args = append(args, "--tls-cert", s.CertFile, "--tls-key", s.KeyFile, "--tls-ca", s.CAFile)
	}
	if c.cfg.AuthToken != "" {
		args = append(args, "--auth-token-file", c.tokenFile())
	}
	return args
}
