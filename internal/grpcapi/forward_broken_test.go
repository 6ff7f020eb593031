package grpcapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/redisapi"
)

// redisFront is the Backend a Redis port needs, over kv (a fake node's
// front door): what internal/node gives the port of a real node.
type redisFront struct {
	*KV
	f *fakeNode
}

func (r redisFront) ShardOf(key []byte) (uint64, bool) {
	return uint64(r.f.shardOfKey(string(key))), true
}
func (r redisFront) Info() redisapi.NodeInfo { return redisapi.NodeInfo{NodeID: uint64(r.f.id)} }
func (r redisFront) Members() []string       { return nil }
func (r redisFront) Die(clean bool)          { r.f.Die(clean) }
func (r redisFront) Partition(reach []string) []ids.NodeID {
	return r.f.Partition(reach)
}
func (r redisFront) Heal()                  { r.f.Heal() }
func (r redisFront) DiskLow(low bool) error { return r.f.DiskLow(low) }

// serveRedis starts a Redis port on 127.0.0.1 over kv and returns a
// connection to it.
func serveRedis(t *testing.T, kv *KV, f *fakeNode) (net.Conn, *bufio.Reader) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := redisapi.New(redisFront{kv, f}, redisapi.Config{})
	go s.Serve(lis)
	t.Cleanup(func() { s.Close(time.Second) })
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// sendRESP writes each command (words split on spaces) as a RESP array.
func sendRESP(t *testing.T, c net.Conn, cmds ...string) {
	t.Helper()
	var b strings.Builder
	for _, cmd := range cmds {
		words := strings.Fields(cmd)
		fmt.Fprintf(&b, "*%d\r\n", len(words))
		for _, w := range words {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
		}
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

func readLine(t *testing.T, c net.Conn, r *bufio.Reader) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply: %v (so far %q)", err, line)
	}
	return strings.TrimRight(line, "\r\n")
}

// waitCount polls until n() reaches want.
func waitCount(t *testing.T, what string, want int32, n func() int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d %s", n(), want, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leaderBreak is how a test cuts the connections to the leader, f2, once
// a request has reached it.
type leaderBreak func()

// unaryLeader serves f2 over gRPC alone and forwards from f1 with unary
// calls (a node built without a PeerDialer, or a peer without Stream).
func unaryLeader(t *testing.T, f1, f2 *fakeNode) (*KV, leaderBreak) {
	srv := serveGRPC(t, f2, f1)
	return NewKV(f1, testLimits), func() { go srv.Stop() }
}

// framedLeader serves f2 on the framed wire and forwards over it.
func framedLeader(t *testing.T, f1, f2 *fakeNode) (*KV, leaderBreak) {
	_, cs2, _ := serveWire(t, f2, false, f1)
	kv1, _, _ := serveWire(t, f1, false, f2)
	return kv1, func() {
		wantForwarded(t, kv1, true)
		go cs2.Close()
	}
}

// wantForwarded fails t unless kv forwarded its calls on request streams,
// over the framed wire (framed) or gRPC's KV.Stream: the path under test.
func wantForwarded(t *testing.T, kv *KV, framed bool) {
	t.Helper()
	if f, g := kv.ForwardedCalls(); (f > 0) != framed || (g > 0) == framed {
		t.Errorf("forwarded %d calls over the framed wire and %d over gRPC's stream; want them over the framed wire: %v", f, g, framed)
	}
}

// noStreamKV is the KV service of a node without KV.Stream (a binary
// before it): forwards to it fall back to unary calls.
type noStreamKV struct{ *KV }

func (noStreamKV) Stream(grpc.BidiStreamingServer[concordpb.StreamRequest, concordpb.StreamResponse]) error {
	return status.Error(codes.Unimplemented, "no Stream here")
}

// fallbackLeader serves f2 over gRPC without KV.Stream, and f1 forwards
// with its request streams (WithPeerWire), which fall back to unary calls.
func fallbackLeader(t *testing.T, f1, f2 *fakeNode) (*KV, leaderBreak) {
	return grpcOnlyLeader(t, f1, f2, noStreamKV{NewKV(f2, testLimits)})
}

// grpcStreamLeader serves f2 over gRPC alone (no framed wire), and f1's
// request streams fall back to KV.Stream over gRPC.
func grpcStreamLeader(t *testing.T, f1, f2 *fakeNode) (*KV, leaderBreak) {
	kv1, cut := grpcOnlyLeader(t, f1, f2, NewKV(f2, testLimits))
	return kv1, func() {
		wantForwarded(t, kv1, false)
		cut()
	}
}

func grpcOnlyLeader(t *testing.T, f1, f2 *fakeNode, kv2 concordpb.KVServer) (*KV, leaderBreak) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(MarkAnswered(), DropPartitioned(f2.Blocked)))
	concordpb.RegisterKVServer(srv, kv2)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	announce(t, f2, lis.Addr().String(), []*fakeNode{f1})
	kv1, _, _ := serveWire(t, f1, false, f2)
	return kv1, func() { go srv.Stop() }
}

