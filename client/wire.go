package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/frame"
)

// The framed TCP wire (Options.Wire = WireTCP): the requests to a node go
// over one TCP connection to its port (TLS when Options.TLSCAFile is set)
// as length-prefixed StreamRequest frames, and replies come back as
// StreamResponse frames, after a hello carrying the auth token
// (internal/grpcapi/conn.go). The calls, their ids, the batching and the
// failure of a broken connection are those of the gRPC stream; the wire
// only saves the node HTTP/2's and gRPC's cost per message. Unary calls
// (the routing table, admin) stay on gRPC.

// Wire names for Options.Wire.
const (
	WireGRPC = "grpc"
	WireTCP  = "tcp"
)

// Timeouts of the framed wire.
const (
	wireDialTimeout = 5 * time.Second
	// wireWriteTimeout bounds one write: a node that takes no bytes for
	// this long costs the connection (its calls fail as a broken stream's).
	wireWriteTimeout = 10 * time.Second
)

// keepWireBuf is the largest send buffer a connection keeps between writes.
const keepWireBuf = 1 << 20

// wireDialer opens framed connections to nodes.
type wireDialer struct {
	tls   *tls.Config // nil: plaintext
	token string
}

// newWireDialer returns the dialer of opts' wire: nil for gRPC.
func newWireDialer(opts Options) (*wireDialer, error) {
	switch opts.Wire {
	case "", WireGRPC:
		return nil, nil
	case WireTCP:
	default:
		return nil, fmt.Errorf("unknown wire %q (want %q or %q)", opts.Wire, WireGRPC, WireTCP)
	}
	if opts.Unary {
		return nil, errors.New("the framed wire carries the request stream: it does not go with Unary")
	}
	d := &wireDialer{token: opts.AuthToken}
	if opts.TLSCAFile != "" {
		cfg, err := certs.ClientConfig(opts.TLSCAFile, opts.TLSCertFile, opts.TLSKeyFile)
		if err != nil {
			return nil, err
		}
		d.tls = cfg
	}
	return d, nil
}

// opener returns what opens addr's streams over the framed wire.
func (d wireDialer) opener(addr string) func(ctx context.Context) (callStream, error) {
	return func(ctx context.Context) (callStream, error) {
		s, err := d.open(ctx, addr)
		if err != nil {
			// Marked unsent: no call was written to this connection.
			return nil, status.Errorf(codes.Unavailable, "concord: Error while dialing %s over the framed wire: %v", addr, err)
		}
		return s, nil
	}
}

func (d wireDialer) open(ctx context.Context, addr string) (callStream, error) {
	dctx, cancel := context.WithTimeout(ctx, wireDialTimeout)
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if d.tls != nil {
		cfg := d.tls.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		c = tc
	}
	hello, err := frame.AppendHello(nil, frame.KVMagic, d.token)
	if err == nil {
		_ = c.SetWriteDeadline(time.Now().Add(wireWriteTimeout))
		_, err = c.Write(hello)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s := &framedStream{c: c, fr: frame.NewReader(c, dial.MaxMsgBytes), done: make(chan struct{})}
	// The connection lives as long as the mux (ctx) and no longer than
	// its first failure.
	go func() {
		select {
		case <-ctx.Done():
		case <-s.done:
		}
		_ = c.Close()
	}()
	return s, nil
}

// framedStream is one framed connection as a callStream.
type framedStream struct {
	c        net.Conn
	fr       *frame.Reader
	buf      []byte
	done     chan struct{}
	doneOnce sync.Once
}

func (s *framedStream) end() { s.doneOnce.Do(func() { close(s.done) }) }

// Send writes req as one frame. A failed write ends the connection: Recv
// then fails, and the receiver fails the calls sent on it.
func (s *framedStream) Send(req *concordpb.StreamRequest) error {
	buf, err := frame.Append(s.buf[:0], req)
	if err == nil {
		_ = s.c.SetWriteDeadline(time.Now().Add(wireWriteTimeout))
		_, err = s.c.Write(buf)
	}
	if cap(buf) <= keepWireBuf {
		s.buf = buf
	} else {
		s.buf = nil
	}
	if err != nil {
		s.end()
	}
	return err
}

func (s *framedStream) Recv() (*concordpb.StreamResponse, error) {
	resp := &concordpb.StreamResponse{}
	if err := s.fr.Next(resp); err != nil {
		s.end()
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("framed connection: %v", err))
	}
	return resp, nil
}

// refusal returns the error of a node's answer to a refused hello: one
// reply, id 0 (no call has it), with a code.
func refusal(resp *concordpb.StreamResponse) error {
	rs := resp.GetReplies()
	if len(rs) != 1 || rs[0].GetId() != 0 || rs[0].GetCode() == 0 {
		return nil
	}
	return status.Error(codes.Code(rs[0].GetCode()), rs[0].GetMessage())
}
