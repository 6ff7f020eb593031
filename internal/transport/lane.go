package transport

import (
	"encoding/binary"
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/concord-kv/concord/internal/raftwire"
)

// lane is one of a peer's queues, drained by its own goroutine into its own
// stream.
//
// The queue is the lane's frames themselves, as the framed wire carries
// them (frame.go): Send encodes each message, inside its RaftEnvelope,
// straight onto the last frame, and the lane's goroutine writes the
// buffer as it is. Before, every message was marshalled by proto into bytes
// of its own, wrapped in an envelope (two allocations per message), and
// the batch marshalled again into the frame; with about 8 messages per
// shard batch that was a visible share of a put's CPU (docs/benchmarks.md,
// "Sending a raft message"). Two queues' buffers take turns: the writer
// hands the one it wrote back as the next spare.
type lane struct {
	name string
	// header opens every frame's RaftBatch: the cluster, sender and
	// receiver fields, the same for all of the lane's frames.
	header []byte

	mu    sync.Mutex
	q     frameQueue // guarded by mu: queued, not yet handed to the stream
	spare frameQueue // guarded by mu: empty, buffers to reuse

	// wakeC tells the lane's goroutine that q has messages.
	wakeC chan struct{}
}

// frameQueue is a run of complete frames: each a length, then a RaftBatch
// of the lane's header and envelopes. Its last frame is open: a message
// that fits (maxBatch messages, Config.MaxBatchBytes bytes) joins it.
type frameQueue struct {
	buf    []byte
	counts []int // messages in each frame of buf
	// open is the offset in buf of the last frame; openBytes the
	// envelopeBytes of its messages, openOverhead what they will hold
	// decoded beyond that (raftwire.Overhead).
	open, openBytes, openOverhead int
	// msgs and bytes are the queue's messages and their envelopeBytes.
	msgs, bytes int
}

func (t *Transport) newLane(name string, header []byte) *lane {
	return &lane{name: name, header: header, wakeC: make(chan struct{}, 1)}
}

// batchHeader is the start of every RaftBatch to node: its scalar fields.
func (t *Transport) batchHeader(node uint64) []byte {
	var b []byte
	for i, v := range []uint64{t.cfg.ClusterID, uint64(t.cfg.NodeID), node} {
		if v != 0 { // proto3: a zero scalar is not written
			b = protowire.AppendTag(b, protowire.Number(i+1), protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	return b
}

// keepalive is a frame of no messages, just the lane's header: what an
// idle connection carries to stay open (keepaliveInterval).
func (l *lane) keepalive() []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(l.header))), l.header...)
}

func (l *lane) wake() {
	select {
	case l.wakeC <- struct{}{}:
	default:
	}
}

// Field numbers of concordpb.RaftBatch.messages and RaftEnvelope's fields
// (raft.proto); TestEnvelopeFieldNumbers checks them.
const (
	batchMessagesField = 4
	envShardField      = 1
	envMessageField    = 2
)

// outMsg is one message to queue: encoded by raftwire (data nil, size
// from raftwire.Size) or, for the rare message raftwire does not take,
// already marshalled by proto into data.
type outMsg struct {
	shard uint64
	m     *pb.Message
	data  []byte
	size  int
	// overhead is what m holds decoded at the receiver beyond its bytes
	// (raftwire.Overhead): a frame's total must stay within the
	// receiver's budget (Transport.checkDecodedSize).
	overhead int
}

// push queues o unless the queue is full (queueLen messages, or
// queueBytes, which a message larger on its own still gets into an empty
// queue). It opens a new frame when o would take the last one past
// maxBatch messages, maxBatchBytes bytes or maxOverhead decoded. It
// returns the queue's messages and bytes after.
func (l *lane) push(o outMsg, queueLen, queueBytes, maxBatchBytes, maxOverhead int) (full bool, n, queued int) {
	size := o.size + envelopeOverhead
	l.mu.Lock()
	defer l.mu.Unlock()
	q := &l.q
	if q.msgs >= queueLen || (q.msgs > 0 && q.bytes+size > queueBytes) {
		return true, q.msgs, q.bytes
	}
	if last := len(q.counts) - 1; last < 0 || q.counts[last] >= maxBatch ||
		(q.counts[last] > 0 && (q.openBytes+size > maxBatchBytes || q.openOverhead+o.overhead > maxOverhead)) {
		q.open, q.openBytes, q.openOverhead = len(q.buf), 0, 0
		q.buf = append(append(q.buf, 0, 0, 0, 0), l.header...)
		q.counts = append(q.counts, 0)
	}
	q.buf = appendEnvelope(q.buf, o)
	q.counts[len(q.counts)-1]++
	q.openBytes += size
	q.openOverhead += o.overhead
	q.msgs++
	q.bytes += size
	binary.BigEndian.PutUint32(q.buf[q.open:], uint32(len(q.buf)-q.open-frameHeader))
	return false, q.msgs, q.bytes
}

// appendEnvelope appends o as a RaftBatch's messages field: a RaftEnvelope
// of its shard and message bytes, encoded as proto.Marshal would.
func appendEnvelope(buf []byte, o outMsg) []byte {
	n := 0
	if o.shard != 0 {
		n += 1 + protowire.SizeVarint(o.shard)
	}
	if o.size > 0 { // proto3: empty bytes are not written
		n += 1 + protowire.SizeBytes(o.size)
	}
	buf = append(buf, batchMessagesField<<3|byte(protowire.BytesType))
	buf = protowire.AppendVarint(buf, uint64(n))
	if o.shard != 0 {
		buf = append(buf, envShardField<<3|byte(protowire.VarintType))
		buf = protowire.AppendVarint(buf, o.shard)
	}
	if o.size == 0 {
		return buf
	}
	buf = append(buf, envMessageField<<3|byte(protowire.BytesType))
	buf = protowire.AppendVarint(buf, uint64(o.size))
	if o.data != nil {
		return append(buf, o.data...)
	}
	return raftwire.Append(buf, o.m)
}

// take removes and returns everything queued.
func (l *lane) take() frameQueue {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.q
	l.q = frameQueue{buf: l.spare.buf[:0], counts: l.spare.counts[:0]}
	l.spare = frameQueue{}
	return q
}

// recycle keeps the buffers of a queue that was written, for the next
// take; not a rare large one's.
func (l *lane) recycle(q frameQueue) {
	if cap(q.buf) > keepFrameBuf {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spare = frameQueue{buf: q.buf[:0], counts: q.counts[:0]}
}

// drop empties the queue.
func (l *lane) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cap(l.q.buf) > keepFrameBuf {
		l.q = frameQueue{}
		return
	}
	l.q = frameQueue{buf: l.q.buf[:0], counts: l.q.counts[:0]}
}

func (l *lane) hasPending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.q.msgs > 0
}

// frames calls f with each frame of q: its RaftBatch bytes and messages.
func (q *frameQueue) frames(f func(batch []byte, msgs int) error) error {
	off := 0
	for _, n := range q.counts {
		size := int(binary.BigEndian.Uint32(q.buf[off:]))
		if err := f(q.buf[off+frameHeader:off+frameHeader+size], n); err != nil {
			return err
		}
		off += frameHeader + size
	}
	return nil
}
