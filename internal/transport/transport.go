// Package transport carries raft traffic between nodes.
//
// Each peer node gets two lanes, each a bounded queue drained by its own
// goroutine into its own connection: a framed TCP connection through the
// peer's port mux (Config.Wire = WireTCP, the default; tcp.go, frame.go) or a
// gRPC client stream (WireGRPC, RaftTransport.Send). The control lane
// carries the small messages raft's liveness depends on (heartbeats, votes,
// append acknowledgements, ReadIndex, TimeoutNow; see isControl), the bulk
// lane everything else, above all MsgApp. Two streams, because a stream is a
// FIFO at every level (our queue, gRPC's per-stream flow-control window, the
// receiver's handler): a heartbeat behind megabytes of appends would arrive
// after them, and a leader whose followers answer late steps down ("quorum is
// not active"). Framed, the lanes are two TCP connections; over gRPC, HTTP/2
// interleaves the two streams' frames on the one connection, and gRPC
// returns connection-level window as it reads, so a slow bulk stream does
// not hold the control stream up.
//
// The multiraft loop queues a whole phase of its iteration with Send and then
// calls Flush, so each lane of a peer gets one RaftBatch (one frame,
// concord_raft_frames_total) per phase rather than one per message. A
// RaftBatch holds at most maxBatch messages and Config.MaxBatchBytes bytes (a single larger message goes alone), well under
// the gRPC message limit (dial.MaxMsgBytes). Each lane's queue is bounded in
// messages (Config.QueueLen) and bytes (Config.QueueBytes). Send never blocks
// the loop: when a lane's queue is full or its stream is down, messages are
// dropped (raft retransmits) and the peer is reported unreachable.
//
// Snapshots go over their own stream per snapshot (RaftTransport.SendSnapshot):
// the sender iterates a storage.Snapshot of the shard's state-machine span and
// sends it in chunks; the receiver writes the chunks into an SSTable file as
// they arrive, so neither side holds a snapshot in memory.
//
// Peer traffic can be cut per node (Config.Blocked) for fault injection;
// client traffic is not affected.
package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/raftwire"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// Receiver is where incoming raft traffic goes (the multiraft host).
type Receiver interface {
	// Deliver must copy what it keeps of envs: the framed wire reuses the
	// envelopes and the bytes their messages alias once it returns.
	Deliver(ctx context.Context, fromNode ids.NodeID, envs []*concordpb.RaftEnvelope) error
	// DeliverSnapshot takes ownership of snap: it stages it or discards it.
	DeliverSnapshot(ctx context.Context, fromNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.StagedSnapshot) error
	ReportUnreachable(node ids.NodeID)
}

