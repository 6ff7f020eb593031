package client

import (
	"crypto/tls"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/internal/dial"
)

// Node-to-node forwarding (internal/grpcapi/forward.go) uses the client's
// request stream: a node that does not lead a shard sends the leader its
// forwarded calls as the client sends its own, many calls to a message
// over the framed TCP wire, with the same fallback (KV.Stream over gRPC for
// a node that does not speak the wire, unary calls for one without
// Stream), the same keepalive and the same failures (a call on a
// connection that breaks after it was sent fails Unavailable, which for a
// write means its outcome is unknown). A forward over unary gRPC cost the
// servers HTTP/2 framing and gRPC's hand-offs per merged batch
// (docs/benchmarks.md, "Forwarding over the framed wire").

// PeerWire is how a node reaches another over the framed wire.
type PeerWire struct {
	// TLS is the client TLS config of the node's peer connections (its
	// certificate, the cluster's CA); nil: plaintext.
	TLS *tls.Config
	// Token is the cluster's auth token ("": none), given in the hello.
	Token string
	// FromNode returns the forwarding node's id, stamped on every message
	// so that a node partitioned from it (fault injection) refuses its
	// calls; nil or 0: not stamped.
	FromNode func() uint64
	// Cluster returns the forwarding node's cluster id, stamped on every
	// message so that a node of another cluster (reached at an address
	// this node's cluster once gave a member that is gone) refuses the
	// calls instead of running them; nil or 0: not stamped.
	Cluster func() uint64
	// Sent, when set, is told of every message of calls sent: how many
	// calls, and whether over the framed wire (else over gRPC's stream).
	Sent func(framed bool, calls int)
}

// PeerKV is a concordpb.KVClient to one node whose calls travel on the
// node's request stream (the framed wire, else gRPC), for nodes forwarding
// to each other. Close ends its connection.
type PeerKV struct{ streamKV }

// NewPeerKV returns the KV client of the node at addr, with conn (a gRPC
// connection to it) as the fallback and for unary calls.
func NewPeerKV(conn grpc.ClientConnInterface, addr string, w PeerWire) *PeerKV {
	m := newStreamMux(conn)
	d := wireDialer{tls: w.TLS, token: w.Token, keepTime: dial.Keepalive.Time, keepTimeout: dial.Keepalive.Timeout}
	m.openFn = d.opener(addr)
	m.fromNode, m.cluster, m.sent = w.FromNode, w.Cluster, w.Sent
	return &PeerKV{streamKV{m}}
}

// Close fails the calls in flight (Canceled) and closes the connection.
func (k *PeerKV) Close() { k.m.close() }
