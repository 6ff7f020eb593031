package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/portmux"
)

// receiver starts node 2's transport, serving on a port mux as a node does,
// with cfg's AuthConn; it returns its address and what it delivers.
func receiver(t *testing.T, cfg Config) (string, *recorder) {
	t.Helper()
	_, addr, rec := receiverWith(t, cfg, nil)
	return addr, rec
}

// receiverWith is receiver with the transport itself, which tune (if
// set) adjusts before it serves.
func receiverWith(t *testing.T, cfg Config, tune func(*Transport)) (*Transport, string, *recorder) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClusterID, cfg.NodeID = 7, 2
	cfg.Resolve = func(n ids.NodeID) (string, bool) { return "127.0.0.1:1", n == 1 }
	b := New(cfg, nil)
	if tune != nil {
		tune(b)
	}
	rec := &recorder{}
	b.SetReceiver(rec)
	stop := serve(l, b)
	t.Cleanup(func() { stop(); b.Stop() })
	return b, l.Addr().String(), rec
}

// rawConn opens a connection to addr and writes b on it.
func rawConn(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByPeer waits until the receiver closes c.
func closedByPeer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	// A close with unread bytes is a reset: an error, but not a timeout.
	var ne net.Error
	if _, err := io.Copy(io.Discard, c); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the receiver did not close the connection: %v", what, err)
	}
}

