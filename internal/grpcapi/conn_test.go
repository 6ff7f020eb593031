package grpcapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/ids"
)

// serveConns serves kv's framed wire on 127.0.0.1 and returns its server
// and address. set changes the server's settings before it serves (after,
// the race detector sees the write race the accept loop's reads).
func serveConns(t *testing.T, kv *KV, auth func(net.Conn, string) error, maxFrame int, set ...func(*ConnServer)) (*ConnServer, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := kv.NewConnServer(auth, maxFrame, nil)
	for _, f := range set {
		f(cs)
	}
	go func() { _ = cs.Serve(l) }()
	t.Cleanup(func() { l.Close(); cs.Close() })
	return cs, l.Addr().String()
}

func dialConn(t *testing.T, addr, token string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hello, err := frame.AppendHello(nil, StreamMagic, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitOpen polls until cs serves n connections.
func awaitOpen(t *testing.T, cs *ConnServer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for cs.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", cs.Open(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConnAnswersAsStream: calls over a framed connection are answered by
// id with what the gRPC stream answers (the same code serves both).
func TestConnAnswersAsStream(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	keys := fillShards(f, 10)
	_, addr := serveConns(t, NewKV(f, testLimits), nil, 1<<20)
	c := dialConn(t, addr, "")
	var calls []*concordpb.StreamCall
	for i, k := range keys {
		calls = append(calls, &concordpb.StreamCall{Id: uint64(i + 1), Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Key: []byte(k)}}})
	}
	calls = append(calls, &concordpb.StreamCall{Id: 99}) // empty: InvalidArgument
	b, err := frame.Append(nil, &concordpb.StreamRequest{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := frame.NewReader(c, 1<<20)
	got := map[uint64]*concordpb.StreamReply{}
	for len(got) < len(calls) {
		resp := &concordpb.StreamResponse{}
		if err := fr.Next(resp); err != nil {
			t.Fatalf("after %d replies: %v", len(got), err)
		}
		for _, r := range resp.GetReplies() {
			got[r.GetId()] = r
		}
	}
	for i := range keys {
		if r := got[uint64(i+1)]; r.GetCode() != 0 || !r.GetGet().GetFound() || string(r.GetGet().GetValue()) != "v" {
			t.Errorf("get %s: %v", keys[i], r)
		}
	}
	if got[99].GetCode() == 0 {
		t.Error("an empty call was answered OK")
	}
}

// TestConnSlowReaderIsCut: a client that sends calls and reads none of
// the replies loses its connection once a write of replies waits past the
// write timeout; the node does not hold the replies (and the handler's
// calls) for ever.
func TestConnSlowReaderIsCut(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	keys := fillShards(f, 1)
	for _, kvs := range f.data {
		for _, kv := range kvs {
			kv.Value = bytes.Repeat([]byte("x"), 64<<10)
		}
	}
	// Replies of at most 512 × 64 KiB per message: under the limit, so
	// only the write timeout can end the connection.
	cs, addr := serveConns(t, NewKV(f, testLimits), nil, 64<<20, func(cs *ConnServer) { cs.writeTimeout = 200 * time.Millisecond })
	c := dialConn(t, addr, "")
	awaitOpen(t, cs, 1)
	// 2,000 replies of 64 KiB: far more than the sockets' buffers.
	var calls []*concordpb.StreamCall
	for i := range 2000 {
		calls = append(calls, &concordpb.StreamCall{Id: uint64(i + 1), Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Key: []byte(keys[0])}}})
	}
	b, err := frame.Append(nil, &concordpb.StreamRequest{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	awaitOpen(t, cs, 0) // never reading: the node gave up on the connection
}

// TestConnAuthAndClose: a refused hello gets its refusal and the
// connection closes; Close ends every connection.
func TestConnAuthAndClose(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	auth := Auth{Token: "t"}
	cs, addr := serveConns(t, NewKV(f, testLimits), auth.CheckClientConn, 1<<20)
	bad := dialConn(t, addr, "wrong")
	_ = bad.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp := &concordpb.StreamResponse{}
	if err := frame.NewReader(bad, 1<<20).Next(resp); err != nil || len(resp.GetReplies()) != 1 || resp.GetReplies()[0].GetCode() == 0 {
		t.Fatalf("a wrong token: %v, %v; want one refusal", resp, err)
	}
	dialConn(t, addr, "t")
	awaitOpen(t, cs, 1)
	cs.Close()
	awaitOpen(t, cs, 0)
}

// TestConnPingAndIdle: a ping is answered with a pong of its id, a
// connection that keeps pinging stays open, and one silent past the idle
// timeout is closed.
func TestConnPingAndIdle(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	cs, addr := serveConns(t, NewKV(f, testLimits), nil, 1<<20,
		// Far above the pings' 20 ms pace: 300 ms closed the pinging one
		// under make test's load.
		func(cs *ConnServer) { cs.idleTimeout = 1500 * time.Millisecond })
	pinging := dialConn(t, addr, "")
	silent := dialConn(t, addr, "")
	awaitOpen(t, cs, 2)
	fr := frame.NewReader(pinging, 1<<20)
	// Pings well inside the idle timeout, over several of them: the silent
	// connection goes, the pinging one stays.
	for i := uint64(1); cs.Open() != 1; i++ {
		if i > 1000 {
			t.Fatalf("%d connections open after %d pings; the silent one was kept", cs.Open(), i)
		}
		ping, err := frame.Append(nil, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: i << 40,
			Request: &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pinging.Write(ping); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		_ = pinging.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp := &concordpb.StreamResponse{}
		if err := fr.Next(resp); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		if r := resp.GetReplies(); len(r) != 1 || r[0].GetId() != i<<40 || r[0].GetCode() != 0 || r[0].GetPong() == nil {
			t.Fatalf("ping %d answered %v, want a pong of its id", i, resp)
		}
		time.Sleep(20 * time.Millisecond) // the pace of the pings, not a synchronisation
	}
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("the silent connection was answered, not closed")
	}
}

// FuzzConnFrames: no input makes the framed client wire's reading (its
// hello, then StreamRequest frames under a limit) panic, or accept a frame
// over the limit.
func FuzzConnFrames(f *testing.F) {
	hello, _ := frame.AppendHello(nil, StreamMagic, "t")
	ok, _ := frame.Append(hello, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: 1,
		Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Key: []byte("k")}}}}})
	f.Add(ok)
	f.Add(hello)
	ping, _ := frame.Append(hello, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: 1 << 63,
		Request: &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}}}})
	f.Add(ping)
	f.Add([]byte("PRI * HTTP/2.0"))
	f.Fuzz(func(t *testing.T, in []byte) {
		const limit = 4 << 10
		fr := frame.NewReader(bytes.NewReader(in), limit)
		if _, err := frame.ReadHello(fr, StreamMagic); err != nil {
			return
		}
		for range 100 {
			req := &concordpb.StreamRequest{}
			if err := fr.Next(req); err != nil {
				return
			}
			if n := proto.Size(req); n > limit {
				t.Fatalf("accepted a request of %d bytes over a %d-byte limit", n, limit)
			}
		}
	})
}