// TestBrokenForwardIsAmbiguousOverRedis protects the RESP reply of a write
// that a node forwarded to the shard's leader when the connection breaks
// after the leader received it: the leader may apply it, so the client
// must read AMBIGUOUS, never an UNAVAILABLE or ERR it would take as a
// certain failure, over unary gRPC forwards as over the framed wire. A
// read cut off the same way is a plain error, never AMBIGUOUS.
func TestBrokenForwardIsAmbiguousOverRedis(t *testing.T) {
	paths := map[string]func(*testing.T, *fakeNode, *fakeNode) (*KV, leaderBreak){
		"unary":          unaryLeader,
		"framed":         framedLeader,
		"unary fallback": fallbackLeader,
		"grpc stream":    grpcStreamLeader,
	}
	cases := []struct {
		name  string
		cmds  []string
		write bool
	}{
		{"SET", []string{"SET k v"}, true},
		{"INCR chain", []string{"INCR k", "INCR k"}, true},
		{"MULTI", []string{"MULTI", "SET k v", "INCR n", "EXEC"}, true},
		{"session", []string{"CONCORD.SESSION 7 1 SET k v"}, true}, // forwarded alone, not merged
		{"GET", []string{"GET k"}, false},
	}
	for pname, path := range paths {
		for _, c := range cases {
			t.Run(pname+"/"+c.name, func(t *testing.T) {
				f1, f2 := newFakeNode(t, 1, 1, 2), newFakeNode(t, 2, 1, 2)
				f2.proposeGate, f2.readGate = make(chan struct{}), make(chan struct{})
				f2.echo = true
				kv1, cut := path(t, f1, f2)
				t.Cleanup(func() { close(f2.proposeGate); close(f2.readGate) }) // first: the leader's handlers return
				conn, r := serveRedis(t, kv1, f1)
				sendRESP(t, conn, c.cmds...)
				if c.write {
					waitCount(t, "writes reached the leader", 1, f2.proposing.Load)
				} else {
					waitCount(t, "reads reached the leader", 1, f2.reading.Load)
				}
				cut()
				var replies []string
				for range c.cmds {
					replies = append(replies, readLine(t, conn, r))
				}
				if c.cmds[0] == "MULTI" { // +OK, +QUEUED..., then EXEC's error
					replies = replies[len(replies)-1:]
				}
				for i, rep := range replies {
					switch {
					case c.write && !strings.HasPrefix(rep, "-AMBIGUOUS "):
						t.Errorf("reply %d to %q: %q; want AMBIGUOUS (the leader received the write)", i, c.cmds, rep)
					case !c.write && (!strings.HasPrefix(rep, "-") || strings.Contains(rep, "AMBIGUOUS")):
						t.Errorf("reply %d to %q: %q; want an error that is not AMBIGUOUS", i, c.cmds, rep)
					}
				}
			})
		}
	}
}

