package client

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/portmux"
)

// The client's hot path (a Put or Get over the framed wire) against a lean
// fake node: the node decodes only each call's id and kind, and answers
// every call of a message in one message with a canned reply carrying the
// header a real node sends (shard, serving node, leader and its address),
// reusing its buffers, so that the allocations and most of the CPU per op
// the benchmarks report are the client's.

// leanNode is the fake. Its routing table names itself as the leader of
// the one shard, so the client sends every call to it.
type leanNode struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedClusterServer
	rt *concordpb.RoutingTableResponse
}

func (f *leanNode) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	return f.rt, nil
}

// startLeanNode serves a leanNode on a fresh port (gRPC for the routing
// table, the framed wire for calls) until the test ends, and returns a
// client of it over the framed wire.
func startLeanNode(tb testing.TB) *Client {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	mux := portmux.New(l, 5*time.Second)
	framed := mux.Match(frame.KVMagic)
	f := &leanNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: addr}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := grpc.NewServer()
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(mux.GRPC())
	go mux.Serve()
	var conns sync.WaitGroup
	tb.Cleanup(func() { s.Stop(); mux.Close(); conns.Wait() })
	header, _ := proto.Marshal(&concordpb.ResponseHeader{ShardId: 1, ServedByNodeId: 1, LeaderNodeId: 1, LeaderAddress: addr})
	go func() {
		for {
			c, err := framed.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				serveLean(c, header)
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewWithOptions(ctx, Options{Endpoints: []string{addr}, Wire: WireTCP})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// serveLean answers one framed connection: a ping with a pong, a Get with
// found and a 256-byte value, any other call with an empty response of its
// kind, each with header.
func serveLean(c net.Conn, header []byte) {
	fr := frame.NewReader(c, 1<<20)
	if _, err := frame.ReadHello(fr, frame.KVMagic); err != nil {
		return
	}
	value := make([]byte, 256)
	var out, scratch []byte
	for {
		data, err := fr.NextBytes()
		if err != nil {
			return
		}
		out = append(out[:0], 0, 0, 0, 0)
		for len(data) > 0 {
			num, typ, n := protowire.ConsumeTag(data)
			if n < 0 {
				return
			}
			data = data[n:]
			if num != 1 || typ != protowire.BytesType {
				n = protowire.ConsumeFieldValue(num, typ, data)
				data = data[n:]
				continue
			}
			call, n := protowire.ConsumeBytes(data)
			data = data[n:]
			out, scratch = appendLeanReply(out, scratch[:0], call, header, value)
		}
		binary.BigEndian.PutUint32(out, uint32(len(out)-frame.Header))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// appendLeanReply appends the StreamResponse field of the reply to call,
// building the response in resp (returned for reuse).
func appendLeanReply(out, resp, call, header, value []byte) ([]byte, []byte) {
	var id uint64
	kind := protowire.Number(0)
	for len(call) > 0 {
		num, typ, n := protowire.ConsumeTag(call)
		call = call[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			id, n = protowire.ConsumeVarint(call)
		case num >= 3 && typ == protowire.BytesType:
			kind = num
			n = protowire.ConsumeFieldValue(num, typ, call)
		default:
			n = protowire.ConsumeFieldValue(num, typ, call)
		}
		call = call[n:]
	}
	if kind != 9 { // every response but a pong has the header first
		resp = protowire.AppendTag(resp, 1, protowire.BytesType)
		resp = protowire.AppendBytes(resp, header)
	}
	if kind == 3 { // Get: found, value
		resp = protowire.AppendTag(resp, 2, protowire.VarintType)
		resp = protowire.AppendVarint(resp, 1)
		resp = protowire.AppendTag(resp, 3, protowire.BytesType)
		resp = protowire.AppendBytes(resp, value)
	}
	replyLen := protowire.SizeTag(1) + protowire.SizeVarint(id) + protowire.SizeTag(1) + protowire.SizeBytes(len(resp))
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(replyLen))
	out = protowire.AppendTag(out, 1, protowire.VarintType)
	out = protowire.AppendVarint(out, id)
	// The reply's response field number is the call's request number + 1
	// (get 3 → 4, put 4 → 5, ..., ping 9 → pong 10).
	out = protowire.AppendTag(out, kind+1, protowire.BytesType)
	return protowire.AppendBytes(out, resp), resp
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchHotPath runs op from 1 goroutine (c1: every call its own message
// both ways, as in a bench whose clients spread over many connections) and
// from 64 (c64: many calls to a message), and reports, beside the wall
// time and allocations per op, the process's CPU time per op (the fake
// node's included: it decodes ids and writes canned replies).
func benchHotPath(b *testing.B, op func(ctx context.Context, c *Client, key []byte) error) {
	b.Run("c1", func(b *testing.B) { benchCallers(b, 0, op) })
	b.Run("c64", func(b *testing.B) { benchCallers(b, 32, op) })
}

// benchCallers runs op from GOMAXPROCS×parallelism goroutines, or from one
// with parallelism 0.
func benchCallers(b *testing.B, parallelism int, op func(ctx context.Context, c *Client, key []byte) error) {
	c := startLeanNode(b)
	ctx := context.Background()
	key := []byte("k000000000000042")
	if err := op(ctx, c, key); err != nil { // opens the connection
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	defer func() { b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
	if parallelism == 0 {
		for range b.N {
			if err := op(ctx, c, key); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, c, key); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWirePut is a blind Put (the bench's update) over the framed wire.
func BenchmarkWirePut(b *testing.B) {
	value := make([]byte, 256)
	benchHotPath(b, func(ctx context.Context, c *Client, key []byte) error {
		_, _, err := c.Put(ctx, key, value)
		return err
	})
}

// BenchmarkWireGet is a linearizable Get over the framed wire.
func BenchmarkWireGet(b *testing.B) {
	benchHotPath(b, func(ctx context.Context, c *Client, key []byte) error {
		_, _, err := c.Get(ctx, key)
		return err
	})
}

// TestHotPathAllocations pins the allocations of a lone Put and Get over
// the framed wire, the fake node's none: a blind put allocates its request,
// its call, its call state (header and attempt), its response with its
// reply block, and the closure state of Put; a get one more for its value.
// A change that adds one per call to the hot path fails here.
func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	c := startLeanNode(t)
	ctx := context.Background()
	key, value := []byte("k000000000000042"), make([]byte, 256)
	if _, _, err := c.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		max  float64
		op   func() error
	}{
		{"put", 6, func() error { _, _, err := c.Put(ctx, key, value); return err }},
		{"get", 8, func() error { _, _, err := c.Get(ctx, key); return err }},
	} {
		var err error
		n := testing.AllocsPerRun(200, func() {
			if e := tc.op(); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if n > tc.max {
			t.Errorf("%s: %.1f allocations per call, want at most %.0f", tc.name, n, tc.max)
		}
	}
}
