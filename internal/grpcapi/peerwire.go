package grpcapi

import (
	"crypto/tls"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
)

// Forwarding over the framed wire: with WithPeerWire, the KV calls this
// node forwards to another (a merged write batch, a merged read, a Get or
// Scan it cannot serve) travel on the client's request stream to that node
// (client.PeerKV): the framed TCP wire, many calls to a message, falling
// back to KV.Stream over gRPC for a node that does not speak the wire, and
// to unary calls for one without Stream. The forwards' rules stay those of
// forward.go: the hop count, the deadline of their own, and Unavailable
// (outcome unknown for a write) when the node forwarded to does not answer
// or the connection breaks after the call was sent. Without WithPeerWire
// (the fake nodes of this package's tests) forwards are unary gRPC calls.
//
// The wire's client lives in the public client package, a higher layer
// than this one (internal/lint's layer table), so it comes in as a
// PeerDialer: the CLI, which may import both, gives node.Config one that
// calls client.NewPeerKV.

// PeerKV is a KV client of one peer whose calls travel on its request
// stream (client.PeerKV). Close ends its connection.
type PeerKV interface {
	concordpb.KVClient
	Close()
}

// PeerWire is how a node reaches its peers' framed wire.
type PeerWire struct {
	// TLS is the client TLS config of the node's peer connections (nil:
	// plaintext); Token the cluster's auth token ("": none).
	TLS   *tls.Config
	Token string
	// FromNode returns the forwarding node's id, stamped on every message
	// for partitions (fault injection).
	FromNode func() uint64
	// Cluster returns the forwarding node's cluster id, stamped on every
	// message so that a node of another cluster refuses the calls
	// (refusal in stream.go); 0 before the node has one.
	Cluster func() uint64
	// Sent is told of every message of calls sent: how many calls, and
	// whether over the framed wire (else over gRPC's stream). WithPeerWire
	// sets it.
	Sent func(framed bool, calls int)
}

// PeerDialer returns the PeerKV of the node at addr as w says, with conn
// (a gRPC connection to it) as the fallback and for unary calls.
type PeerDialer func(conn grpc.ClientConnInterface, addr string, w PeerWire) PeerKV

// peerPool keeps one PeerKV per peer address.
type peerPool struct {
	dial PeerDialer
	wire PeerWire
	mu   sync.Mutex
	m    map[string]PeerKV // guarded by mu
	// closed: ClosePeers ran (the node stops); forwards after it are
	// unary calls on the connections, which the node closes too.
	closed bool // guarded by mu
	// wire and grpc count the calls sent over the framed wire and over
	// gRPC's stream.
	framed, grpc atomic.Uint64
}

// WithPeerWire makes the node forward KV calls over the framed wire, on
// the PeerKVs d makes as w says; the node must ClosePeers when it stops.
func (s *KV) WithPeerWire(d PeerDialer, w PeerWire) *KV {
	p := &peerPool{dial: d, m: map[string]PeerKV{}}
	w.Sent = p.count
	p.wire = w
	s.peers = p
	return s
}

func (p *peerPool) count(framed bool, calls int) {
	if framed {
		p.framed.Add(uint64(calls))
	} else {
		p.grpc.Add(uint64(calls))
	}
}

// get returns addr's PeerKV, made over conn (addr's pooled gRPC connection)
// on first use.
func (p *peerPool) get(addr string, conn grpc.ClientConnInterface) concordpb.KVClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return concordpb.NewKVClient(conn)
	}
	k, ok := p.m[addr]
	if !ok {
		// Its unary calls (to a node without Stream) tell a broken
		// connection from the node's answer, as kvClientFor's do.
		k = p.dial(answeredConn{conn}, addr, p.wire)
		p.m[addr] = k
	}
	return k
}

// ClosePeers closes the framed connections to peers (their calls in flight
// fail); later forwards open new ones.
func (s *KV) ClosePeers() {
	if s.peers == nil {
		return
	}
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	s.peers.closed = true
	for a, k := range s.peers.m {
		k.Close()
		delete(s.peers.m, a)
	}
}

// ForwardedCalls returns how many KV calls this node has sent to other
// nodes on their request streams: over the framed wire, and over gRPC's
// KV.Stream (a node that does not speak the wire). Forwards without
// WithPeerWire, or as unary calls to a node without Stream, count in
// neither.
func (s *KV) ForwardedCalls() (framed, grpc uint64) {
	if s.peers == nil {
		return 0, 0
	}
	return s.peers.framed.Load(), s.peers.grpc.Load()
}
