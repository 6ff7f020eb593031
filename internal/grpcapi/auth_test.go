package grpcapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

func TestAuthCheck(t *testing.T) {
	const raft = "/concord.v1.RaftTransport/Send"
	get := concordpb.KV_Get_FullMethodName
	join := concordpb.Cluster_Join_FullMethodName
	plain := context.Background()
	withToken := func(ctx context.Context, tok string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
	}
	// tlsPeer is a TLS caller; verified: its certificate (with usage)
	// chains to the CA.
	tlsPeer := func(verified bool, usage ...x509.ExtKeyUsage) context.Context {
		st := tls.ConnectionState{}
		if verified {
			leaf := &x509.Certificate{ExtKeyUsage: usage}
			st.PeerCertificates = []*x509.Certificate{leaf}
			st.VerifiedChains = [][]*x509.Certificate{{leaf}}
		}
		return peer.NewContext(plain, &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
	}
	node := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	clientOnly := x509.ExtKeyUsageClientAuth
	for _, tc := range []struct {
		name   string
		auth   Auth
		ctx    context.Context
		method string
		ok     bool
	}{
		{"open cluster", Auth{}, plain, raft, true},
		{"token missing", Auth{Token: "s"}, plain, get, false},
		{"token wrong", Auth{Token: "s"}, withToken(plain, "x"), get, false},
		{"token right", Auth{Token: "s"}, withToken(plain, "s"), get, true},
		{"scheme in lower case", Auth{Token: "s"}, metadata.NewIncomingContext(plain, metadata.Pairs("authorization", "bearer s")), get, true},
		{"scheme in upper case", Auth{Token: "s"}, metadata.NewIncomingContext(plain, metadata.Pairs("authorization", "BEARER s")), get, true},
		{"another scheme", Auth{Token: "s"}, metadata.NewIncomingContext(plain, metadata.Pairs("authorization", "Basic s")), get, false},
		{"raft without TLS needs the token", Auth{Token: "s"}, plain, raft, false},
		{"raft without TLS, token", Auth{Token: "s"}, withToken(plain, "s"), raft, true},
		{"CA-signed client, no token", Auth{Token: "s", TLS: true}, tlsPeer(true), get, true},
		{"TLS client without cert, no token", Auth{Token: "s", TLS: true}, tlsPeer(false), get, false},
		{"TLS client without cert, token", Auth{Token: "s", TLS: true}, withToken(tlsPeer(false), "s"), get, true},
		{"TLS client without cert, no token needed", Auth{TLS: true}, tlsPeer(false), get, true},
		{"raft over TLS without cert", Auth{TLS: true}, tlsPeer(false), raft, false},
		{"raft over TLS, token is not a cert", Auth{Token: "s", TLS: true}, withToken(tlsPeer(false), "s"), raft, false},
		{"join over TLS without cert", Auth{TLS: true}, tlsPeer(false), join, false},
		{"raft over mutual TLS", Auth{TLS: true}, tlsPeer(true, node...), raft, true},
		{"raft with a client certificate", Auth{TLS: true}, tlsPeer(true, clientOnly), raft, false},
		{"join with a client certificate", Auth{TLS: true}, tlsPeer(true, clientOnly), join, false},
		{"join with a client certificate and the token", Auth{Token: "s", TLS: true}, withToken(tlsPeer(true, clientOnly), "s"), join, false},
		{"client certificate, KV", Auth{Token: "s", TLS: true}, tlsPeer(true, clientOnly), get, true},
	} {
		err := tc.auth.check(tc.ctx, tc.method)
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: err %v, want Unauthenticated", tc.name, err)
		}
	}
}

// TestCheckPeerConn protects the framed raft wire's door, the rule of the
// gRPC raft service: with TLS only a CA-verified certificate (a plaintext
// connection, whatever its token, is refused); without TLS the token when
// one is set; with neither, everyone.
func TestCheckPeerConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	for _, tc := range []struct {
		auth  Auth
		token string
		ok    bool
	}{
		{Auth{}, "", true},
		{Auth{Token: "s"}, "s", true},
		{Auth{Token: "s"}, "x", false},
		{Auth{Token: "s"}, "", false},
		{Auth{TLS: true}, "", false},
		{Auth{TLS: true, Token: "s"}, "s", false},
	} {
		if err := tc.auth.CheckPeerConn(a, tc.token); (err == nil) != tc.ok {
			t.Errorf("%+v with token %q: %v, want ok=%v", tc.auth, tc.token, err, tc.ok)
		}
	}
}
