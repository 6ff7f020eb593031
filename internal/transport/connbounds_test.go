package transport

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// tracked is how many framed connections t serves.
func (t *Transport) tracked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// TestIdleRaftConnClosed (found by review): past its hello a framed
// connection had no read deadline, so a peer that stalled (or vanished
// without a FIN) held a receiver's goroutine and buffers for ever. One
// that has sent a keepalive and then sends nothing, or stops inside a
// frame, is now closed once idle for idleWait.
func TestIdleRaftConnClosed(t *testing.T) {
	const idle = 200 * time.Millisecond
	b, addr, rec := receiverWith(t, Config{}, func(b *Transport) { b.idleWait, b.quietWait = idle, time.Hour })
	closedByPeer(t, rawConn(t, addr, frames(t, "", testBatch(t))), "silent after a keepalive")
	half := frames(t, "", testBatch(t), testBatch(t, 1))
	closedByPeer(t, rawConn(t, addr, half[:len(half)-3]), "stalled inside a frame")
	waitFor(t, "both connections untracked", func() bool { return b.tracked() == 0 })
	if n := rec.messages(); n != 0 {
		t.Fatalf("%d messages delivered from a stalled frame", n)
	}
}

// TestQuietConnWithoutKeepalivesBounded: a connection that has sent no
// keepalive (a sender from before them, or one that says its hello and
// then nothing) is held to quietWait instead; it too ends.
func TestQuietConnWithoutKeepalivesBounded(t *testing.T) {
	const quiet = 300 * time.Millisecond
	b, addr, _ := receiverWith(t, Config{}, func(b *Transport) { b.idleWait, b.quietWait = time.Hour, quiet })
	closedByPeer(t, rawConn(t, addr, frames(t, "")), "silent after its hello")
	waitFor(t, "the connection untracked", func() bool { return b.tracked() == 0 })
}

// TestOldSenderQuietLaneKept (rolling upgrade): a sender from before
// keepalives sends none, so the receiver's idle deadline closed its quiet
// lanes every idleWait, and each close made the old sender report this
// node unreachable to raft and redial. Until a connection carries a
// keepalive it is not held to idleWait: many idle periods after its last
// frame it is still open and still delivers.
func TestOldSenderQuietLaneKept(t *testing.T) {
	const idle = 100 * time.Millisecond
	b, addr, rec := receiverWith(t, Config{}, func(b *Transport) { b.idleWait, b.quietWait = idle, time.Hour })
	hb := testBatch(t)
	hb.Messages = []*concordpb.RaftEnvelope{{ShardId: 1, Message: mustMarshalMsg(t, heartbeat(2))}}
	c := rawConn(t, addr, frames(t, "", hb)) // an old sender: hello, a frame, no keepalive
	waitFor(t, "the old sender's heartbeat", func() bool { return rec.messages() == 1 })
	// The receiver closing c is what this waits for; ten idle periods
	// without it pass the test.
	_ = c.SetReadDeadline(time.Now().Add(10 * idle))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the receiver closed an old sender's quiet lane: %v", err)
	}
	frame, err := appendFrame(nil, hb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a heartbeat after the quiet spell", func() bool { return rec.messages() == 2 })
	if got := b.tracked(); got != 1 {
		t.Fatalf("the receiver serves %d connections, want the old sender's one", got)
	}
}

// TestSenderKeepaliveFollowsHello: a lane's connection carries a
// keepalive right after its hello, not only keepaliveWait later, so
// that the receiver holds it to idleWait from the start (a receiver
// treats a connection without one as an old sender's).
func TestSenderKeepaliveFollowsHello(t *testing.T) {
	b, addr, _ := receiverWith(t, Config{}, nil)
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.keepaliveWait = time.Hour
	a.SetReceiver(&recorder{})
	defer a.Stop()
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "a keepalive on each lane right after the hello", func() bool { return b.keepalives.Load() >= 2 })
}

