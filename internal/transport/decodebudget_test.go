package transport

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/multiraft"
)

// shortestEntries is a MsgApp of n entries of a term and an index alone:
// four bytes each (six on the wire with the entry's tag and length), the
// least a raft entry encodes to, and some 128 bytes each decoded.
func shortestEntries(n int) []byte {
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.MsgApp))
	for range n {
		msg = append(msg, 7<<3|byte(protowire.BytesType), 4, 2<<3, 1, 3<<3, 1)
	}
	return msg
}

// TestDecodeBudgetRefusesShortEntries (found by review): a frame of the
// shortest entries decodes at the receiver into ~20 times its bytes, so
// a 64 MiB frame, under the frame limit, made ~1.3 GB before anything
// checked it, from any peer that knows the cluster's and node ids. A batch
// whose messages would take more than the decode budget is refused before
// anything of it is delivered (decoded), on both wires; 3 MiB of entries
// here would have made 64 MiB.
func TestDecodeBudgetRefusesShortEntries(t *testing.T) {
	addr, rec := receiver(t, Config{})
	n := DefaultMaxBatchBytes*4/128 + 1 // one entry past the budget
	flood := testBatch(t)
	flood.Messages = []*concordpb.RaftEnvelope{{ShardId: 1, Message: shortestEntries(n)}}
	closedByPeer(t, rawConn(t, addr, frames(t, "", flood)), "a frame over the decode budget")

	conn, err := dial.Dial(addr)
	check(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := concordpb.NewRaftTransportClient(conn).Send(ctx)
	check(t, err)
	_ = s.Send(flood)
	if _, err := s.CloseAndRecv(); err == nil {
		t.Fatal("gRPC: a batch over the decode budget was accepted")
	}
	if n := rec.messages(); n != 0 {
		t.Fatalf("%d messages delivered from batches over the decode budget", n)
	}
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMaximalAppendPasses: the decode budget never cuts off raft's own
// traffic. The largest append raft makes with this node's config
// (MaxSizePerMsg of entries, and of the shortest entries: the most
// entries, the most decoded) passes, on both wires, and so do two of them
// sent together (their sender puts them in frames of their own, each
// within the budget; in one frame they would exceed it).
func TestMaximalAppendPasses(t *testing.T) {
	perMsg := int(multiraft.DefaultConfig(1).MaxSizePerMsgBytes) / 4
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		LogTerm: new(uint64(3)), Index: new(uint64(1))}
	for range perMsg {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(1)), Index: new(uint64(1))})
	}
	for _, wire := range wires {
		t.Run(wire, func(t *testing.T) {
			recv := &recorder{}
			a, _ := sender(t, Config{Wire: wire}, recv)
			a.Send(2, 1, m)
			a.Send(2, 1, m)
			a.Flush()
			waitFor(t, "two maximal appends", func() bool { return recv.messages() == 2 })
			recv.mu.Lock()
			defer recv.mu.Unlock()
			for _, b := range recv.batches {
				for _, e := range b {
					if got, ok := countEntries(e.GetMessage()); !ok || got != perMsg {
						t.Fatalf("an append of %d entries arrived with %d", perMsg, got)
					}
				}
			}
		})
	}
}

func countEntries(msg []byte) (int, bool) {
	n := 0
	for len(msg) > 0 {
		num, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return 0, false
		}
		msg = msg[l:]
		l = protowire.ConsumeFieldValue(num, typ, msg)
		if l < 0 {
			return 0, false
		}
		msg = msg[l:]
		if num == 7 {
			n++
		}
	}
	return n, true
}
