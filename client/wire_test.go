package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/portmux"
)

// framedServerStream is a framed connection as the fake's KV_StreamServer
// (the fake calls only Recv and Send): the fake node's Stream logic serves
// the framed wire as it serves gRPC.
type framedServerStream struct {
	grpc.ServerStream
	c  net.Conn
	fr *frame.Reader
}

func (s *framedServerStream) Recv() (*concordpb.StreamRequest, error) {
	req := &concordpb.StreamRequest{}
	return req, s.fr.Next(req)
}

func (s *framedServerStream) Send(r *concordpb.StreamResponse) error {
	b, err := frame.Append(nil, r)
	if err == nil {
		_, err = s.c.Write(b)
	}
	return err
}

// oneWireNode is oneStreamNode on one port split as a node's is: gRPC for
// the routing table, and the framed wire, whose hello is refused with
// refuse when it is set. The counter counts the framed connections served.
func oneWireNode(t *testing.T, opts Options, refuse error) (*streamNode, *Client, *atomic.Int64) {
	t.Helper()
	l := listen(t)
	mux := portmux.New(l, 5*time.Second)
	framed := mux.Match(frame.KVMagic)
	f := &streamNode{rt: &concordpb.RoutingTableResponse{
		Nodes:  []*concordpb.NodeDescriptor{{NodeId: 1, Address: l.Addr().String()}},
		Shards: []*concordpb.ShardRoute{{Shard: &concordpb.ShardDescriptor{ShardId: 1, EndHash: math.MaxUint64}, LeaderNodeId: 1}},
	}}
	s := newServer(t)
	concordpb.RegisterKVServer(s, f)
	concordpb.RegisterClusterServer(s, f)
	go s.Serve(mux.GRPC())
	go mux.Serve()
	t.Cleanup(func() { mux.Close() })
	served := new(atomic.Int64)
	go func() {
		for {
			c, err := framed.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() {
				defer c.Close()
				fr := frame.NewReader(c, 1<<20)
				if _, err := frame.ReadHello(fr, frame.KVMagic); err != nil {
					return
				}
				if refuse != nil {
					st := status.Convert(refuse)
					b, _ := frame.Append(nil, &concordpb.StreamResponse{Replies: []*concordpb.StreamReply{{Code: uint32(st.Code()), Message: st.Message()}}})
					_, _ = c.Write(b)
					return
				}
				_ = f.Stream(&framedServerStream{c: c, fr: fr})
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts.Endpoints = []string{l.Addr().String()}
	opts.Wire = WireTCP
	c, err := NewWithOptions(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c, served
}

// TestWireTCPBatchesAndMatchesReplies: over the framed wire concurrent
// calls share messages and each caller gets its own answer by id, as over
// gRPC; no gRPC stream is opened.
func TestWireTCPBatchesAndMatchesReplies(t *testing.T) {
	f, c, framed := oneWireNode(t, Options{}, nil)
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if f.calls.Load() != n || f.messages.Load() >= n {
		t.Fatalf("%d calls in %d messages, want %d calls in fewer messages", f.calls.Load(), f.messages.Load(), n)
	}
	if framed.Load() != 1 {
		t.Fatalf("%d framed connections, want the one all calls share", framed.Load())
	}
}

// TestWireTCPBreakIsAmbiguousForMutations: a put sent on a framed
// connection that then broke may have applied: the call ends ambiguous;
// the next call opens a new connection.
func TestWireTCPBreakIsAmbiguousForMutations(t *testing.T) {
	f, c, _ := oneWireNode(t, Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, _, err := c.Put(ctx, []byte("k"), []byte("break")); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("put on a broken connection: %v, want ErrAmbiguous", err)
	}
	if f.puts.Load() < 1 {
		t.Fatal("the put never reached the node")
	}
	if v, _, err := c.Get(context.Background(), []byte("after")); err != nil || string(v) != "after" {
		t.Fatalf("get after the break: %q, %v", v, err)
	}
}

// TestWireTCPRefusedHello: a node that refuses the hello (a wrong token)
// fails the calls with its code at once, not as a broken connection to
// retry until the deadline, and no call was served.
func TestWireTCPRefusedHello(t *testing.T) {
	f, c, _ := oneWireNode(t, Options{}, status.Error(codes.Unauthenticated, "auth token missing or rejected"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
	if status.Code(errors.Unwrap(err)) != codes.Unauthenticated && status.Code(err) != codes.Unauthenticated {
		t.Fatalf("put through a refused hello: %v, want Unauthenticated", err)
	}
	if errors.Is(err, ErrAmbiguous) || ctx.Err() != nil {
		t.Fatalf("a refusal was retried to the deadline: %v", err)
	}
	if f.calls.Load() != 0 {
		t.Fatalf("%d calls served", f.calls.Load())
	}
}

// TestWireOption: an unknown wire, or the framed wire with Unary, is
// refused at New.
func TestWireOption(t *testing.T) {
	for _, o := range []Options{{Wire: "udp"}, {Wire: WireTCP, Unary: true}} {
		o.Endpoints = []string{"127.0.0.1:1"}
		if _, err := NewWithOptions(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