// TestBrokenUnaryForwardSaysSent protects the gRPC answer of a write that
// a node forwarded with a unary call whose connection broke after the
// leader received it: Unavailable saying the request was sent, so that
// every front end (the Go client, the Redis port) counts it as possibly
// applied, not as a refusal or a request never sent.
func TestBrokenUnaryForwardSaysSent(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	f2.proposeGate = make(chan struct{})
	srv2 := serveGRPC(t, f2, f1)
	c1 := concordpb.NewKVClient(serve(t, f1, f2))
	t.Cleanup(func() { close(f2.proposeGate) })
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c1.Put(ctx, &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 1}, Key: []byte("k"), Value: []byte("v")})
		errs <- err
	}()
	waitCount(t, "writes reached the leader", 1, f2.proposing.Load)
	go srv2.Stop()
	st := status.Convert(<-errs)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "after the request was sent") {
		t.Fatalf("got %v %q; want Unavailable saying the request was sent (outcome unknown)", st.Code(), st.Message())
	}
}

// TestUnsentUnaryForwardIsARefusal protects the other side: a forward that
// could not connect to the leader, and a leader's own refusal, stay
// certain refusals (Unavailable, not marked sent), and the Redis port
// answers them UNAVAILABLE, not AMBIGUOUS.
func TestUnsentUnaryForwardIsARefusal(t *testing.T) {
	t.Run("connect refused", func(t *testing.T) {
		f1 := newFakeNode(t, 1, 4, 2)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f1.addrs[2] = lis.Addr().String()
		lis.Close() // nothing listens there now
		c1 := concordpb.NewKVClient(serve(t, f1))
		_, err = c1.Put(context.Background(), &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 1}, Key: []byte("k")})
		if st := status.Convert(err); st.Code() != codes.Unavailable || strings.Contains(st.Message(), "after the request was sent") ||
			strings.Contains(st.Message(), "may have received") {
			t.Fatalf("got %v %q; want Unavailable, not marked sent", st.Code(), st.Message())
		}
		conn, r := serveRedis(t, NewKV(f1, testLimits), f1)
		sendRESP(t, conn, "SET k v")
		if rep := readLine(t, conn, r); !strings.HasPrefix(rep, "-UNAVAILABLE ") {
			t.Fatalf("SET: %q; want UNAVAILABLE", rep)
		}
	})
	t.Run("closed at accept", func(t *testing.T) {
		// A node past its --grpc-max-conns closes a connection as soon as
		// it accepts it (portmux.Limit), before its HTTP/2 preface: gRPC
		// sends no call on it, and says "error reading server preface".
		// (Closed before the client wrote its own preface, gRPC says only
		// "broken pipe", which a broken call says too: that one stays
		// "may have been sent", the safe side.) So the test reads the
		// client's preface before it closes.
		f1 := newFakeNode(t, 1, 4, 2)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.ReadFull(c, make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")))
				c.Close()
			}
		}()
		f1.addrs[2] = lis.Addr().String()
		c1 := concordpb.NewKVClient(serve(t, f1))
		_, err = c1.Put(context.Background(), &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 1}, Key: []byte("k")})
		if st := status.Convert(err); st.Code() != codes.Unavailable || strings.Contains(st.Message(), "after the request was sent") ||
			strings.Contains(st.Message(), "may have received") {
			t.Fatalf("got %v %q; want Unavailable, not marked sent", st.Code(), st.Message())
		}
	})
	t.Run("leader refuses", func(t *testing.T) {
		// f2 refuses what f1 forwards: it is cut off from f1 (a
		// partition, which the leader's interceptor answers).
		f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
		f2.blocked[1] = true
		serveGRPC(t, f2, f1)
		conn, r := serveRedis(t, NewKV(f1, testLimits), f1)
		sendRESP(t, conn, "SET k v")
		if rep := readLine(t, conn, r); !strings.HasPrefix(rep, "-UNAVAILABLE partitioned from node 1") {
			t.Fatalf("SET: %q; want UNAVAILABLE partitioned from node 1", rep)
		}
		if f2.proposalCount() != 0 {
			t.Fatal("the leader proposed a refused write")
		}
	})
}