// TestConnCountBounded (found by review): a node served every framed
// client connection that said a hello, however many, each able to hold a
// frame being read and thousands of calls. Past maxConns one more is
// refused with ResourceExhausted (the client retries it as Unavailable)
// and closed; once one ends, a new one is served.
func TestConnCountBounded(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	cs, addr := serveConns(t, NewKV(f, testLimits), nil, 1<<20, func(cs *ConnServer) { cs.maxConns = 3 })
	first := dialConn(t, addr, "")
	for range cs.maxConns - 1 {
		dialConn(t, addr, "")
	}
	awaitServed(t, cs, cs.maxConns)
	over := dialConn(t, addr, "")
	_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp := &concordpb.StreamResponse{}
	if err := frame.NewReader(over, 1<<20).Next(resp); err != nil || len(resp.GetReplies()) != 1 ||
		codes.Code(resp.GetReplies()[0].GetCode()) != codes.ResourceExhausted {
		t.Fatalf("a connection past the cap: %v, %v; want one ResourceExhausted refusal", resp, err)
	}
	if _, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused connection was not closed")
	}
	awaitOpen(t, cs, cs.maxConns)
	first.Close()
	awaitOpen(t, cs, cs.maxConns-1)
	dialConn(t, addr, "")
	awaitServed(t, cs, cs.maxConns)
}

