package dial

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/concord-kv/concord/internal/portmux"
)

// blackHole is a TCP proxy on 127.0.0.1 that, once cut, keeps its
// connections open but forwards nothing: a peer that is paused or whose
// packets are dropped, which TCP alone does not notice for many minutes.
type blackHole struct {
	lis net.Listener
	cut atomic.Bool
}

func newBlackHole(t *testing.T, backend string) *blackHole {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				in.Close()
				continue
			}
			t.Cleanup(func() { in.Close(); out.Close() })
			go b.pipe(out, in)
			go b.pipe(in, out)
		}
	}()
	return b
}

// pipe copies src to dst until src fails, dropping everything once cut.
func (b *blackHole) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if !b.cut.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// TestKeepaliveNoticesABlackHoledPeer protects every Concord connection
// (client to node, node to node, raft streams) from hanging on a peer that
// stopped answering: keepalive pings find it out within Time+Timeout and
// the connection leaves READY, so that new calls redial instead of
// queueing behind a dead TCP connection. It takes about 13 s (gRPC will not
// ping more often than every 10 s).
func TestKeepaliveNoticesABlackHoledPeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(KeepaliveEnforcement))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	proxy := newBlackHole(t, lis.Addr().String())

	conn, err := Dial(proxy.lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check through the proxy: %v", err)
	}
	if s := conn.GetState(); s != connectivity.Ready {
		t.Fatalf("state %v after a call, want READY", s)
	}

	proxy.cut.Store(true)
	start := time.Now()
	limit := Keepalive.Time + Keepalive.Timeout + 5*time.Second
	wctx, wcancel := context.WithTimeout(context.Background(), limit)
	defer wcancel()
	if !conn.WaitForStateChange(wctx, connectivity.Ready) {
		t.Fatalf("connection still READY %v after its peer went silent; keepalive should close it within %v",
			time.Since(start), Keepalive.Time+Keepalive.Timeout)
	}
	t.Logf("connection left READY %v after the peer went silent (now %v)", time.Since(start).Round(time.Millisecond), conn.GetState())
}

// TestIdleConnectionClosedAndRedialled: a server with ServerKeepalive
// closes a connection that has had no call in flight for
// MaxConnectionIdle (with a GOAWAY), and the
// client's next call, on Dial's connection, succeeds on a new one.
// Before, idle connections stayed open for ever, holding the server's
// connection slots. Calls made as the server closes the connection (each
// one just as it has been idle for MaxConnectionIdle) never fail either:
// the close is graceful, and gRPC retries a call it refused.
func TestIdleConnectionClosedAndRedialled(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := portmux.Limit(lis, 100) // counts the server's open connections
	kp := ServerKeepalive
	kp.MaxConnectionIdle = 100 * time.Millisecond
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(KeepaliveEnforcement), grpc.KeepaliveParams(kp))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ll) }()
	t.Cleanup(srv.Stop)
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("a call on a connection the server closed for idleness: %v", err)
		}
	}
	for range 3 {
		check()
		deadline := time.Now().Add(10 * time.Second)
		for ll.Open() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still open %v after the last call; want them closed after %v idle", ll.Open(), 10*time.Second, kp.MaxConnectionIdle)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Pacing, not synchronisation: calls spaced around MaxConnectionIdle
	// land on the server's close in every phase of it.
	for i := range 40 {
		check()
		time.Sleep(kp.MaxConnectionIdle - 10*time.Millisecond + time.Duration(i%20)*time.Millisecond)
	}
}
