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
