package transport

import (
	"net"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
)

// discardConn is a net.Conn whose writes go nowhere: the benchmarks
// measure encoding and framing, not the kernel.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error)      { return len(b), nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }

// benchTransport returns a transport with a peer (node 2) whose lanes no
// goroutine drains: the benchmark drains them itself with writeQueue.
func benchTransport() (*Transport, *peer) { return queueOnly(Config{}) }

// queueOnly returns a transport configured by cfg (as node 1 of cluster
// 7) with a peer, node 2, whose lanes no goroutine drains.
func queueOnly(cfg Config) (*Transport, *peer) {
	const addr = "127.0.0.1:1"
	cfg.ClusterID, cfg.NodeID = 7, 1
	cfg.Resolve = func(n ids.NodeID) (string, bool) { return addr, n == 2 }
	tr := New(cfg, nil)
	tr.SetReceiver(&recorder{})
	p := tr.newPeer(2, addr)
	tr.peers[2] = p
	tr.publishPeers()
	return tr, p
}

// typicalApp is a leader's append as a put makes it under load: two
// entries of about 300 bytes (docs/benchmarks.md, "Per-shard cost of a
// loop turn").
func typicalApp() *pb.Message {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(5)),
		LogTerm: new(uint64(5)), Index: new(uint64(12345)), Commit: new(uint64(12344))}
	for i := range 2 {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(5)), Index: new(uint64(12346 + i)),
			Type: pb.EntryNormal.Enum(), Data: make([]byte, 300)})
	}
	return m
}

func typicalAppResp() *pb.Message {
	return &pb.Message{Type: pb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(5)),
		Index: new(uint64(12347)), Commit: new(uint64(12347))}
}

// benchSend measures one message's Send and its share of writing the
// lane's frames, a loop turn's worth (16 messages, a shard each) per write.
func benchSend(b *testing.B, m *pb.Message, l func(*peer) *lane) {
	tr, p := benchTransport()
	conn := discardConn{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.Send(2, ids.ShardID(i%16+1), m)
		if i%16 == 15 {
			if _, err := tr.writeQueue(conn, p, l(p)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkSendApp(b *testing.B) {
	benchSend(b, typicalApp(), func(p *peer) *lane { return p.bulk })
}

func BenchmarkSendAppResp(b *testing.B) {
	benchSend(b, typicalAppResp(), func(p *peer) *lane { return p.control })
}
