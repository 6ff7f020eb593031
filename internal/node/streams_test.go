package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
)

// TestMaxConcurrentStreamsPerConnection: with MaxConcurrentStreams 2, five
// linearizable Gets sent at once on one gRPC connection, each held in its
// handler (afterReadIndex) until the test lets it go, never have more than
// two in their handlers at once; the others wait and are served, one as
// each held call ends, and all five succeed. Another connection is not held
// up by the first one's calls. Before, the node left grpc-go's default,
// unlimited: all five ran their handlers at once, as would any number.
func TestMaxConcurrentStreamsPerConnection(t *testing.T) {
	const limit, calls = 2, 5
	n := startSolo(t, func(c *Config) { c.MaxConcurrentStreams = limit })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := dial.Dial(n.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := concordpb.NewKVClient(cc)
	for {
		_, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("put never succeeded: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polls until the shard has elected its leader
	}

	// The hook runs in each linearizable read's handler: it counts the
	// handlers in it, notes the most at once, and holds each until
	// released. Only the KV service's reads call it, and only this test's
	// Gets read.
	var inside, most atomic.Int32
	entered := make(chan struct{}, calls)
	release := make(chan struct{}, calls)
	stop := make(chan struct{}) // closed: nothing stays held if the test fails early
	defer close(stop)
	n.afterReadIndex = func() {
		now := inside.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-stop:
		}
		inside.Add(-1)
	}
	done := make(chan error, calls)
	for range calls {
		go func() {
			_, err := kv.Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
			done <- err
		}()
	}
	waitEntered := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatalf("%s: no call reached its handler (%d inside)", what, inside.Load())
		}
	}
	for i := range limit {
		waitEntered(fmt.Sprintf("call %d of %d", i+1, limit))
	}

	// The cap is per connection: a call on another one is served while
	// this one's are all taken.
	other, err := dial.Dial(n.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := concordpb.NewKVClient(other).Put(ctx, &concordpb.PutRequest{Key: []byte("k2"), Value: []byte("v")}); err != nil {
		t.Fatalf("a put on a second connection while the first has %d calls held: %v", limit, err)
	}
	// No third call runs its handler while two are held. Uncapped, the
	// three others arrived within milliseconds of the first two: this is
	// the window to see one that should not come, not a wait for one.
	select {
	case <-entered:
		t.Fatalf("a call ran its handler while %d were held on its connection (cap %d): %d inside", limit, limit, inside.Load())
	case <-time.After(300 * time.Millisecond):
	}

	// Each call let go makes room for exactly one more.
	for i := limit; i < calls; i++ {
		release <- struct{}{}
		waitEntered("after a release")
		if got := inside.Load(); got > limit {
			t.Fatalf("%d calls in their handlers at once on one connection, cap %d", got, limit)
		}
	}
	for range limit {
		release <- struct{}{}
	}
	for range calls {
		if err := <-done; err != nil {
			t.Errorf("a Get that waited for a stream: %v", err)
		}
	}
	if m := most.Load(); m != limit {
		t.Errorf("at most %d calls were in their handlers at once, want %d (the cap)", m, limit)
	}
}