// TestQuietLaneOutlivesIdleDeadline: the idle deadline never closes a
// live sender's connections, though a quiet cluster sends no raft
// messages on them (a bulk lane carries nothing without writes): each lane
// sends a keepalive frame every keepaliveWait. Many idle periods later the
// sender has seen no connection fail (it would report the peer
// unreachable), and a message still goes through.
func TestQuietLaneOutlivesIdleDeadline(t *testing.T) {
	const idle = 600 * time.Millisecond
	b, addr, rec := receiverWith(t, Config{}, func(b *Transport) { b.idleWait = idle })
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.keepaliveWait = idle / 20 // the margin of production's 5, for a loaded test machine
	aRecv := &recorder{}
	a.SetReceiver(aRecv)
	defer a.Stop()
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "the heartbeat", func() bool { return rec.messages() == 1 })
	// Two lanes, a keepalive each every idle/20: 120 of them span at
	// least three idle periods.
	waitFor(t, "keepalives over three idle periods", func() bool { return b.keepalives.Load() >= 120 })
	aRecv.mu.Lock()
	n := aRecv.unreachable[2]
	aRecv.mu.Unlock()
	if n != 0 {
		t.Fatalf("an idle connection failed %d times: the receiver closed a live lane", n)
	}
	if got := b.tracked(); got != 2 {
		t.Fatalf("the receiver serves %d connections, want the sender's two lanes", got)
	}
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "a heartbeat after the quiet spell", func() bool { return rec.messages() == 2 })
	if n := rec.messages(); n != 2 {
		t.Fatalf("%d messages delivered; keepalives must deliver none", n)
	}
}

// TestInboundRaftConnsBounded (found by review): nothing bounded the
// framed connections a node serves, each a goroutine and up to a frame's
// buffers. Past MaxInboundConns of connections that have carried an
// accepted frame (a keepalive here), a new connection is closed at once;
// once one closes, a new one is served again.
func TestInboundRaftConnsBounded(t *testing.T) {
	b, addr, rec := receiverWith(t, Config{MaxInboundConns: 2}, nil)
	first := rawConn(t, addr, frames(t, "", testBatch(t)))
	rawConn(t, addr, frames(t, "", testBatch(t)))
	waitFor(t, "two connections served, each past a keepalive", func() bool { return b.tracked() == 2 && b.unprovenConns() == 0 })
	good := testBatch(t)
	good.Messages = []*concordpb.RaftEnvelope{{ShardId: 1, Message: mustMarshalMsg(t, heartbeat(2))}}
	closedByPeer(t, rawConn(t, addr, frames(t, "", good)), "a third connection")
	if n := rec.messages(); n != 0 {
		t.Fatalf("%d messages delivered over a connection past the bound", n)
	}
	first.Close()
	waitFor(t, "the closed connection untracked", func() bool { return b.tracked() == 1 })
	rawConn(t, addr, frames(t, "", good))
	waitFor(t, "a frame on a connection within the bound", func() bool { return rec.messages() == 1 })
}

// inHello is how many framed connections t has in their hello.
func (t *Transport) inHello() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.greeting)
}

// TestSilentConnsCannotKeepPeerOut (found by review): a connection took
// one of the MaxInboundConns slots before its hello and held it for the
// whole hello deadline (10 s), so anyone who could reach the port kept
// real peers out with connections that send the magic and then nothing.
// Those now hold slots of their own (MaxHelloConns), and one more pushes
// the oldest out: a real peer is served at once while the slots are full
// of silent connections that may stay for a minute, and they stay bounded.
func TestSilentConnsCannotKeepPeerOut(t *testing.T) {
	const slots = 4
	b, addr, rec := receiverWith(t, Config{MaxHelloConns: slots, MaxInboundConns: slots},
		func(b *Transport) { b.helloWait = time.Minute })
	var silent []net.Conn
	for range 3 * slots {
		silent = append(silent, rawConn(t, addr, Magic))
	}
	waitFor(t, "the hello slots full", func() bool { return b.inHello() == slots })
	// Every silent connection taken in before the real peer dials: 2*slots
	// of them pushed out by later ones, the last slots holding the hello
	// slots. Under load the accept loop could otherwise still be taking
	// silent connections as the peer's lanes came, each pushing the then
	// oldest out (the peer's too: it redialled with backoff).
	closed := map[net.Conn]bool{}
	waitFor(t, "the silent connections past the slots pushed out", func() bool { return closedSoFar(silent, closed) == 2*slots })
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	defer a.Stop()
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "the real peer's heartbeat", func() bool { return rec.messages() == 1 })
	waitFor(t, "the real peer's two lanes served", func() bool { return b.tracked() == 2 })
	if n := b.inHello(); n > slots {
		t.Fatalf("%d connections in their hello, at most %d", n, slots)
	}
	waitFor(t, "a silent connection pushed out by the peer's", func() bool { return closedSoFar(silent, closed) > 2*slots })
}