// Config configures a Transport.
type Config struct {
	ClusterID uint64
	NodeID    ids.NodeID
	// Resolve returns the address of a node; false for one that must get
	// no traffic (removed, or replaced by a fresh process at its address):
	// Send reports it unreachable, a stream from it is refused, and a peer
	// already made for it ends at its next reconnect or keepalive
	// (retireIfGone).
	Resolve func(node ids.NodeID) (string, bool)
	// OnReceive is called with the sender of every accepted batch, before
	// its messages are delivered (the node records which peers it has heard).
	// If it fails, the batch or snapshot is dropped and the stream ends with
	// the error.
	OnReceive func(fromNode ids.NodeID) error
	// Blocked reports whether traffic to and from a node is cut (fault
	// injection); nil means never.
	Blocked func(node ids.NodeID) bool
	// QueueLen bounds the messages queued per peer and lane (default 4,096).
	QueueLen int
	// QueueBytes bounds the bytes of marshalled messages queued per peer and
	// lane, not yet handed to the stream (default 64 MiB). It should exceed
	// the shards a node may lead times raft's MaxInflightBytes, or a follower
	// catching up many shards at once sees drops (raft then probes and
	// resends; correct, only slower). A message larger than QueueBytes is
	// still queued when the queue is empty.
	QueueBytes int
	// MaxBatchBytes bounds the bytes in one RaftBatch (default 16 MiB, a
	// quarter of dial.MaxMsgBytes); a single larger message goes alone.
	MaxBatchBytes int
	// SnapshotChunkBytes bounds the data in one snapshot chunk.
	SnapshotChunkBytes int
	// SnapshotRateBytes bounds the bytes per second of all snapshots this
	// node sends together (the node's --snapshot-rate-mib); 0: unlimited.
	SnapshotRateBytes int64
	// SnapshotBytes, if set, is told the bytes of snapshot data each chunk
	// sent (sent true) or received carries: /metrics counts them.
	SnapshotBytes func(sent bool, n int)
	// Frames, if set, is told of every frame of raft messages sent (sent
	// true) or received, with the messages it carries: /metrics counts them.
	Frames func(sent bool, msgs int)
	// DialOptions are added to every gRPC connection to a peer (TLS with
	// the node's certificate, the auth token): snapshots, and raft
	// messages with WireGRPC.
	DialOptions []grpc.DialOption
	// Wire is how raft messages go to peers: WireTCP (the default), a
	// framed connection per lane through the peer's port mux (tcp.go), or
	// WireGRPC, a gRPC stream per lane. A node receives both.
	Wire string
	// TLS, when set, makes the framed connections TLS: the node's client
	// config (its certificate, the cluster's CA). The server name is the
	// peer's host unless set.
	TLS *tls.Config
	// Token goes in the hello of every framed connection: the cluster's
	// auth token, for a receiver without TLS.
	Token string
	// AuthConn decides whether an incoming framed connection may carry raft
	// traffic, from the connection (its TLS state) and its hello's token;
	// nil lets every connection through.
	AuthConn func(c net.Conn, token string) error
	// MaxFrameBytes bounds an incoming frame (default dial.MaxMsgBytes, as
	// a gRPC stream's message).
	MaxFrameBytes int
	// MaxInboundSnapshots bounds the snapshot streams received at once
	// (default 8: two senders' MaxOutgoingSnapshots); one more is refused
	// with ResourceExhausted at once, and its sender's raft tries again
	// later.
	MaxInboundSnapshots int
	// SnapshotIdleTimeout bounds the wait for a snapshot stream's next
	// chunk (default 30 s); a stream that sends none for that long is
	// ended. Senders send a chunk (1 MiB) at least every 4 s even at the
	// lowest rate limit (1 MiB/s shared by 4 streams).
	SnapshotIdleTimeout time.Duration
	// SnapshotStreamTimeout bounds a whole snapshot stream (default 11 min:
	// every sender gives up after snapshotSendTimeout, 10 min); one not
	// done by then is ended, so a sender that trickles chunks just inside
	// the idle timeout cannot hold a receive slot and a growing staged file
	// for ever.
	SnapshotStreamTimeout time.Duration
	// MaxStagedSnapshots bounds the received snapshots whose files are on
	// disk at once, node-wide: streams being received and snapshots raft
	// has not taken yet (default 2 × MaxInboundSnapshots; multiraft
	// discards what raft did not take within the loop turn that stepped
	// it). One more stream is refused with ResourceExhausted before it is
	// read.
	MaxStagedSnapshots int
	// MaxSnapshotBytes bounds the key and value bytes of one received
	// snapshot (default 64 GiB). The stream declares no size (its sender
	// iterates the shard as it sends), so a stream past it is ended with
	// ResourceExhausted and what it staged removed.
	MaxSnapshotBytes int64
	// SnapshotDiskMargin is the space a received snapshot must leave free
	// on the data dir's file system (default 1 GiB), checked before
	// anything is staged and before each chunk is written: a stream that
	// would go below it is refused, or ended, with ResourceExhausted and
	// what it staged removed. Negative: no check.
	SnapshotDiskMargin int64
	// MaxInboundConns bounds the framed raft connections served at once
	// (default 256: two lanes for each of 128 peers, with room for a
	// sender's new connections while its old ones close). One more closes
	// the oldest of those that have not yet carried a frame this node
	// accepted (its cluster, this node, a sender in the address book: the
	// hello proves only the token), or, when every one has, is closed at
	// once. Connections still in their hello do not count.
	MaxInboundConns int
	// MaxHelloConns bounds the framed raft connections whose hello is not
	// read and authenticated yet (default 64; each has 2 s for it); one
	// more closes the oldest of them, so that connections that say
	// nothing cannot keep a peer out.
	MaxHelloConns int
	Logger        *slog.Logger
}

// Transport sends and receives raft traffic. It implements multiraft.Transport
// and the RaftTransport gRPC service.
type Transport struct {
	cfg Config
	// sink stages the snapshots this node receives.
	sink storage.SnapshotSink
	recv Receiver
	log  *slog.Logger

	mu    sync.Mutex
	peers map[ids.NodeID]*peer // guarded by mu
	// peerView is a copy of peers, replaced whenever peers changes: Send
	// reads it without taking mu.
	peerView atomic.Pointer[map[ids.NodeID]*peer]

	stopC chan struct{}
	wg    sync.WaitGroup

	// snapRate paces outgoing snapshot data (Config.SnapshotRateBytes).
	snapRate *rateLimit
	// snapIn holds a token per snapshot stream being received
	// (Config.MaxInboundSnapshots).
	snapIn chan struct{}
	// snapBackoff spaces out snapshots to peers that refused one.
	snapBackoff snapshotBackoff
	// snapCounted, if set (tests), is called by a snapshot stream once it
	// counts against Config.MaxStagedSnapshots, before its first chunk is
	// read.
	snapCounted func()

	// after waits out a reconnect backoff (time.After; tests record it).
	after func(time.Duration) <-chan time.Time
	// writeWait bounds one write of a framed connection (writeTimeout;
	// tests shorten it). Set before the first Send.
	writeWait time.Duration
	// keepaliveWait is how often a lane's idle connection carries a frame
	// of no messages (keepaliveInterval), idleWait how long a received
	// connection may send nothing once it has sent a keepalive
	// (idleTimeout), quietWait before (quietTimeout), and helloWait how
	// long one may take for its hello (helloReadTimeout); tests change
	// them. Set before traffic flows.
	keepaliveWait, idleWait, quietWait, helloWait time.Duration
	// keepalives counts the frames of no messages received.
	keepalives atomic.Uint64

	// ctx ends with Stop: deliveries from framed connections wait on it.
	ctx    context.Context
	cancel context.CancelFunc
	// greeting are the incoming framed connections in their hello,
	// oldest first (Config.MaxHelloConns), conns those past it
	// (Config.MaxInboundConns); Stop closes both.
	greeting []net.Conn            // guarded by mu
	conns    map[net.Conn]struct{} // guarded by mu
	// unproven are those of conns that have carried no accepted frame
	// yet, oldest first: the first closed for a new connection.
	unproven []net.Conn // guarded by mu
	stopped  bool       // guarded by mu
}

