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
	"google.golang.org/grpc/peer"
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

// countCalls are the interceptors a server on an EvictIdle listener needs:
// each call is in flight on its connection from start to end.
func countCalls() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			portmux.CallStarted(p.Addr)
			defer portmux.CallEnded(p.Addr)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			p, _ := peer.FromContext(ss.Context())
			portmux.CallStarted(p.Addr)
			defer portmux.CallEnded(p.Addr)
			return h(srv, ss)
		}),
	}
}

// holdIdle opens a connection to addr that says it is HTTP/2 (the client
// preface and an empty SETTINGS frame) and then sits silent: what a
// flood of idle connections, or a leaky client pool, leaves behind.
func holdIdle(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitAdmitted opens idle connections to addr (holdIdle) until one is
// served (the server's SETTINGS come back), not closed at once.
func waitAdmitted(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := holdIdle(t, addr)
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("an idle connection never served: %v", err)
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOpen polls until ll has n connections open.
func waitOpen(t *testing.T, ll *portmux.LimitListener, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ll.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", ll.Open(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEvictIdleLetsANewClientIn: connections that opened and then sat
// idle hold every slot of a Limit listener; with EvictIdle a new client is
// served anyway, in place of an idle one, while a connection with a call
// in flight (a Watch stream from a silent client) keeps its slot and its
// call. Before, the idle ones held the slots for ever and every new client
// was refused.
func TestEvictIdleLetsANewClientIn(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const idle = 200 * time.Millisecond
	ll := portmux.Limit(tl, 3).EvictIdle(idle)
	srv := grpc.NewServer(countCalls()...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ll) }()
	defer srv.Stop()
	addr := tl.Addr().String()
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}

	busy := dial()
	watch, err := healthpb.NewHealthClient(busy).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("the busy client's watch: %v", err)
	}
	holdIdle(t, addr)
	holdIdle(t, addr)
	waitOpen(t, ll, 3)

	// The holders become idle after idle; until then a new client may be
	// refused (Unavailable) and tries again, as clients do.
	newcomer := healthpb.NewHealthClient(dial())
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := newcomer.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new client with every slot held by idle connections: %v (refused %d, evicted %d)", err, ll.Refused(), ll.Evicted())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ll.Evicted() == 0 || ll.Open() != 3 {
		t.Fatalf("evicted %d, open %d; want an idle one evicted and 3 open", ll.Evicted(), ll.Open())
	}
	// More idle connections, each let in in place of the idlest: after as
	// many as there are other connections, the busy one (idle longest of
	// all) would have gone too, had its call in flight not kept it.
	for range 3 {
		waitAdmitted(t, addr)
	}
	if ll.Evicted() < 4 {
		t.Fatalf("evicted %d, want 4", ll.Evicted())
	}
	// The busy connection has read nothing for longer than idle too, but
	// its call is in flight: it must still be there.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	got, err := watch.Recv()
	if err != nil || got.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("the busy client's watch after evictions: %v, %v; want NOT_SERVING", got, err)
	}
}

// TestEvictIdleRefusesWhenNoneIsIdle: at the limit with no connection idle
// long enough, EvictIdle closes none, and the new connection is refused as
// without it.
func TestEvictIdleRefusesWhenNoneIsIdle(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := portmux.Limit(tl, 2).EvictIdle(time.Hour)
	srv := grpc.NewServer(countCalls()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ll) }()
	defer srv.Stop()
	holdIdle(t, tl.Addr().String())
	holdIdle(t, tl.Addr().String())
	waitOpen(t, ll, 2)
	cc, err := grpc.NewClient(tl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a connection past the limit, none idle long: %v, want Unavailable", err)
	}
	if ll.Refused() == 0 || ll.Evicted() != 0 {
		t.Fatalf("refused %d, evicted %d; want some refused, none evicted", ll.Refused(), ll.Evicted())
	}
}
