package multiraft_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
)

type nopTransport struct{}

func (nopTransport) Send(ids.NodeID, ids.ShardID, *pb.Message) {}
func (nopTransport) SendSnapshot(_ ids.NodeID, _ ids.ShardID, _ *pb.Message, _ *storage.Snapshot, done func(bool)) {
	done(false)
}
func (nopTransport) Flush() {}

func envelope(t *testing.T, m *pb.Message) []*concordpb.RaftEnvelope {
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return []*concordpb.RaftEnvelope{{ShardId: 7, Message: data}}
}

// TestInboxBound protects the receive side of byte-bounded replication: a
// loop that is not draining (as when its fsync is slow) stops accepting
// batches with entries once MaxInboxBytes are queued — the receiving
// stream waits, and gRPC flow control pushes back on the sender — while
// batches without entries (heartbeats, votes) still get through, so a slow
// disk never starves the control lane. A waiting batch goes in once the
// loop drains, and gives up when its stream ends or the host stops.
func TestInboxBound(t *testing.T) {
	h, release := stalledHost(t, 4<<10)
	app := envelope(t, &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(1)),
		Entries: []*pb.Entry{{Index: new(uint64(1)), Term: new(uint64(1)), Data: make([]byte, 3<<10)}}})
	ctx := context.Background()
	if err := h.Deliver(ctx, 2, app); err != nil {
		t.Fatalf("first append batch, under the bound: %v", err)
	}
	if err := h.Deliver(ctx, 2, app); err != nil {
		t.Fatalf("second append batch, the inbox still under the bound: %v", err)
	}
	// 6 KiB queued, over the 4 KiB bound: appends wait, heartbeats pass.
	heartbeat := envelope(t, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(1))})
	if err := h.Deliver(ctx, 2, heartbeat); err != nil {
		t.Fatalf("heartbeat with a full inbox: %v, want it accepted at once", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	errC := make(chan error, 1)
	go func() { errC <- h.Deliver(cancelled, 2, app) }()
	cancel()
	if err := <-errC; !errors.Is(err, context.Canceled) {
		t.Fatalf("append batch with a full inbox, its stream ended: %v, want context.Canceled (it must wait, not queue)", err)
	}

	go func() { errC <- h.Deliver(ctx, 2, app) }()
	release() // the loop drains: the waiting batch goes in
	if err := <-errC; err != nil {
		t.Fatalf("append batch after the loop drained: %v", err)
	}

	// A batch waiting when the host stops gets ErrStopped.
	hold2, held2 := make(chan struct{}), make(chan struct{})
	release2 := sync.OnceFunc(func() { close(hold2) })
	defer release2()
	go func() { _ = h.Do(ctx, func() { close(held2); <-hold2 }) }()
	<-held2
	for range 3 {
		go func() { errC <- h.Deliver(ctx, 2, app) }()
	}
	for range 2 { // 0 and 3 KiB queued are under the bound: two go in, the third waits
		if err := <-errC; err != nil {
			t.Fatalf("append batch under the bound: %v", err)
		}
	}
	stopped := make(chan struct{})
	go func() { h.Stop(); close(stopped) }()
	if err := <-errC; !errors.Is(err, multiraft.ErrStopped) {
		t.Fatalf("append batch waiting while the host stops: %v, want ErrStopped", err)
	}
	release2()
	<-stopped
}

// stalledHost starts a host whose inbox holds at most maxInbox bytes and
// whose loop does not drain it until release is called (Cleanup calls it,
// before the host stops: Stop waits for the loop).
func stalledHost(t *testing.T, maxInbox int64) (h *multiraft.Host, release func()) {
	t.Helper()
	eng, err := storage.OpenFS(storage.NewMemFS(), "/n1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	cfg := multiraft.DefaultConfig(1)
	cfg.MaxInboxBytes = maxInbox
	h = multiraft.New(cfg, eng, nopTransport{}, func(s ids.ShardID) replica.StateMachine { return kv.New(uint64(s)) })
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	hold, held := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	go func() {
		_ = h.Do(context.Background(), func() { close(held); <-hold }) // the loop stops draining
	}()
	<-held
	return h, release
}