// TestSilentHellosCannotKeepClientsOut: connections that say nothing
// after connecting (no hello) hold at most maxHellos slots, the oldest
// closed for each new one, so a client whose hello follows at once is
// served while they flood the port, and they never count as served.
func TestSilentHellosCannotKeepClientsOut(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	cs, addr := serveConns(t, NewKV(f, testLimits), nil, 1<<20, func(cs *ConnServer) { cs.maxHellos = 4 })
	var silent []net.Conn
	for range 50 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	awaitOpen(t, cs, cs.maxHellos)
	for _, c := range silent[:40] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var ne net.Error
		if _, err := c.Read(make([]byte, 1)); errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a silent connection past the hello slots is still open")
		}
	}
	good := dialConn(t, addr, "")
	ping, err := frame.Append(nil, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: 1 << 40,
		Request: &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Write(ping); err != nil {
		t.Fatal(err)
	}
	_ = good.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp := &concordpb.StreamResponse{}
	if err := frame.NewReader(good, 1<<20).Next(resp); err != nil || len(resp.GetReplies()) != 1 || resp.GetReplies()[0].GetPong() == nil {
		t.Fatalf("a client among silent connections: %v, %v; want a pong", resp, err)
	}
	awaitServed(t, cs, 1)
}

// awaitServed polls until cs serves n connections past their hello.
func awaitServed(t *testing.T, cs *ConnServer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for cs.servedConns() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections served, want %d", cs.servedConns(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (cs *ConnServer) servedConns() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.served
}

