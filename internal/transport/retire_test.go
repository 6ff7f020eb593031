package transport

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/ids"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// book is an address book a test changes under a running transport.
type book struct {
	mu sync.Mutex
	m  map[ids.NodeID]string
}

func (b *book) resolve(n ids.NodeID) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.m[n]
	return a, ok
}

func (b *book) remove(n ids.NodeID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, n)
}

func hasPeer(tr *Transport, node ids.NodeID) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.peers[node] != nil
}

// TestRemovedNodeGetsNoTraffic protects a new node at a removed node's
// address: once the address book no longer lists node 3 (removed), the
// lanes made for it stop redialling its old address, where node 5 now
// listens and refuses every connection ("message for node 3 reached node
// 5"; the operator saw 6 a second, two lanes of each of three peers).
func TestRemovedNodeGetsNoTraffic(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	newNode := New(Config{ClusterID: 7, NodeID: 5,
		Resolve: func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }}, nil)
	newNode.SetReceiver(&recorder{})
	stop := serve(cl, newNode)
	t.Cleanup(func() { stop(); newNode.Stop() })

	bk := &book{m: map[ids.NodeID]string{3: l.Addr().String()}}
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: bk.resolve}, nil)
	a.SetReceiver(&recorder{})
	a.after = func(time.Duration) <-chan time.Time { return time.After(5 * time.Millisecond) }
	t.Cleanup(a.Stop)

	a.Send(3, 1, heartbeat(3))
	a.Flush()
	waitFor(t, "node 1's lanes to dial node 3's old address", func() bool { return cl.n.Load() >= 4 })
	bk.remove(3)
	waitFor(t, "node 1 to drop its peer for removed node 3", func() bool { return !hasPeer(a, 3) })
	before := cl.n.Load()
	time.Sleep(200 * time.Millisecond) // absence cannot be polled: 40 reconnect backoffs
	// A lane that was dialling when the peer went may finish that dial.
	if n := cl.n.Load() - before; n > 2 {
		t.Fatalf("node 1 dialled removed node 3's old address %d times after dropping it", n)
	}
	a.Send(3, 1, heartbeat(3))
	a.Flush()
	if hasPeer(a, 3) {
		t.Fatal("a message for removed node 3 made a peer for it again")
	}
}

// TestRemovedPeerConnectionEnds protects a removed node's peers: a lane
// connected to a node that the address book drops ends its connection
// at its next keepalive instead of keeping it open.
func TestRemovedPeerConnectionEnds(t *testing.T) {
	b, addr, _ := receiverWith(t, Config{}, nil) // node 2, which knows node 1
	bk := &book{m: map[ids.NodeID]string{2: addr}}
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: bk.resolve}, nil)
	a.SetReceiver(&recorder{})
	a.keepaliveWait = 10 * time.Millisecond
	t.Cleanup(a.Stop)

	a.Send(2, 1, heartbeat(2))
	a.Flush()
	inbound := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.conns)
	}
	waitFor(t, "node 1's two lanes connected to node 2", func() bool { return inbound() == 2 })
	bk.remove(2)
	waitFor(t, "node 1 to drop its peer for removed node 2", func() bool { return !hasPeer(a, 2) })
	waitFor(t, "node 1's connections to removed node 2 closed", func() bool { return inbound() == 0 })
}
