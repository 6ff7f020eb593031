// Package transport carries raft traffic between nodes over gRPC.
//
// Each peer node gets one goroutine and one client stream (RaftTransport.Send)
// fed by a bounded queue. The multiraft loop queues a whole phase of its
// iteration with Send and then calls Flush, so each peer gets one RaftBatch
// per phase rather than one per message. Send never blocks the loop: when a
// peer's queue is full or its stream is down, messages are dropped (raft
// retransmits) and the peer is reported unreachable.
//
// Snapshots go over their own stream per snapshot (RaftTransport.SendSnapshot):
// the sender iterates a Pebble snapshot of the shard's state-machine span and
// sends it in chunks; the receiver writes the chunks into an SSTable file as
// they arrive, so neither side holds a snapshot in memory.
//
// Peer traffic can be cut per node (Config.Blocked) for fault injection;
// client traffic is not affected.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// Receiver is where incoming raft traffic goes (the multiraft host).
type Receiver interface {
	Deliver(fromNode ids.NodeID, envs []*concordpb.RaftEnvelope) error
	// DeliverSnapshot takes ownership of snap: it stages it or discards it.
	DeliverSnapshot(ctx context.Context, fromNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.StagedSnapshot) error
	ReportUnreachable(node ids.NodeID)
}

// Config configures a Transport.
type Config struct {
	ClusterID uint64
	NodeID    ids.NodeID
	// Resolve returns the address of a node.
	Resolve func(node ids.NodeID) (string, bool)
	// OnReceive is called with the sender of every accepted batch, before
	// its messages are delivered (the node records which peers it has heard).
	// If it fails, the batch or snapshot is dropped and the stream ends with
	// the error.
	OnReceive func(fromNode ids.NodeID) error
	// Blocked reports whether traffic to and from a node is cut (fault
	// injection); nil means never.
	Blocked func(node ids.NodeID) bool
	// QueueLen bounds the messages queued per peer.
	QueueLen int
	// SnapshotChunkBytes bounds the data in one snapshot chunk.
	SnapshotChunkBytes int
	Logger             *slog.Logger
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

	stopC chan struct{}
	wg    sync.WaitGroup
}

