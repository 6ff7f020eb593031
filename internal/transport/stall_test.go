package transport

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// TestStalledPeerGetsEverythingSentAfter protects the framed wire across a
// peer that stops reading for longer than a write may take (a paused
// process): the blocked lane's write times out, it drops its queue and
// reconnects, and once the peer reads again every message sent from then
// on must arrive, on both lanes. The lanes build their frames in place and
// reuse the buffer they wrote (lane.go): a partly written buffer reused, a
// frame left open or a lane never woken again would lose them.
func TestStalledPeerGetsEverythingSentAfter(t *testing.T) {
	b := receiverNode(t)
	px := newStallProxy(t, b.addr)
	// Node 1 sends to node 2 through the proxy. A small queue keeps what
	// piles up during the stall, and so what follows it, small.
	a := New(Config{ClusterID: 7, NodeID: 1, QueueBytes: 4 << 20,
		Resolve: func(n ids.NodeID) (string, bool) { return px.addr(), n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	a.writeWait = writeWaitInTest
	t.Cleanup(a.Stop)

	px.stall()
	big := bytes.Repeat([]byte{1}, 1<<20)
	// Two lanes connect (2 accepts); each reconnection of the bulk lane,
	// after a write that timed out, is one more.
	waitFor(t, "the stalled bulk lane to time out and reconnect twice", func() bool {
		a.Send(2, 1, appMsg(1, big))
		a.Flush()
		return px.accepts.Load() >= 4
	})
	px.resume()
	// What the writer took before the resume may still time out; wait
	// until both lanes hold nothing queued, so that the queue has room.
	waitFor(t, "the lanes to drain", func() bool { return !a.pending(2) })

	const n = 20
	want := map[uint64]bool{}
	for i := range uint64(n) {
		hb := heartbeat(2)
		hb.Commit = new(1000 + i) // control lane
		a.Send(2, 1, hb)
		a.Send(2, 1, appMsg(5000+i, []byte("small"))) // bulk lane
		want[1000+i], want[5000+i] = true, true
		if i%5 == 4 {
			a.Flush()
		}
	}
	waitFor(t, "every message sent after the stall to arrive", func() bool {
		for tag := range b.recv.tags(t) {
			delete(want, tag)
		}
		return len(want) == 0
	})
}

// writeWaitInTest is the write timeout of the stall test: short, so that the
// test takes little time, and long against one write to a reading peer.
const writeWaitInTest = 300 * time.Millisecond

// pending reports whether either lane to node has messages queued.
func (t *Transport) pending(node ids.NodeID) bool {
	t.mu.Lock()
	p := t.peers[node]
	t.mu.Unlock()
	return p != nil && (p.control.hasPending() || p.bulk.hasPending())
}

// appMsg is a MsgApp of one entry of data at index.
func appMsg(index uint64, data []byte) *pb.Message {
	return &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		Index: new(index), Entries: []*pb.Entry{{Term: new(uint64(3)), Index: new(index + 1), Data: data}}}
}

// tags returns the tag of every message received: a heartbeat's commit, an
// append's index.
func (r *recorder) tags(t *testing.T) map[uint64]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint64]bool{}
	for _, batch := range r.batches {
		for _, env := range batch {
			if len(env.GetMessage()) > 64<<10 {
				continue // the stall's filler, untagged: not worth decoding on every poll
			}
			m := &pb.Message{}
			if err := proto.Unmarshal(env.GetMessage(), m); err != nil {
				t.Errorf("a received message does not decode: %v", err)
				continue
			}
			switch m.GetType() {
			case pb.MsgHeartbeat:
				out[m.GetCommit()] = true
			case pb.MsgApp:
				out[m.GetIndex()] = true
			}
		}
	}
	return out
}

// receiverNode starts node 2's transport, serving on its own port; it
// knows node 1 (the sender) but never sends.
func receiverNode(t *testing.T) *endpoint {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := New(Config{ClusterID: 7, NodeID: 2,
		Resolve: func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }}, eng)
	rec := &recorder{}
	tr.SetReceiver(rec)
	stop := serve(l, tr)
	t.Cleanup(func() { stop(); tr.Stop(); eng.Close() })
	return &endpoint{t: tr, recv: rec, addr: l.Addr().String(), eng: eng}
}

// stallProxy forwards connections to a target, and while stalled reads
// nothing from them: to the sender, a peer that stopped reading.
type stallProxy struct {
	l       net.Listener
	target  string
	accepts atomic.Int32
	done    chan struct{}

	mu   sync.Mutex
	gate chan struct{} // guarded by mu: closed while the proxy reads
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: target, done: make(chan struct{}), gate: make(chan struct{})}
	close(p.gate)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepts.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.pipe(c)
			}()
		}
	}()
	t.Cleanup(func() { close(p.done); l.Close(); wg.Wait() })
	return p
}

func (p *stallProxy) addr() string { return p.l.Addr().String() }

// pipe copies c to a new connection to the target, pausing while stalled,
// until either side ends or the proxy closes.
func (p *stallProxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	go func() { <-p.done; _ = c.Close(); _ = up.Close() }()
	go func() { _, _ = io.Copy(c, up) }() // the receiver never writes; this notices its end
	defer func() { _ = c.Close(); _ = up.Close() }()
	buf := make([]byte, 64<<10)
	for {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		select {
		case <-gate:
		case <-p.done:
			return
		}
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.gate)
}