// TestConnInFlightBytesBounded (found by review): a framed connection
// read on while it had fewer than 4,096 calls in flight, whatever their
// size, so calls that wait (a proposal raft has not taken yet) held up to
// 4,096 messages of up to 64 MiB each. The reader now stops once the
// calls in flight hold maxInFlight bytes of their messages, and reads on
// as they end.
func TestConnInFlightBytesBounded(t *testing.T) {
	const shards, value = 16, 256 << 10
	f := newFakeNode(t, 1, shards, 1)
	f.proposeGate = make(chan struct{})
	// Four puts, each a frame of the value, its key and framing.
	_, addr := serveConns(t, NewKV(f, Limits{MaxKeyBytes: 64, MaxValueBytes: 1 << 20}), nil, 4<<20,
		func(cs *ConnServer) { cs.maxInFlight = 4 * (value + 1024) })
	// One put a shard, so that no two merge into one proposal.
	keys := map[ids.ShardID]string{}
	for i := 0; len(keys) < shards; i++ {
		k := fmt.Sprintf("k%d", i)
		if _, ok := keys[f.shardOfKey(k)]; !ok {
			keys[f.shardOfKey(k)] = k
		}
	}
	c := dialConn(t, addr, "")
	id := uint64(0)
	for _, k := range keys {
		id++
		msg, err := frame.Append(nil, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: id,
			Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Key: []byte(k), Value: make([]byte, value)}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	// The reader takes four puts (the budget) and waits. Their proposals
	// arrive, gated.
	deadline := time.Now().Add(10 * time.Second)
	for f.proposing.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d proposals arrived, want 4", f.proposing.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Every proposal let through frees a share: the rest follow, and each
	// arrives only after one before it was let through.
	for done := 1; done <= shards; done++ {
		f.proposeGate <- struct{}{}
		for int(f.proposing.Load()) < min(done+4, shards) {
			if time.Now().After(deadline) {
				t.Fatalf("%d proposals arrived with %d let through, want %d", f.proposing.Load(), done, min(done+4, shards))
			}
			time.Sleep(time.Millisecond)
		}
		if n := int(f.proposing.Load()); n > done+4 {
			t.Fatalf("%d proposals arrived with %d let through: more than 4 puts' bytes in flight", n, done)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := frame.NewReader(c, 4<<20)
	for got := 0; got < shards; {
		resp := &concordpb.StreamResponse{}
		if err := fr.Next(resp); err != nil {
			t.Fatalf("after %d replies: %v", got, err)
		}
		for _, r := range resp.GetReplies() {
			if r.GetCode() != 0 {
				t.Fatalf("put %d: %v", r.GetId(), r)
			}
			got++
		}
	}
}

// TestConnLargeFrameNotStarved: a frame larger than a connection's
// in-flight bytes is read once the calls before it have ended, before the
// small frames behind it, whose calls could fit beside those still in
// flight. The reader is the budget's only taker and reads frames in
// order, so the small ones cannot pass it: no starvation on the request
// side, unlike the queued replies' (TestLargeReplyNotStarvedBySmallOnes).
func TestConnLargeFrameNotStarved(t *testing.T) {
	const shards, value = 16, 64 << 10
	f := newFakeNode(t, 1, shards, 1)
	f.proposeGate = make(chan struct{})
	_, addr := serveConns(t, NewKV(f, Limits{MaxKeyBytes: 64, MaxValueBytes: 1 << 20}), nil, 4<<20,
		func(cs *ConnServer) { cs.maxInFlight = 2 * (value + 1024) })
	// One put a shard, so that no two merge into one proposal: two small,
	// the large one (more than the whole budget),
	// then three small.
	sizes := []int{value, value, 3 * value, value, value, value}
	var keys []string
	seen := map[ids.ShardID]bool{}
	for i := 0; len(keys) < len(sizes); i++ {
		k := fmt.Sprintf("k%d", i)
		if !seen[f.shardOfKey(k)] {
			seen[f.shardOfKey(k)] = true
			keys = append(keys, k)
		}
	}
	c := dialConn(t, addr, "")
	for i, k := range keys {
		msg, err := frame.Append(nil, &concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: uint64(i + 1),
			Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Key: []byte(k), Value: make([]byte, sizes[i])}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	// The two small puts fill the budget; the large one waits for both.
	waitFor(t, func() bool { return f.proposing.Load() == 2 })
	f.proposeGate <- struct{}{}
	f.proposeGate <- struct{}{}
	// Then it alone is read: its proposal is the next one.
	waitFor(t, func() bool { return f.proposing.Load() == 3 })
	f.proposeGate <- struct{}{}
	waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.proposals) == 3 })
	f.mu.Lock()
	third := string(f.proposals[2].GetKv().GetOps()[0].GetKey())
	f.mu.Unlock()
	if third != keys[2] {
		t.Fatalf("third proposal: %q, want the large put's %q", third, keys[2])
	}
	close(f.proposeGate)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := frame.NewReader(c, 4<<20)
	for got := 0; got < len(keys); {
		resp := &concordpb.StreamResponse{}
		if err := fr.Next(resp); err != nil {
			t.Fatalf("after %d replies: %v", got, err)
		}
		for _, r := range resp.GetReplies() {
			if r.GetCode() != 0 {
				t.Fatalf("put %d: %v", r.GetId(), r)
			}
			got++
		}
	}
}

// TestByteBudgetPassesOneLargeMessage: a message larger than the whole
// budget is still read when nothing is in flight (a client's largest
// legitimate batch must not wait for ever); the next waits until it is
// given back, and a cancelled wait returns.
func TestByteBudgetPassesOneLargeMessage(t *testing.T) {
	b := newByteBudget(10)
	if err := b.acquire(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, 1) }()
	b.release(100)
	if err := <-got; err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if err := b.acquire(context.Background(), 9); err != nil {
		t.Fatal(err)
	}
	go func() { got <- b.acquire(ctx, 5) }()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait cancelled: %v", err)
	}
}

// TestPushedOutHelloIsRetryable: a connection pushed out of its hello slot
// while its good hello was checked is refused Unavailable, which the client
// retries, not Unauthenticated (refuse's answer to an unknown error), which
// it takes as final.
func TestPushedOutHelloIsRetryable(t *testing.T) {
	cs := NewKV(newFakeNode(t, 1, 1, 1), testLimits).NewConnServer(nil, 1<<20, nil)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := cs.promote(a); status.Code(err) != codes.Unavailable {
		t.Fatalf("promote of a connection no longer in its hello: %v, want Unavailable", err)
	}
}
