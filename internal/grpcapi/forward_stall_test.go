package grpcapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// stalledNode is a node that accepts requests and never answers, as a
// SIGSTOPped process does.
type stalledNode struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedClusterServer
	release chan struct{}
}

func (s *stalledNode) Batch(context.Context, *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	<-s.release
	return nil, status.Error(codes.Internal, "released")
}

func (s *stalledNode) Get(context.Context, *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	<-s.release
	return nil, status.Error(codes.Internal, "released")
}

func (s *stalledNode) Heartbeat(context.Context, *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	<-s.release
	return nil, status.Error(codes.Internal, "released")
}

// serveStalled starts a stalled node on 127.0.0.1 and records it as node 2
// in f's address book.
func serveStalled(t *testing.T, f *fakeNode) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s := &stalledNode{release: make(chan struct{})}
	concordpb.RegisterKVServer(srv, s)
	concordpb.RegisterClusterServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Cleanup(func() { close(s.release) }) // runs first: the handlers return
	f.mu.Lock()
	f.addrs[2] = lis.Addr().String()
	f.mu.Unlock()
}

// TestForwardToAStalledLeaderAnswersInTime protects a client's failover
// when the leader stalls: the node that forwards a request there answers
// Unavailable before the caller's deadline, not DeadlineExceeded at it, so
// the caller still has time to try another node.
func TestForwardToAStalledLeaderAnswersInTime(t *testing.T) {
	f1 := newFakeNode(t, 1, 4, 2)
	f1.hint = 2
	serveStalled(t, f1)
	conn := serve(t, f1)
	kv, cl := concordpb.NewKVClient(conn), concordpb.NewClusterClient(conn)
	calls := map[string]func(context.Context) error{
		"put": func(ctx context.Context) error {
			_, err := kv.Put(ctx, &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: 5, Seq: 1}, Key: []byte("k")})
			return err
		},
		"get": func(ctx context.Context) error {
			_, err := kv.Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
			return err
		},
		"heartbeat": func(ctx context.Context) error {
			_, err := cl.Heartbeat(ctx, &concordpb.HeartbeatRequest{})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			const deadline = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			st := status.Convert(err)
			if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "forwarded to node 2, which did not answer") {
				t.Fatalf("got %v %q after %v; want Unavailable saying node 2 did not answer", st.Code(), st.Message(), took)
			}
			if took > deadline*9/10 {
				t.Fatalf("answered after %v, too close to the caller's deadline of %v", took, deadline)
			}
		})
	}
	if n := f1.proposalCount(); n != 0 {
		t.Fatalf("the forwarding node proposed %d commands itself", n)
	}
}