// TestGarbageOnRaftConnection protects the node from its port: a framed
// connection that sends garbage after the magic, an oversized frame, a
// frame that is not a batch, or a batch for another cluster is closed, and
// none of it is delivered; a well-formed connection then still is.
func TestGarbageOnRaftConnection(t *testing.T) {
	addr, rec := receiver(t, Config{})
	hb := heartbeat(2)
	good := func(cluster uint64) *concordpb.RaftBatch {
		b := testBatch(t)
		b.ClusterId = cluster
		b.Messages = []*concordpb.RaftEnvelope{{ShardId: 1, Message: mustMarshalMsg(t, hb)}}
		return b
	}
	cases := map[string][]byte{
		"bad token length": append(append([]byte(nil), Magic...), 0xff, 0xff, 1, 2, 3),
		"oversized frame":  binary.BigEndian.AppendUint32(frames(t, ""), 1<<31),
		"not a batch":      append(binary.BigEndian.AppendUint32(frames(t, ""), 8), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		"other cluster":    frames(t, "", good(8)),
	}
	for name, b := range cases {
		closedByPeer(t, rawConn(t, addr, b), name)
	}
	if n := rec.messages(); n != 0 {
		t.Fatalf("%d messages delivered from bad connections", n)
	}
	rawConn(t, addr, frames(t, "", good(7)))
	waitFor(t, "a good frame after the bad ones", func() bool { return rec.messages() == 1 })
}

// TestRaftConnectionAuth protects the port: AuthConn sees the hello's
// token, and a refused connection delivers nothing; the sender's Token
// reaches it.
func TestRaftConnectionAuth(t *testing.T) {
	auth := func(_ net.Conn, token string) error {
		if token != "s3cret" {
			return errors.New("bad token")
		}
		return nil
	}
	addr, rec := receiver(t, Config{AuthConn: auth})
	closedByPeer(t, rawConn(t, addr, frames(t, "wrong", testBatch(t, 1))), "wrong token")
	if n := rec.messages(); n != 0 {
		t.Fatalf("%d messages delivered through a refused connection", n)
	}
	a := New(Config{ClusterID: 7, NodeID: 1, Token: "s3cret", Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	defer a.Stop()
	a.Send(2, 1, heartbeat(2))
	a.Flush()
	waitFor(t, "the heartbeat over an authenticated connection", func() bool { return rec.messages() == 1 })
}

// TestStopClosesRaftConnections: Stop ends the receiving side's
// connections (and returns), so a stopped node keeps no peer attached;
// those still in their hello too.
func TestStopClosesRaftConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := New(Config{ClusterID: 7, NodeID: 2, Resolve: func(n ids.NodeID) (string, bool) { return "x:1", n == 1 }}, nil)
	b.helloWait = time.Minute
	b.SetReceiver(&recorder{})
	stop := serve(l, b)
	defer stop()
	c := rawConn(t, l.Addr().String(), frames(t, "", testBatch(t)))
	greeting := rawConn(t, l.Addr().String(), Magic)
	waitFor(t, "the connections tracked", func() bool { return b.tracked() == 1 && b.inHello() == 1 })
	b.Stop()
	closedByPeer(t, c, "after Stop")
	closedByPeer(t, greeting, "in its hello, after Stop")
}

// BenchmarkSendTCP and BenchmarkSendGRPC: one frame of 8 appends (256-byte
// entries) per Flush, from a sender to a receiver over loopback, waited
// for: the per-frame cost of each wire, both sides in this process.
func BenchmarkSendTCP(b *testing.B)  { benchmarkSend(b, WireTCP) }
func BenchmarkSendGRPC(b *testing.B) { benchmarkSend(b, WireGRPC) }

func benchmarkSend(b *testing.B, wire string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	got := make(chan struct{}, 1)
	recv := &signalRecorder{got: got}
	rx := New(Config{ClusterID: 7, NodeID: 2, Resolve: func(n ids.NodeID) (string, bool) { return "x:1", n == 1 }}, nil)
	rx.SetReceiver(recv)
	stop := serve(l, rx)
	tx := New(Config{ClusterID: 7, NodeID: 1, Wire: wire, Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	tx.SetReceiver(&recorder{})
	defer func() { tx.Stop(); stop(); rx.Stop() }()
	m := appendOf(256)
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		for range 8 {
			tx.Send(2, 1, m)
		}
		tx.Flush()
		<-got
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used (user and system, every
// thread): on a shared machine the wall time per op also counts waiting
// for a core; cpu-ns/op does not.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// signalRecorder signals every delivery.
type signalRecorder struct {
	recorder
	got chan struct{}
}

func (r *signalRecorder) Deliver(_ context.Context, _ ids.NodeID, _ []*concordpb.RaftEnvelope) error {
	r.got <- struct{}{}
	return nil
}

func mustMarshalMsg(t testing.TB, m *pb.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFallsBackToGRPCForOldPeer protects rolling upgrades: a node from
// before the framed wire has no route for its magic, so its port mux hands
// the connection to the Redis server, which answers with an error. A
// sender that hears anything on a framed connection sends that peer's raft
// messages over gRPC instead, and they arrive.
func TestFallsBackToGRPCForOldPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := New(Config{ClusterID: 7, NodeID: 2, Resolve: func(n ids.NodeID) (string, bool) { return "x:1", n == 1 }}, nil)
	rec := &recorder{}
	old.SetReceiver(rec)
	m := portmux.New(l, 5*time.Second) // no Match: the old node's mux
	srv := grpc.NewServer()
	concordpb.RegisterRaftTransportServer(srv, old.Server())
	go srv.Serve(m.GRPC())
	go func() { // a RESP server: an error for every line, the connection kept
		for {
			c, err := m.Other().Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := io.WriteString(c, "-ERR unknown command\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	go m.Serve()
	defer func() { srv.Stop(); m.Close(); old.Stop() }()

	addr := l.Addr().String()
	a := New(Config{ClusterID: 7, NodeID: 1, Resolve: func(n ids.NodeID) (string, bool) { return addr, n == 2 }}, nil)
	a.SetReceiver(&recorder{})
	defer a.Stop()
	waitFor(t, "a heartbeat at the old peer", func() bool {
		a.Send(2, 1, heartbeat(2)) // the first, on the framed wire, are lost
		a.Flush()
		return rec.messages() > 0
	})
	p, err := a.peer(2)
	if err != nil {
		t.Fatal(err)
	}
	if !p.grpcOnly.Load() {
		t.Fatal("messages arrived but the peer is not marked gRPC-only")
	}
}
