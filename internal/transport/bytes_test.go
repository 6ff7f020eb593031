package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// gatedRecorder is a Receiver that records batches and, while gate is
// closed, holds every batch carrying a MsgApp inside Deliver: a receiver
// busy with bulk appends.
type gatedRecorder struct {
	recorder
	gate    chan struct{} // closed: appends pass
	holding chan struct{} // receives once an append batch is held
}

func (r *gatedRecorder) Deliver(ctx context.Context, from ids.NodeID, envs []*concordpb.RaftEnvelope) error {
	for _, e := range envs {
		if msgType(e) == pb.MsgApp {
			select {
			case r.holding <- struct{}{}:
			default:
			}
			<-r.gate
			break
		}
	}
	return r.recorder.Deliver(ctx, from, envs)
}

func msgType(e *concordpb.RaftEnvelope) pb.MessageType {
	var m pb.Message
	if err := proto.Unmarshal(e.GetMessage(), &m); err != nil {
		return -1
	}
	return m.GetType()
}

// sender returns node 1's transport, configured by cfg, and starts node 2's
// receiving server with recv.
func sender(t *testing.T, cfg Config, recv Receiver) (a *Transport, aRecv *recorder) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// Node 2 knows node 1: the raft port refuses streams from unknown senders.
	b := New(Config{ClusterID: 7, NodeID: 2, Resolve: func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }}, nil)
	b.SetReceiver(recv)
	stop := serve(l, b)
	cfg.ClusterID, cfg.NodeID = 7, 1
	cfg.Resolve = func(n ids.NodeID) (string, bool) { return addr, n == 2 }
	a = New(cfg, nil)
	aRecv = &recorder{}
	a.SetReceiver(aRecv)
	t.Cleanup(func() { a.Stop(); stop(); b.Stop() })
	return a, aRecv
}

// appendOf returns a MsgApp carrying one entry of n bytes.
func appendOf(n int) *pb.Message {
	return &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		Entries: []*pb.Entry{{Index: new(uint64(1)), Term: new(uint64(3)), Data: bytes.Repeat([]byte{'x'}, n)}}}
}

// TestBatchesSplitByBytes protects the wire limit: no RaftBatch carries more
// than MaxBatchBytes, except a single message that is larger on its own,
// which still goes (alone). Before, batches were split by count only, and a
// Ready's worth of appends (hundreds of MiB) made a RaftBatch over the gRPC
// limit, which ended the stream and dropped everything queued.
func TestBatchesSplitByBytes(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) { testBatchesSplitByBytes(t, wire) })
	}
}

func testBatchesSplitByBytes(t *testing.T, wire string) {
	recv := &recorder{}
	a, _ := sender(t, Config{MaxBatchBytes: 1 << 20, Wire: wire}, recv)
	const small, big = 40, 3 << 20
	for range small {
		a.Send(2, 1, appendOf(256<<10))
	}
	a.Send(2, 1, appendOf(big))
	a.Flush()
	waitFor(t, "every append", func() bool { return recv.messages() == small+1 })
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for i, b := range recv.batches {
		size := 0
		for _, e := range b {
			size += envelopeBytes(e)
		}
		if size > 1<<20 && len(b) > 1 {
			t.Errorf("batch %d: %d messages, %d bytes; the limit is %d", i, len(b), size, 1<<20)
		}
	}
	t.Logf("%d appends (10 MiB + 3 MiB) arrived in %d batches", small+1, len(recv.batches))
}

// TestQueueBoundedInBytes protects memory and backpressure: a lane's queue
// takes at most QueueBytes (a message larger than that only into an empty
// queue); beyond it Send drops and reports the peer unreachable. The control
// lane has its own bound, so a full bulk queue never refuses a heartbeat.
func TestQueueBoundedInBytes(t *testing.T) {
	recv := &recorder{}
	a, aRecv := sender(t, Config{QueueBytes: 1 << 20}, recv)
	p, err := a.peer(2)
	if err != nil {
		t.Fatal(err)
	}
	close(p.stopC) // keep the senders from draining the queues
	a.Send(2, 1, appendOf(2<<20))
	if got := p.bulk.take().msgs; got != 1 {
		t.Fatalf("a 2 MiB message into an empty 1 MiB queue: %d queued, want 1 (it must go alone, not never)", got)
	}
	for range 10 {
		a.Send(2, 1, appendOf(256<<10))
	}
	a.Send(2, 1, heartbeat(2))
	p.bulk.mu.Lock()
	n, queued := p.bulk.q.msgs, p.bulk.q.bytes
	p.bulk.mu.Unlock()
	if queued > 1<<20 || n >= 10 {
		t.Errorf("bulk queue holds %d messages, %d bytes; the limit is %d bytes", n, queued, 1<<20)
	}
	aRecv.mu.Lock()
	unreachable := aRecv.unreachable[2]
	aRecv.mu.Unlock()
	if unreachable == 0 {
		t.Error("a queue over its byte limit did not report the peer unreachable")
	}
	if !p.control.hasPending() {
		t.Error("a full bulk queue refused a heartbeat")
	}
	t.Logf("queued %d of 10 appends of 256 KiB (%d bytes); peer reported unreachable %d times", n, queued, unreachable)
}

