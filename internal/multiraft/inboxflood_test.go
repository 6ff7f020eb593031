package multiraft_test

import (
	"context"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/multiraft"
)

// TestInboxBoundsControlFlood: batches without entries are never held
// (TestInboxBound), but neither may they grow the inbox without limit
// while the loop does not drain: past twice MaxInboxBytes they are
// dropped (raft tolerates the loss of any message) and Deliver returns at
// once. Before, a peer sending heartbeats faster than a stalled loop
// drained (a slow fsync, or anyone who reaches the port) grew the inbox
// with every one, and each was counted by its bytes on the wire (about
// ten), not the few hundred it holds decoded.
func TestInboxBoundsControlFlood(t *testing.T) {
	const maxInbox int64 = 64 << 10
	h, _ := stalledHost(t, maxInbox)
	heartbeat := envelope(t, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(1))})
	const n = 100_000
	for i := range n {
		if err := h.Deliver(context.Background(), 2, heartbeat); err != nil {
			t.Fatalf("heartbeat %d with a full inbox: %v, want it taken or dropped at once", i, err)
		}
	}
	if got, bound := multiraft.InboxBytes(h), 2*maxInbox+1<<10; got > bound {
		t.Fatalf("the inbox holds %d bytes of %d heartbeats (bound %d)", got, n, bound)
	}
	if got := multiraft.InboxBytes(h); got < maxInbox {
		t.Fatalf("the inbox holds %d bytes: heartbeats were dropped under the bound %d", got, maxInbox)
	}
}