// closedSoFar counts the connections of cs the other end has closed,
// recording them in closed; it waits at most a millisecond on each open one.
func closedSoFar(cs []net.Conn, closed map[net.Conn]bool) int {
	for _, c := range cs {
		if closed[c] {
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var one [1]byte
		var ne net.Error
		if _, err := c.Read(one[:]); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			closed[c] = true
		}
	}
	return len(closed)
}

// TestSilentConnClosedAfterHelloWait: a connection that sends the magic
// and nothing more is closed after helloReadTimeout (2 s), not the 10 s
// it had, so it holds a hello slot only briefly.
func TestSilentConnClosedAfterHelloWait(t *testing.T) {
	b, addr, _ := receiverWith(t, Config{}, nil)
	start := time.Now()
	closedByPeer(t, rawConn(t, addr, Magic), "silent in its hello")
	if d := time.Since(start); d > helloReadTimeout+2*time.Second {
		t.Fatalf("closed after %v, want about %v", d, helloReadTimeout)
	}
	waitFor(t, "the connection untracked", func() bool { return b.inHello() == 0 })
}

// unprovenConns is how many served connections have carried no accepted
// frame yet.
func (t *Transport) unprovenConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.unproven)
}

// TestHelloOnlyConnsCannotKeepPeerOut (found by review): a connection
// that said its hello (the token, or nothing without auth) and then
// nothing held one of the MaxInboundConns slots for quietWait (10 min),
// proving nothing of being a peer, so such connections kept real peers
// out once they filled the slots. Past the bound, a new connection now
// closes the oldest that has carried no accepted frame: a real peer's
// lanes are served while hello-only connections flood, and those stay
// bounded.
func TestHelloOnlyConnsCannotKeepPeerOut(t *testing.T) {
	const slots = 4
	b, addr, rec := receiverWith(t, Config{MaxInboundConns: slots}, nil)
	var silent []net.Conn
	for i := range 3 * slots {
		silent = append(silent, rawConn(t, addr, frames(t, "")))
		waitFor(t, "the hello-only connection served", func() bool { return b.tracked() == min(i+1, slots) && b.inHello() == 0 })
	}
	closedByPeer(t, silent[0], "the oldest hello-only connection")
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	defer a.Stop()
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "the real peer's heartbeat", func() bool { return rec.messages() == 1 })
	waitFor(t, "the real peer's two lanes proven", func() bool { return b.tracked() == slots && b.unprovenConns() == slots-2 })
}

// TestProvenRaftConnKeptOverNewer: a connection that has carried a frame
// of this cluster from a known node is not closed for a newer one; a
// connection whose first frame is refused (another cluster) never proves
// itself.
func TestProvenRaftConnKeptOverNewer(t *testing.T) {
	b, addr, _ := receiverWith(t, Config{MaxInboundConns: 1}, nil)
	peerConn := rawConn(t, addr, frames(t, "", testBatch(t)))
	waitFor(t, "the peer's connection proven", func() bool { return b.tracked() == 1 && b.unprovenConns() == 0 })
	closedByPeer(t, rawConn(t, addr, frames(t, "")), "a hello-only connection past the bound")
	other := testBatch(t)
	other.ClusterId = 8
	closedByPeer(t, rawConn(t, addr, frames(t, "", other)), "a connection of another cluster")
	_ = peerConn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := peerConn.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the proven connection was closed: %v", err)
	}
}
