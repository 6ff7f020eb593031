package multiraft_test

import (
	"context"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
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
	eng, err := storage.OpenFS(storage.NewMemFS(), "/n1")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cfg := multiraft.DefaultConfig(1)
	cfg.MaxInboxBytes = 64 << 10
	h := multiraft.New(cfg, eng, nopTransport{}, func(s ids.ShardID) replica.StateMachine { return kv.New(uint64(s)) })
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	hold, held := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before Stop, which waits for the loop
	go func() {
		_ = h.Do(context.Background(), func() { close(held); <-hold }) // the loop stops draining
	}()
	<-held
	heartbeat := envelope(t, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(1))})
	const n = 100_000
	for i := range n {
		if err := h.Deliver(context.Background(), 2, heartbeat); err != nil {
			t.Fatalf("heartbeat %d with a full inbox: %v, want it taken or dropped at once", i, err)
		}
	}
	if got, bound := multiraft.InboxBytes(h), 2*cfg.MaxInboxBytes+1<<10; got > bound {
		t.Fatalf("the inbox holds %d bytes of %d heartbeats (bound %d)", got, n, bound)
	}
	if got := multiraft.InboxBytes(h); got < cfg.MaxInboxBytes {
		t.Fatalf("the inbox holds %d bytes: heartbeats were dropped under the bound %d", got, cfg.MaxInboxBytes)
	}
}