// New creates a Transport that stages received snapshots in sink (the
// node's storage engine); SetReceiver must be called before traffic flows.
func New(cfg Config, sink storage.SnapshotSink) *Transport {
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 4096
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.MaxBatchBytes == 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.SnapshotChunkBytes == 0 {
		cfg.SnapshotChunkBytes = 1 << 20
	}
	if cfg.Blocked == nil {
		cfg.Blocked = func(ids.NodeID) bool { return false }
	}
	if cfg.Resolve == nil { // knows no node: sends nothing, accepts no stream
		cfg.Resolve = func(ids.NodeID) (string, bool) { return "", false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Wire == "" {
		cfg.Wire = WireTCP
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = dial.MaxMsgBytes
	}
	if cfg.MaxInboundSnapshots == 0 {
		cfg.MaxInboundSnapshots = 8
	}
	if cfg.SnapshotIdleTimeout == 0 {
		cfg.SnapshotIdleTimeout = 30 * time.Second
	}
	if cfg.SnapshotStreamTimeout == 0 {
		cfg.SnapshotStreamTimeout = snapshotSendTimeout + time.Minute
	}
	if cfg.MaxStagedSnapshots == 0 {
		cfg.MaxStagedSnapshots = 2 * cfg.MaxInboundSnapshots
	}
	if cfg.MaxSnapshotBytes == 0 {
		cfg.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if cfg.SnapshotDiskMargin == 0 {
		cfg.SnapshotDiskMargin = DefaultSnapshotDiskMargin
	}
	if cfg.MaxInboundConns == 0 {
		cfg.MaxInboundConns = DefaultMaxInboundConns
	}
	if cfg.MaxHelloConns == 0 {
		cfg.MaxHelloConns = DefaultMaxHelloConns
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{cfg: cfg, sink: sink, log: cfg.Logger, peers: map[ids.NodeID]*peer{}, stopC: make(chan struct{}),
		snapRate: &rateLimit{bytesPerSec: float64(cfg.SnapshotRateBytes)}, after: time.After, writeWait: writeTimeout,
		keepaliveWait: keepaliveInterval, idleWait: idleTimeout, quietWait: quietTimeout, helloWait: helloReadTimeout,
		ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}, snapIn: make(chan struct{}, cfg.MaxInboundSnapshots),
		snapBackoff: snapshotBackoff{min: snapBackoffMin, max: snapBackoffMax, busy: snapBusyWait}}
}

// SetReceiver sets where incoming traffic is delivered.
func (t *Transport) SetReceiver(r Receiver) { t.recv = r }

func (t *Transport) isBlocked(node ids.NodeID) bool { return t.cfg.Blocked(node) }

// Stop closes every peer stream and connection.
func (t *Transport) Stop() {
	close(t.stopC)
	t.cancel()
	t.mu.Lock()
	t.stopped = true
	for _, p := range t.peers {
		p.conn.Close()
	}
	for c := range t.conns {
		_ = c.Close()
	}
	for _, c := range t.greeting {
		_ = c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// Defaults of Config's byte limits.
const (
	// DefaultMaxBatchBytes is the default Config.MaxBatchBytes: well under
	// dial.MaxMsgBytes (64 MiB), and above the largest raft entry a client
	// can make (grpcapi.MaxBatchBytes, 8 MiB, plus the command's framing), so
	// that such an entry fits in one RaftBatch.
	DefaultMaxBatchBytes = 16 << 20
	// DefaultQueueBytes is the default Config.QueueBytes.
	DefaultQueueBytes = 64 << 20
	// DefaultMaxInboundConns is the default Config.MaxInboundConns.
	DefaultMaxInboundConns = 256
	// DefaultMaxHelloConns is the default Config.MaxHelloConns: a real
	// peer's hello takes a round trip at most, so even every lane of 32
	// peers reconnecting at once rarely has this many in their hello.
	DefaultMaxHelloConns = 64
)

// maxBatch bounds the messages in one RaftBatch; a lane's queue is also
// handed over early once it holds this many, or MaxBatchBytes.
const maxBatch = 512

// Reconnect backoff of a lane whose stream failed: doubling from
// minBackoff to maxBackoff, back to minBackoff after a stream that sent.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// envelopeOverhead bounds what a RaftEnvelope adds to its message on the
// wire: the shard id and the field tags and lengths.
const envelopeOverhead = 32

func envelopeBytes(e *concordpb.RaftEnvelope) int { return len(e.GetMessage()) + envelopeOverhead }

// isControl says which messages take the control lane: the small ones that
// keep leaders and elections alive and answer reads. They must never wait
// behind appends. Everything else (MsgApp above all) takes the bulk lane.
// Raft tolerates reordering between the two.
func isControl(t pb.MessageType) bool {
	switch t {
	case pb.MsgHeartbeat, pb.MsgHeartbeatResp, pb.MsgVote, pb.MsgVoteResp, pb.MsgPreVote, pb.MsgPreVoteResp,
		pb.MsgAppResp, pb.MsgTimeoutNow, pb.MsgReadIndex, pb.MsgReadIndexResp:
		return true
	}
	return false
}

// peer is the outgoing side of one peer node: two lanes over one connection.
type peer struct {
	node ids.NodeID
	addr string
	conn *grpc.ClientConn

	control, bulk *lane

	// grpcOnly is set once the peer answered a framed connection: a
	// receiver of the framed wire never writes, so the peer is a node from
	// before it (its port mux took the magic for RESP, which replied).
	// Its lanes then send over gRPC streams.
	grpcOnly atomic.Bool

	// stopC ends the peer's goroutines.
	stopC chan struct{}
}

// peer returns the sender side of node, made on its first message and
// remade when the node's address changed. The common case reads a
// published copy of the peers map without taking t.mu: Send runs once per
// message on the loop goroutine.
func (t *Transport) peer(node ids.NodeID) (*peer, error) {
	addr, ok := t.cfg.Resolve(node)
	if !ok {
		return nil, fmt.Errorf("transport: no address for node %d", node)
	}
	if m := t.peerView.Load(); m != nil {
		if p := (*m)[node]; p != nil && p.addr == addr {
			return p, nil
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[node]; ok && p.addr == addr {
		return p, nil
	} else if ok {
		close(p.stopC) // the node moved: end the old peer's goroutines
		p.conn.Close()
	}
	conn, err := dial.Dial(addr, t.cfg.DialOptions...)
	if err != nil {
		return nil, err
	}
	p := t.newPeer(node, addr)
	p.conn = conn
	t.peers[node] = p
	t.publishPeers()
	t.wg.Add(2)
	go t.runLane(p, p.control)
	go t.runLane(p, p.bulk)
	return p, nil
}

// publishPeers publishes a copy of t.peers for peer's lock-free reads; t.mu
// is held.
func (t *Transport) publishPeers() {
	m := make(map[ids.NodeID]*peer, len(t.peers))
	for n, p := range t.peers {
		m[n] = p
	}
	t.peerView.Store(&m)
}

func (t *Transport) newPeer(node ids.NodeID, addr string) *peer {
	h := t.batchHeader(uint64(node))
	return &peer{node: node, addr: addr, control: t.newLane("control", h), bulk: t.newLane("bulk", h), stopC: make(chan struct{})}
}

// Send implements multiraft.Transport: it queues m for toNode on the lane of
// its type. The message leaves at the next Flush, so that everything one loop
// iteration sends to a peer goes out in one batch per lane. m is encoded
// before Send returns (raftwire, straight into the lane's frames; proto
// for the rare message raftwire leaves to it): the caller may reuse it.
func (t *Transport) Send(toNode ids.NodeID, shard ids.ShardID, m *pb.Message) {
	if t.isBlocked(toNode) {
		return
	}
	p, err := t.peer(toNode)
	if err != nil {
		t.recv.ReportUnreachable(toNode)
		return
	}
	o := outMsg{shard: uint64(shard), m: m}
	var fast bool
	if o.size, fast = raftwire.Size(m); !fast {
		if o.data, err = proto.Marshal(m); err != nil {
			t.log.Error("marshal raft message", "err", err)
			return
		}
		o.size = len(o.data)
	}
	l := p.bulk
	if isControl(m.GetType()) {
		l = p.control
	}
	o.overhead = raftwire.Overhead(m)
	full, n, queued := l.push(o, t.cfg.QueueLen, t.cfg.QueueBytes, t.cfg.MaxBatchBytes, t.maxDecodedBytes())
	switch {
	case full:
		t.recv.ReportUnreachable(toNode) // the peer is not keeping up; raft retransmits
	case n >= maxBatch || queued >= t.cfg.MaxBatchBytes:
		l.wake()
	}
}

// Flush implements multiraft.Transport: it hands every peer's queued
// messages to its senders.
func (t *Transport) Flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.peers {
		for _, l := range []*lane{p.control, p.bulk} {
			if l.hasPending() {
				l.wake()
			}
		}
	}
}

// runLane sends l's queue over a stream, reconnecting with backoff; the
// backoff starts over after a stream that sent something.
func (t *Transport) runLane(p *peer, l *lane) {
	defer t.wg.Done()
	backoff := minBackoff
	for {
		if t.retireIfGone(p) { // before each dial: a removed node's address is not dialled
			return
		}
		stream := t.stream
		if t.cfg.Wire == WireTCP && !p.grpcOnly.Load() {
			stream = t.tcpStream
		}
		sent, err := stream(p, l)
		select {
		case <-t.stopC:
			return
		default:
		}
		if errors.Is(err, errPeerClosed) {
			return
		}
		t.log.Debug("peer stream ended", "peer", p.node, "addr", p.addr, "lane", l.name, "err", err)
		t.recv.ReportUnreachable(p.node)
		l.drop() // drop what was queued: raft retransmits
		if sent {
			backoff = minBackoff
		}
		select {
		case <-t.stopC:
			return
		case <-p.stopC:
			return
		case <-t.after(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

var errPeerClosed = errors.New("peer closed")

// retireIfGone ends p when the address book no longer gives its node p's
// address: the node was removed (or replaced by a fresh process at its
// address: Config.Resolve refuses both) or moved. Without this a peer's
// lanes redialled its old address for ever, each connection carrying a
// keepalive: after `concord node remove 3` and a new node at 3's address,
// every other node's two lanes to node 3 reached the new node once a
// second, which refused and logged each one ("message for node 3 reached
// node 5"). Each lane checks before it dials and at each keepalive. A
// peer in the map is removed from it under t.mu and its goroutines told to
// end (p.stopC), once: a lane that finds p already gone from the map (the
// other lane retired it, or peer remade it for a new address) only stops.
// It says whether p is gone.
func (t *Transport) retireIfGone(p *peer) bool {
	if addr, ok := t.cfg.Resolve(p.node); ok && addr == p.addr {
		select {
		case <-p.stopC: // closed by peer for a new address
			return true
		default:
			return false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers[p.node] == p {
		delete(t.peers, p.node)
		t.publishPeers()
		close(p.stopC)
		p.conn.Close()
		t.log.Info("raft peer dropped: the address book no longer lists it at this address (removed, replaced or moved)",
			"peer", p.node, "addr", p.addr)
	}
	return true
}

// stream sends l's queue over one stream until it fails or p stops; sent
// says whether any batch went out on it.
func (t *Transport) stream(p *peer, l *lane) (sent bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := concordpb.NewRaftTransportClient(p.conn).Send(ctx)
	if err != nil {
		return false, err
	}
	for {
		select {
		case <-l.wakeC:
		case <-t.stopC:
			return sent, errPeerClosed
		case <-p.stopC:
			return sent, errPeerClosed
		}
		for q := l.take(); q.msgs > 0; q = l.take() {
			if t.isBlocked(p.node) {
				l.recycle(q)
				continue // drop
			}
			// The legacy wire: each queued frame, decoded, is a batch for
			// the stream (proto.Unmarshal copies the bytes out of q).
			err := q.frames(func(data []byte, msgs int) error {
				batch := &concordpb.RaftBatch{}
				if err := proto.Unmarshal(data, batch); err != nil {
					return fmt.Errorf("transport: a queued frame does not decode: %w", err)
				}
				if err := s.Send(batch); err != nil {
					return err
				}
				t.countFrame(true, msgs)
				sent = true
				return nil
			})
			l.recycle(q)
			if err != nil {
				return sent, err
			}
		}
	}
}

// Server is the receiving side: the RaftTransport gRPC service.
type Server struct {
	concordpb.UnimplementedRaftTransportServer
	t *Transport
}

// Server returns the RaftTransport service of t.
func (t *Transport) Server() *Server { return &Server{t: t} }

// Send implements the RaftTransport service: a peer's stream of batches.
// The stream's first batch names its sender, which must be a node in the
// address book; a later batch naming another node ends the stream.
func (srv *Server) Send(s grpc.ClientStreamingServer[concordpb.RaftBatch, concordpb.RaftAck]) error {
	t := srv.t
	var sender ids.NodeID // fixed by the first batch
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&concordpb.RaftAck{})
		}
		if err != nil {
			return err
		}
		if err := t.receive(s.Context(), &sender, b); err != nil {
			return err
		}
	}
}

// receive checks one incoming batch of a stream or connection and delivers
// its messages. *sender is the stream's sender, fixed by its first batch (0
// before it): a later batch naming another node is an error, which ends the
// stream.
func (t *Transport) receive(ctx context.Context, sender *ids.NodeID, b *concordpb.RaftBatch) error {
	if err := t.checkHeader(b.GetClusterId(), ids.NodeID(b.GetToNodeId())); err != nil {
		return err
	}
	from := ids.NodeID(b.GetFromNodeId())
	if *sender == 0 {
		if err := t.checkSender(from); err != nil {
			return err
		}
		*sender = from
	} else if from != *sender {
		return fmt.Errorf("transport: a stream from node %d sent a batch from node %d", *sender, from)
	}
	if n := len(b.GetMessages()); n > maxRecvBatch { // the framed wire's decoder refused it already
		return fmt.Errorf("transport: %d messages in one batch (at most %d)", n, maxRecvBatch)
	}
	if err := t.checkDecodedSize(b.GetMessages()); err != nil {
		return err
	}
	if t.isBlocked(from) || len(b.GetMessages()) == 0 { // nothing to deliver (a keepalive)
		return nil
	}
	if t.cfg.OnReceive != nil {
		if err := t.cfg.OnReceive(from); err != nil {
			return err
		}
	}
	t.countFrame(false, len(b.GetMessages()))
	return t.recv.Deliver(ctx, from, b.GetMessages())
}

// checkDecodedSize refuses a batch whose messages would hold more than
// maxDecodedBytes decoded beyond their own bytes (raftwire.DecodedOverhead),
// counted before the receiver decodes any: an entry of six bytes on the
// wire decodes into some 128, so one 64 MiB frame of the shortest entries
// made ~1.3 GB before any check looked at it. Senders cut their batches by
// the same count (lane.push), so only a single message larger on its own
// could reach the budget, and raft's MaxSizePerMsg keeps every real one far
// below it (TestMaximalAppendPasses).
func (t *Transport) checkDecodedSize(envs []*concordpb.RaftEnvelope) error {
	total := 0
	for _, e := range envs {
		n, ok := raftwire.DecodedOverhead(e.GetMessage())
		if !ok {
			return fmt.Errorf("transport: a raft message for shard %d does not parse", e.GetShardId())
		}
		if total += n; total > t.maxDecodedBytes() {
			return fmt.Errorf("transport: a batch that would take more than %d bytes decoded (its messages and entries)", t.maxDecodedBytes())
		}
	}
	return nil
}

// maxDecodedBytes bounds what one batch's messages may hold decoded beyond
// their bytes: four times the bytes a batch carries (Config.MaxBatchBytes),
// 64 MiB by default, twice what raft's largest append of the shortest
// entries takes (MaxSizePerMsg, 1 MiB, of 4-byte entries: 32 MiB).
func (t *Transport) maxDecodedBytes() int { return 4 * t.cfg.MaxBatchBytes }

func (t *Transport) countFrame(sent bool, msgs int) {
	if t.cfg.Frames != nil {
		t.cfg.Frames(sent, msgs)
	}
}

func (t *Transport) checkHeader(clusterID uint64, toNode ids.NodeID) error {
	if clusterID != t.cfg.ClusterID {
		return fmt.Errorf("transport: message for cluster %x reached cluster %x", clusterID, t.cfg.ClusterID)
	}
	if toNode != t.cfg.NodeID {
		return fmt.Errorf("transport: message for node %d reached node %d", toNode, t.cfg.NodeID)
	}
	return nil
}

// checkSender refuses a peer stream from a node this node does not know: no
// node id, its own, or one with no address in the book.
func (t *Transport) checkSender(from ids.NodeID) error {
	if from == 0 || from == t.cfg.NodeID {
		return fmt.Errorf("transport: a peer stream claims to come from node %d", from)
	}
	if _, ok := t.cfg.Resolve(from); !ok {
		return fmt.Errorf("transport: a peer stream from unknown node %d", from)
	}
	return nil
}

// snapshotSendTimeout bounds the sending of one snapshot; a receiver ends a
// stream that outlasts it (Config.SnapshotStreamTimeout).
const snapshotSendTimeout = 10 * time.Minute

// SendSnapshot implements multiraft.Transport.
func (t *Transport) SendSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.Snapshot, done func(ok bool)) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := t.sendSnapshot(toNode, shard, m, snap)
		switch {
		case errors.Is(err, errSnapshotBackoff): // said once, when refused
			t.log.Debug("snapshot not sent", "shard", shard, "to_node", toNode, "err", err)
		case snapshotBusy(err): // contention, asked again at the next heartbeat answer
			t.log.Debug("snapshot not sent: receiver busy", "shard", shard, "to_node", toNode, "err", err)
		case err != nil:
			t.log.Warn("snapshot send failed", "shard", shard, "to_node", toNode, "err", err)
		}
		done(err == nil)
	}()
}

func (t *Transport) sendSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap storage.SnapshotSource) error {
	if t.isBlocked(toNode) {
		return errors.New("peer blocked")
	}
	if err := t.snapBackoff.wait(toNode); err != nil {
		return err
	}
	// Debug: a receiver whose slots are busy is asked again every heartbeat
	// answer; "snapshot sent" says Info once one went through.
	t.log.Debug("sending snapshot", "shard", shard, "to_node", toNode, "index", m.GetSnapshot().GetMetadata().GetIndex())
	err := t.streamSnapshot(toNode, shard, m, snap)
	t.snapBackoff.note(toNode, err)
	return err
}

// streamSnapshot sends snap to toNode in one stream.
func (t *Transport) streamSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap storage.SnapshotSource) error {
	p, err := t.peer(toNode)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), snapshotSendTimeout)
	defer cancel()
	go func() { // Stop ends a send waiting for the rate limit, too
		select {
		case <-t.stopC:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := concordpb.NewRaftTransportClient(p.conn).SendSnapshot(ctx)
	if err != nil {
		return err
	}
	hdr, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	chunk := &concordpb.SnapshotChunk{ClusterId: t.cfg.ClusterID, FromNodeId: uint64(t.cfg.NodeID), ToNodeId: uint64(toNode),
		ShardId: uint64(shard), RaftMessage: hdr}
	size, sent := 0, 0
	err = snap.ScanState(shard, func(k, v []byte) error {
		chunk.Kvs = append(chunk.Kvs, &concordpb.KeyValue{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		size += len(k) + len(v)
		if size < t.cfg.SnapshotChunkBytes && len(chunk.Kvs) < maxChunkKVs {
			return nil
		}
		if err := t.snapRate.wait(ctx, size); err != nil {
			return err
		}
		if err := s.Send(chunk); err != nil {
			return streamStatus(s, err)
		}
		t.countSnapshot(true, size)
		sent += len(chunk.Kvs)
		chunk, size = &concordpb.SnapshotChunk{ShardId: uint64(shard)}, 0
		return nil
	})
	if err != nil {
		return err
	}
	chunk.Done = true
	if err := t.snapRate.wait(ctx, size); err != nil {
		return err
	}
	if err := s.Send(chunk); err != nil {
		return streamStatus(s, err)
	}
	t.countSnapshot(true, size)
	ack, err := s.CloseAndRecv()
	if err != nil {
		return err
	}
	if !ack.GetApplied() {
		return errors.New("receiver did not take the snapshot")
	}
	t.log.Info("snapshot sent", "shard", shard, "to_node", toNode, "index", m.GetSnapshot().GetMetadata().GetIndex(), "keys", sent+len(chunk.Kvs))
	return nil
}

func (t *Transport) countSnapshot(sent bool, n int) {
	if t.cfg.SnapshotBytes != nil && n > 0 {
		t.cfg.SnapshotBytes(sent, n)
	}
}

// snapshotStream is the receiving side of a snapshot stream.
type snapshotStream = grpc.ClientStreamingServer[concordpb.SnapshotChunk, concordpb.SnapshotAck]

// SendSnapshot implements the RaftTransport service: one incoming snapshot.
// At most Config.MaxInboundSnapshots are received at once, each chunk
// must come within Config.SnapshotIdleTimeout and the whole stream within
// Config.SnapshotStreamTimeout: a stalled or trickling sender holds
// neither the handler's goroutine nor its staged file for long.
func (srv *Server) SendSnapshot(s snapshotStream) error {
	t := srv.t
	select {
	case t.snapIn <- struct{}{}:
		defer func() { <-t.snapIn }()
	default:
		return refusal(refusedBusy, "transport: %d snapshots being received already", cap(t.snapIn))
	}
	slot, err := t.reserveStaged()
	if err != nil {
		return err
	}
	defer slot.Release() // unless the stream's writer took it
	if t.snapCounted != nil {
		t.snapCounted()
	}
	chunks := t.newChunkReader(s)
	defer chunks.close()
	first, err := chunks.next()
	if err != nil {
		return err
	}
	if err := t.checkHeader(first.GetClusterId(), ids.NodeID(first.GetToNodeId())); err != nil {
		return err
	}
	from, shard := ids.NodeID(first.GetFromNodeId()), ids.ShardID(first.GetShardId())
	if err := t.checkSender(from); err != nil {
		return err
	}
	if t.isBlocked(from) {
		return errors.New("transport: peer blocked")
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(first.GetRaftMessage(), m); err != nil || m.GetType() != pb.MsgSnap {
		return fmt.Errorf("transport: snapshot stream must start with a MsgSnap (%v)", err)
	}
	staged, err := t.receiveSnapshotData(chunks, first, shard, m, slot)
	if err != nil {
		return err
	}
	if t.cfg.OnReceive != nil {
		if err := t.cfg.OnReceive(from); err != nil {
			staged.Discard()
			return err
		}
	}
	if err := t.recv.DeliverSnapshot(s.Context(), from, shard, m, staged); err != nil {
		return err
	}
	return s.SendAndClose(&concordpb.SnapshotAck{Applied: true})
}

// receiveSnapshotData writes the stream's pairs into a staged snapshot.
// Every key must lie in the shard's state-machine span (the writer refuses
// others), and the data's applied state and configuration must be the ones
// the header's MsgSnap names (checkSnapshotState).
func (t *Transport) receiveSnapshotData(chunks *chunkReader, chunk *concordpb.SnapshotChunk, shard ids.ShardID,
	m *pb.Message, slot *storage.SnapshotReservation) (*storage.StagedSnapshot, error) {
	if err := t.checkSpace(0); err != nil { // before anything is staged
		return nil, err
	}
	w, err := slot.NewWriter(shard)
	if err != nil {
		return nil, err
	}
	sender := chunk.GetFromNodeId()
	st := newSnapshotState(shard)
	var total int64
	for {
		if n := len(chunk.GetKvs()); n > maxRecvChunkKVs { // the gRPC server's codec refused it already
			w.Abort()
			return nil, fmt.Errorf("transport: %d pairs in one snapshot chunk (at most %d)", n, maxRecvChunkKVs)
		}
		if err := t.checkChunk(&total, chunk); err != nil {
			w.Abort()
			return nil, err
		}
		size := 0
		for _, kv := range chunk.GetKvs() {
			size += len(kv.GetKey()) + len(kv.GetValue())
			if err := st.note(kv.GetKey(), kv.GetValue()); err != nil {
				w.Abort()
				return nil, err
			}
			if err := w.Set(kv.GetKey(), kv.GetValue()); err != nil {
				w.Abort()
				return nil, fmt.Errorf("transport: %w", err)
			}
		}
		t.countSnapshot(false, size)
		if chunk.GetDone() {
			break
		}
		if chunk, err = chunks.next(); err != nil {
			w.Abort()
			return nil, err
		}
		if from := chunk.GetFromNodeId(); from != 0 && from != sender {
			w.Abort()
			return nil, fmt.Errorf("transport: snapshot chunk from node %d in a stream from node %d", from, sender)
		}
		if ids.ShardID(chunk.GetShardId()) != shard {
			w.Abort()
			return nil, fmt.Errorf("transport: snapshot chunk for shard %d in a stream for shard %d", chunk.GetShardId(), shard)
		}
	}
	if err := st.check(m.GetSnapshot().GetMetadata()); err != nil {
		w.Abort()
		return nil, err
	}
	return w.Finish()
}

// snapshotState is what a received snapshot's data says of itself: its
// applied state and its configuration (nil: absent).
type snapshotState struct {
	appliedKey, confKey []byte
	applied             *storepb.AppliedState
	conf                *pb.ConfState
}

func newSnapshotState(shard ids.ShardID) *snapshotState {
	return &snapshotState{appliedKey: keys.Applied(uint64(shard)), confKey: keys.ConfState(uint64(shard))}
}

// note decodes the pair if it is the applied state or the configuration.
func (s *snapshotState) note(key, value []byte) error {
	switch {
	case bytes.Equal(key, s.appliedKey):
		s.applied = &storepb.AppliedState{}
		if err := proto.Unmarshal(value, s.applied); err != nil {
			return fmt.Errorf("transport: snapshot applied state: %w", err)
		}
	case bytes.Equal(key, s.confKey):
		s.conf = &pb.ConfState{}
		if err := proto.Unmarshal(value, s.conf); err != nil {
			return fmt.Errorf("transport: snapshot configuration: %w", err)
		}
	}
	return nil
}

// check refuses data that is not the state md names. Raft accepts a
// snapshot by its header and restores the header's configuration, while
// the replica installs the data's: data applied at another index fails
// the install after the shard was replaced (a fatal error), and data of
// another configuration (or none) leaves a replica running one
// configuration and restarting into another.
func (s *snapshotState) check(md *pb.SnapshotMetadata) error {
	mutated := mutant.Enabled && mutant.On(mutant.SnapshotDropsEntry)
	if (s.applied.GetIndex() != md.GetIndex() || s.applied.GetTerm() != md.GetTerm()) && !mutated {
		return fmt.Errorf("transport: snapshot data applied at %d/%d, its header says %d/%d",
			s.applied.GetIndex(), s.applied.GetTerm(), md.GetIndex(), md.GetTerm())
	}
	conf, want := s.conf, md.GetConfState()
	if conf == nil {
		conf = &pb.ConfState{}
	}
	if want == nil {
		want = &pb.ConfState{}
	}
	if conf.Equivalent(want) != nil {
		return fmt.Errorf("transport: snapshot data's configuration (%v) is not its header's (%v)", conf, want)
	}
	return nil
}
