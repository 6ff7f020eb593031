package grpcapi

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/certs"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/frame"
)

// Auth says who may call a node's gRPC services.
//
//   - The calls only nodes make (the raft transport; Cluster's Probe,
//     Join and Heartbeat), when the port is TLS, only from a peer that
//     presented a node certificate signed by the cluster's CA (mutual
//     TLS; certs.VerifiedNode): neither a token nor a client certificate
//     makes a caller a node.
//   - Everything else (KV, Cluster, Admin; the peer calls without TLS),
//     when Token is set, from a caller with a CA-signed certificate or
//     with metadata "authorization: Bearer <Token>" (the scheme in any
//     case, frame.BearerToken). Nodes dial their
//     peers with both, so forwarding works either way.
//
// The zero Auth lets every call through.
type Auth struct {
	Token string
	TLS   bool
}

// peerOnly reports whether method is one only nodes call.
func peerOnly(method string) bool {
	switch method {
	case concordpb.Cluster_Probe_FullMethodName, concordpb.Cluster_Join_FullMethodName, concordpb.Cluster_Heartbeat_FullMethodName:
		return true
	}
	return strings.HasPrefix(method, "/"+concordpb.RaftTransport_ServiceDesc.ServiceName+"/")
}

// Unary is the interceptor that applies a to unary calls.
func (a Auth) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// Tap applies a when a call's headers arrive, before gRPC reads or
// decodes its message: without it an unauthenticated caller could make
// the node read and decode up to the message limit on each of any number
// of streams, only to be refused by the interceptors. It runs under the
// connection's lock, and check neither blocks nor allocates much. The
// interceptors stay, for servers built without it.
func (a Auth) Tap() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		return ctx, a.check(ctx, info.FullMethodName)
	}
}

// Stream is the interceptor that applies a to streams.
func (a Auth) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := a.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

func (a Auth) check(ctx context.Context, method string) error {
	st, hasTLS := peerTLS(ctx)
	if a.TLS && peerOnly(method) {
		if !hasTLS || !certs.VerifiedNode(st) {
			return status.Errorf(codes.Unauthenticated, "%s is for cluster nodes: it needs a node certificate (server and client use) signed by the cluster's CA "+
				"(mutual TLS; start the node with --tls-cert and --tls-key issued by the CA in --tls-ca; a client certificate is not a node's)", method)
		}
		return nil
	}
	if a.Token == "" || (hasTLS && certs.Verified(st)) {
		return nil
	}
	vals := metadata.ValueFromIncomingContext(ctx, dial.TokenKey)
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "this cluster requires an auth token: give it with --auth-token-file "+
			"(metadata \"authorization: Bearer TOKEN\")")
	}
	got, ok := frame.BearerToken(vals[0])
	if !ok || !frame.TokenEqual([]byte(got), []byte(a.Token)) {
		return status.Error(codes.Unauthenticated, "auth token rejected: it is not the node's --auth-token-file token")
	}
	return nil
}

// CheckPeerConn applies the rule for the calls only nodes make to a framed
// raft connection (internal/transport's TCP wire), given the token of its
// hello: with TLS the peer must have presented a CA-signed node certificate;
// without, it must give the token when one is set.
func (a Auth) CheckPeerConn(c net.Conn, token string) error {
	if a.TLS {
		if tc := findTLS(c); tc == nil || !certs.VerifiedNode(tc.ConnectionState()) {
			return errors.New("raft connections are for cluster nodes: they need a node certificate (server and client use) signed by the cluster's CA (mutual TLS)")
		}
		return nil
	}
	if a.Token != "" && !frame.TokenEqual([]byte(token), []byte(a.Token)) {
		return errors.New("raft connection: auth token missing or rejected")
	}
	return nil
}

// peerTLS returns the TLS state of the caller's connection, if it is TLS.
func peerTLS(ctx context.Context) (tls.ConnectionState, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tls.ConnectionState{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return info.State, ok
}

// AlreadyTLS returns the server transport credentials of a port whose
// connections are TLS below gRPC: a tls.Listener under the port mux, which
// must read decrypted bytes to tell gRPC from RESP. The handshake is done
// by then; these credentials only hand its state to gRPC, so that Auth sees
// the peer's certificate.
func AlreadyTLS() credentials.TransportCredentials { return alreadyTLS{} }

type alreadyTLS struct{}

func (alreadyTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc := findTLS(c)
	if tc == nil {
		return nil, nil, errors.New("grpcapi: a connection without TLS on a TLS port")
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (alreadyTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("grpcapi: AlreadyTLS is for servers")
}

func (alreadyTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (a alreadyTLS) Clone() credentials.TransportCredentials { return a }
func (alreadyTLS) OverrideServerName(string) error           { return nil }

// findTLS unwraps c (the port mux wraps connections it peeked at) down to
// its *tls.Conn, or nil.
func findTLS(c net.Conn) *tls.Conn {
	for {
		switch v := c.(type) {
		case *tls.Conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// CheckClientConn applies the rule for KV calls to a framed client
// connection (conn.go), given the token of its hello: when Token is set,
// the client must have presented a CA-signed certificate (TLS) or give the
// token.
func (a Auth) CheckClientConn(c net.Conn, token string) error {
	if a.Token == "" {
		return nil
	}
	if a.TLS {
		if tc := findTLS(c); tc != nil && certs.Verified(tc.ConnectionState()) {
			return nil
		}
	}
	if !frame.TokenEqual([]byte(token), []byte(a.Token)) {
		return status.Error(codes.Unauthenticated, "auth token missing or rejected: this cluster requires its --auth-token-file token")
	}
	return nil
}
