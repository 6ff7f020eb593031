package portmux_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/internal/portmux"
)

// TestLimitBoundsGRPCConnections: a gRPC server on a Limit listener serves
// at most its limit of connections; one more is closed at once (its client
// sees Unavailable, not a hang), and once a connection closes a new one is
// served. Before, gRPC on the node's port took every connection offered.
func TestLimitBoundsGRPCConnections(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := portmux.Limit(tl, 2)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ll) }()
	defer srv.Stop()

	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(tl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	check := func(cc *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	first, second := dial(), dial()
	for _, cc := range []*grpc.ClientConn{first, second} {
		if err := check(cc); err != nil {
			t.Fatalf("a connection under the limit: %v", err)
		}
	}
	third := dial()
	if err := check(third); status.Code(err) != codes.Unavailable {
		t.Fatalf("a connection past the limit: %v, want Unavailable at once", err)
	}
	if ll.Refused() == 0 || ll.Open() != 2 {
		t.Fatalf("refused %d, open %d; want some refused and 2 open", ll.Refused(), ll.Open())
	}
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for ll.Open() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after a client left, %d connections still open, want 1", ll.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
	fourth := dial()
	if err := check(fourth); err != nil {
		t.Fatalf("a connection after one closed: %v", err)
	}
	if err := check(second); err != nil {
		t.Fatalf("the second client after all this: %v", err)
	}
}