// TestControlOvertakesAppends protects liveness: a heartbeat sent after
// appends arrives while the receiver is still busy with the appends. Before,
// one stream carried both, so control traffic waited behind every byte of
// appends queued before it, and a catching-up follower's answers came too
// late for its leader's CheckQuorum.
func TestControlOvertakesAppends(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) { testControlOvertakesAppends(t, wire) })
	}
}

func testControlOvertakesAppends(t *testing.T, wire string) {
	recv := &gatedRecorder{gate: make(chan struct{}), holding: make(chan struct{}, 1)}
	defer close(recv.gate)
	a, _ := sender(t, Config{Wire: wire}, recv)
	for range 4 {
		a.Send(2, 1, appendOf(64<<10))
	}
	a.Flush()
	select {
	case <-recv.holding:
	case <-time.After(5 * time.Second):
		t.Fatal("the appends never reached the receiver")
	}
	for range 4 {
		a.Send(2, 1, appendOf(64<<10)) // more appends, queued before the heartbeat
	}
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "the heartbeat, while the appends are held", func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for _, b := range recv.batches {
			for _, e := range b {
				if msgType(e) == pb.MsgHeartbeat {
					return true
				}
			}
		}
		return false
	})
}

// flakyServer accepts each stream, reads one batch, and ends the stream with
// an error: a peer whose streams work, then break.
type flakyServer struct {
	concordpb.UnimplementedRaftTransportServer
	mu      sync.Mutex
	batches int
}

func (f *flakyServer) Send(s grpc.ClientStreamingServer[concordpb.RaftBatch, concordpb.RaftAck]) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	f.mu.Lock()
	f.batches++
	f.mu.Unlock()
	return errors.New("flaky")
}

// serveTCP is flakyServer on the framed wire: it reads each connection's
// hello and first frame of messages, then closes it.
func (f *flakyServer) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			fr := newFrameReader(c, 1<<20)
			if _, err := readHello(fr); err != nil {
				return
			}
			// The first batch of messages, past the keepalives (the
			// one after the hello, at least).
			for b := (&concordpb.RaftBatch{}); len(b.GetMessages()) == 0; {
				if err := fr.Next(b); err != nil {
					return
				}
			}
			f.mu.Lock()
			f.batches++
			f.mu.Unlock()
		}()
	}
}

// TestBackoffResetsAfterStream protects reconnection: the backoff doubles
// while streams fail without sending, and starts over from its minimum after
// a stream that sent a batch. Before, it only grew, so after a few failures
// anywhere in a node's life every later break cost a full second.
func TestBackoffResetsAfterStream(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) { testBackoffResetsAfterStream(t, wire) })
	}
}

func testBackoffResetsAfterStream(t *testing.T, wire string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyServer{}
	if wire == WireGRPC {
		srv := grpc.NewServer()
		concordpb.RegisterRaftTransportServer(srv, flaky)
		go srv.Serve(l)
		defer srv.Stop()
	} else {
		go flaky.serveTCP(l)
		defer l.Close()
	}
	addr := l.Addr().String()
	a := New(Config{ClusterID: 7, NodeID: 1, Wire: wire, Resolve: func(ids.NodeID) (string, bool) { return addr, true }}, nil)
	a.SetReceiver(&recorder{})
	var mu sync.Mutex
	var waits []time.Duration
	a.after = func(d time.Duration) <-chan time.Time {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return time.After(time.Millisecond)
	}
	defer a.Stop()
	// Every stream sends a batch and then breaks: each wait is the minimum.
	waitFor(t, "5 broken streams", func() bool {
		a.Send(2, 1, appendOf(10))
		a.Flush()
		mu.Lock()
		defer mu.Unlock()
		return len(waits) >= 5
	})
	mu.Lock()
	defer mu.Unlock()
	for i, d := range waits {
		if d != minBackoff {
			t.Fatalf("wait %d after a stream that sent: %v, want %v (all waits: %v)", i, d, minBackoff, waits)
		}
	}
	flaky.mu.Lock()
	defer flaky.mu.Unlock()
	t.Logf("waits %v; %d batches reached the flaky peer", waits, flaky.batches)
}

// TestBackoffGrowsWhileFailing: streams that never send back off further
// each time (50 ms, 100 ms, …), up to maxBackoff.
func TestBackoffGrowsWhileFailing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: every stream fails without sending
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: func(ids.NodeID) (string, bool) { return addr, true }}, nil)
	a.SetReceiver(&recorder{})
	waitsC := make(chan time.Duration, 100)
	a.after = func(d time.Duration) <-chan time.Time {
		select {
		case waitsC <- d:
		default:
		}
		return time.After(time.Millisecond)
	}
	defer a.Stop()
	a.Send(2, 1, heartbeat(2))
	// Both lanes fail on their own, so their waits interleave: count them.
	seen := map[time.Duration]int{}
	for n := 0; seen[maxBackoff] < 2; n++ {
		select {
		case d := <-waitsC:
			if d > maxBackoff {
				t.Fatalf("wait %v over the cap %v", d, maxBackoff)
			}
			seen[d]++
		case <-time.After(10 * time.Second):
			t.Fatalf("no wait reached %v after %d waits: %v", maxBackoff, n, seen)
		}
	}
	for d := minBackoff; d < maxBackoff; d *= 2 {
		if seen[d] != 2 {
			t.Errorf("%d waits of %v, want one per lane (waits: %v)", seen[d], d, seen)
		}
	}
}
