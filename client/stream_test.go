package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// streamNode is a fake node that serves KV.Stream: a Get answers the key
// as its value; a Put with value "break" makes the node end the stream
// with an error instead of answering (as a connection that breaks after
// the request was sent). It counts the messages and calls it received.
type streamNode struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedClusterServer
	rt              *concordpb.RoutingTableResponse
	messages, calls atomic.Int64
	puts            atomic.Int64
	pings           atomic.Int64
}

func (f *streamNode) RoutingTable(context.Context, *concordpb.RoutingTableRequest) (*concordpb.RoutingTableResponse, error) {
	return f.rt, nil
}

func (f *streamNode) Stream(s concordpb.KV_StreamServer) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		var replies []*concordpb.StreamReply
		counted := false
		for _, c := range req.GetCalls() {
			if c.GetPing() != nil { // the framed wire's keepalive: not a call
				f.pings.Add(1)
				replies = append(replies, &concordpb.StreamReply{Id: c.GetId(), Response: &concordpb.StreamReply_Pong{Pong: &concordpb.KeepalivePing{}}})
				continue
			}
			if !counted {
				f.messages.Add(1)
				counted = true
			}
			f.calls.Add(1)
			if p := c.GetPut(); p != nil {
				f.puts.Add(1)
				if string(p.GetValue()) == "break" {
					return status.Error(codes.Internal, "stream torn down")
				}
			}
			replies = append(replies, &concordpb.StreamReply{Id: c.GetId(), Response: &concordpb.StreamReply_Get{
				Get: &concordpb.GetResponse{Found: true, Value: c.GetGet().GetKey()}}})
		}
		if err := s.Send(&concordpb.StreamResponse{Replies: replies}); err != nil {
			return nil
		}
	}
}

func oneStreamNode(t *testing.T, opts Options) (*streamNode, *Client) {
	t.Helper()
	l := listen(t)
	f := &streamNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := grpc.NewServer()
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts.Endpoints = []string{l.Addr().String()}
	c, err := NewWithOptions(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c
}

// TestStreamBatchesConcurrentCalls protects the point of the stream:
// concurrent requests to one node share messages (fewer messages than
// calls), and each caller gets its own answer, matched by id.
func TestStreamBatchesConcurrentCalls(t *testing.T) {
	f, c := oneStreamNode(t, Options{})
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := fmt.Sprintf("key-%d", i)
			v, found, err := c.Get(context.Background(), []byte(key))
			if err == nil && (!found || string(v) != key) {
				err = fmt.Errorf("get %s answered %q", key, v)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if f.calls.Load() != n {
		t.Fatalf("node received %d calls, want %d", f.calls.Load(), n)
	}
	if m := f.messages.Load(); m >= n {
		t.Fatalf("%d calls took %d messages: no batching", n, m)
	}
	t.Logf("%d calls in %d messages", n, f.messages.Load())
}

// TestStreamBreakIsAmbiguousForMutations protects the retry loop's
// accounting: a mutation sent on a stream that then broke may have
// applied, so the call ends ambiguous, never as a clean failure; and the
// client opens a new stream for later calls.
func TestStreamBreakIsAmbiguousForMutations(t *testing.T) {
	f, c := oneStreamNode(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, _, err := c.Put(ctx, []byte("k"), []byte("break"))
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("put on a broken stream: %v, want ErrAmbiguous", err)
	}
	if f.puts.Load() < 1 {
		t.Fatal("the put never reached the node")
	}
	v, _, err := c.Get(context.Background(), []byte("after"))
	if err != nil || string(v) != "after" {
		t.Fatalf("get after the break: %q, %v", v, err)
	}
}

// TestUnaryOption protects the opt-out: with Options.Unary no stream is
// opened.
func TestUnaryOption(t *testing.T) {
	f, c := oneStreamNode(t, Options{Unary: true})
	_, _, err := c.Get(context.Background(), []byte("k"))
	if status.Code(err) != codes.Unimplemented { // the fake serves only Stream
		t.Fatalf("unary get: %v, want Unimplemented from the fake", err)
	}
	if f.messages.Load() != 0 {
		t.Fatal("a stream was used despite Options.Unary")
	}
}