// New creates a Transport that stages received snapshots in sink (the
// node's storage engine); SetReceiver must be called before traffic flows.
func New(cfg Config, sink storage.SnapshotSink) *Transport {
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 4096
	}
	if cfg.SnapshotChunkBytes == 0 {
		cfg.SnapshotChunkBytes = 1 << 20
	}
	if cfg.Blocked == nil {
		cfg.Blocked = func(ids.NodeID) bool { return false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Transport{cfg: cfg, sink: sink, log: cfg.Logger, peers: map[ids.NodeID]*peer{}, stopC: make(chan struct{})}
}

// SetReceiver sets where incoming traffic is delivered.
func (t *Transport) SetReceiver(r Receiver) { t.recv = r }

func (t *Transport) isBlocked(node ids.NodeID) bool { return t.cfg.Blocked(node) }

// Stop closes every peer stream.
func (t *Transport) Stop() {
	close(t.stopC)
	t.mu.Lock()
	for _, p := range t.peers {
		p.conn.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// peer is the outgoing side of one peer node.
type peer struct {
	node ids.NodeID
	addr string
	conn *grpc.ClientConn

	mu      sync.Mutex
	pending []*concordpb.RaftEnvelope // guarded by mu: queued, not yet handed to the stream

	// wakeC tells the peer's goroutine that pending has messages.
	wakeC chan struct{}
	// stopC ends the peer's goroutine.
	stopC chan struct{}
}

func (p *peer) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (p *peer) take() []*concordpb.RaftEnvelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	msgs := p.pending
	p.pending = nil
	return msgs
}

func (t *Transport) peer(node ids.NodeID) (*peer, error) {
	addr, ok := t.cfg.Resolve(node)
	if !ok {
		return nil, fmt.Errorf("transport: no address for node %d", node)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[node]; ok && p.addr == addr {
		return p, nil
	} else if ok {
		close(p.stopC) // the node moved: end the old peer's goroutine
		p.conn.Close()
	}
	conn, err := dial.Dial(addr)
	if err != nil {
		return nil, err
	}
	p := &peer{node: node, addr: addr, conn: conn, wakeC: make(chan struct{}, 1), stopC: make(chan struct{})}
	t.peers[node] = p
	t.wg.Add(1)
	go t.runPeer(p)
	return p, nil
}

// maxBatch bounds the messages in one RaftBatch; a peer's queue is also
// handed over early once it holds this many.
const maxBatch = 512

// Send implements multiraft.Transport: it queues m for toNode. The message
// leaves at the next Flush, so that everything one loop iteration sends to a
// peer goes out in one batch.
func (t *Transport) Send(toNode ids.NodeID, shard ids.ShardID, m *pb.Message) {
	if t.isBlocked(toNode) {
		return
	}
	p, err := t.peer(toNode)
	if err != nil {
		t.recv.ReportUnreachable(toNode)
		return
	}
	data, err := proto.Marshal(m)
	if err != nil {
		t.log.Error("marshal raft message", "err", err)
		return
	}
	p.mu.Lock()
	full := len(p.pending) >= t.cfg.QueueLen
	if !full {
		p.pending = append(p.pending, &concordpb.RaftEnvelope{ShardId: uint64(shard), Message: data})
	}
	n := len(p.pending)
	p.mu.Unlock()
	switch {
	case full:
		t.recv.ReportUnreachable(toNode) // the peer is not keeping up; raft retransmits
	case n >= maxBatch:
		p.wake()
	}
}

// Flush implements multiraft.Transport: it hands every peer's queued
// messages to its sender.
func (t *Transport) Flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.peers {
		p.mu.Lock()
		has := len(p.pending) > 0
		p.mu.Unlock()
		if has {
			p.wake()
		}
	}
}

// runPeer sends p's queue over a stream, reconnecting with backoff.
func (t *Transport) runPeer(p *peer) {
	defer t.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		err := t.stream(p)
		select {
		case <-t.stopC:
			return
		default:
		}
		if errors.Is(err, errPeerClosed) {
			return
		}
		t.log.Debug("peer stream ended", "peer", p.node, "addr", p.addr, "err", err)
		t.recv.ReportUnreachable(p.node)
		p.take() // drop what was queued: raft retransmits
		select {
		case <-t.stopC:
			return
		case <-p.stopC:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

var errPeerClosed = errors.New("peer closed")

// stream sends p's queue over one stream until it fails or p stops.
func (t *Transport) stream(p *peer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := concordpb.NewRaftTransportClient(p.conn).Send(ctx)
	if err != nil {
		return err
	}
	for {
		select {
		case <-p.wakeC:
		case <-t.stopC:
			return errPeerClosed
		case <-p.stopC:
			return errPeerClosed
		}
		for msgs := p.take(); len(msgs) > 0 && !t.isBlocked(p.node); {
			n := min(len(msgs), maxBatch)
			batch := &concordpb.RaftBatch{ClusterId: t.cfg.ClusterID, FromNodeId: uint64(t.cfg.NodeID), ToNodeId: uint64(p.node), Messages: msgs[:n]}
			if err := s.Send(batch); err != nil {
				return err
			}
			msgs = msgs[n:]
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
func (srv *Server) Send(s grpc.ClientStreamingServer[concordpb.RaftBatch, concordpb.RaftAck]) error {
	t := srv.t
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&concordpb.RaftAck{})
		}
		if err != nil {
			return err
		}
		if err := t.checkHeader(b.GetClusterId(), ids.NodeID(b.GetToNodeId())); err != nil {
			return err
		}
		from := ids.NodeID(b.GetFromNodeId())
		if t.isBlocked(from) {
			continue
		}
		if t.cfg.OnReceive != nil {
			if err := t.cfg.OnReceive(from); err != nil {
				return err
			}
		}
		if err := t.recv.Deliver(from, b.GetMessages()); err != nil {
			return err
		}
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

// SendSnapshot implements multiraft.Transport.
func (t *Transport) SendSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.Snapshot, done func(ok bool)) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := t.sendSnapshot(toNode, shard, m, snap)
		if err != nil {
			t.log.Warn("snapshot send failed", "shard", shard, "to_node", toNode, "err", err)
		}
		done(err == nil)
	}()
}

func (t *Transport) sendSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap storage.SnapshotSource) error {
	if t.isBlocked(toNode) {
		return errors.New("peer blocked")
	}
	p, err := t.peer(toNode)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
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
		if size < t.cfg.SnapshotChunkBytes {
			return nil
		}
		if err := s.Send(chunk); err != nil {
			return err
		}
		sent += len(chunk.Kvs)
		chunk, size = &concordpb.SnapshotChunk{ShardId: uint64(shard)}, 0
		return nil
	})
	if err != nil {
		return err
	}
	chunk.Done = true
	if err := s.Send(chunk); err != nil {
		return err
	}
	ack, err := s.CloseAndRecv()
	if err != nil {
		return err
	}
	if !ack.GetApplied() {
		return errors.New("receiver did not take the snapshot")
	}
	t.log.Info("snapshot sent", "shard", shard, "to_node", toNode, "keys", sent+len(chunk.Kvs))
	return nil
}

// SendSnapshot implements the RaftTransport service: one incoming snapshot.
func (srv *Server) SendSnapshot(s grpc.ClientStreamingServer[concordpb.SnapshotChunk, concordpb.SnapshotAck]) error {
	t := srv.t
	first, err := s.Recv()
	if err != nil {
		return err
	}
	if err := t.checkHeader(first.GetClusterId(), ids.NodeID(first.GetToNodeId())); err != nil {
		return err
	}
	from, shard := ids.NodeID(first.GetFromNodeId()), ids.ShardID(first.GetShardId())
	if t.isBlocked(from) {
		return errors.New("transport: peer blocked")
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(first.GetRaftMessage(), m); err != nil || m.GetType() != pb.MsgSnap {
		return fmt.Errorf("transport: snapshot stream must start with a MsgSnap (%v)", err)
	}
	staged, err := t.receiveSnapshotData(s, first, shard)
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
// others).
func (t *Transport) receiveSnapshotData(s grpc.ClientStreamingServer[concordpb.SnapshotChunk, concordpb.SnapshotAck],
	chunk *concordpb.SnapshotChunk, shard ids.ShardID) (*storage.StagedSnapshot, error) {
	w, err := t.sink.NewSnapshotWriter(shard)
	if err != nil {
		return nil, err
	}
	for {
		for _, kv := range chunk.GetKvs() {
			if err := w.Set(kv.GetKey(), kv.GetValue()); err != nil {
				w.Abort()
				return nil, fmt.Errorf("transport: %w", err)
			}
		}
		if chunk.GetDone() {
			break
		}
		if chunk, err = s.Recv(); err != nil {
			w.Abort()
			return nil, err
		}
		if ids.ShardID(chunk.GetShardId()) != shard {
			w.Abort()
			return nil, fmt.Errorf("transport: snapshot chunk for shard %d in a stream for shard %d", chunk.GetShardId(), shard)
		}
	}
	return w.Finish()
}
