package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/version"
)

// TestIdleGRPCConnectionsClosedClientsCarryOn: the node closes a gRPC
// connection with no call in flight for GRPCMaxConnIdle (a GOAWAY), and
// the Go client's next call, unary or on a KV.Stream, succeeds on a new
// one, as does a plain Dial connection's (the nodes' own to each other).
// Before, idle connections stayed open for ever, holding --grpc-max-conns'
// slots.
func TestIdleGRPCConnectionsClosedClientsCarryOn(t *testing.T) {
	n := startSolo(t, func(c *Config) { c.GRPCMaxConnIdle = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := dial.Dial(n.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cluster := concordpb.NewClusterClient(cc)
	var clients []*client.Client
	for _, o := range []client.Options{{Unary: true}, {Wire: client.WireGRPC}} {
		o.Endpoints = []string{n.cfg.Addr}
		cl, err := client.NewWithOptions(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	for round := range 3 {
		for i, cl := range clients {
			key := fmt.Appendf(nil, "idle-%d", i)
			if _, _, err := cl.Put(ctx, key, fmt.Appendf(nil, "v%d", round)); err != nil {
				t.Fatalf("round %d, client %d: a put after its connection idled: %v", round, i, err)
			}
		}
		if _, err := cluster.RoutingTable(ctx, &concordpb.RoutingTableRequest{}); err != nil {
			t.Fatalf("round %d: a call on a Dial connection after it idled: %v", round, err)
		}
		// Made last, the Dial connection's close says the clients' have
		// been idle as long: it leaves READY on the node's GOAWAY.
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		left := cc.WaitForStateChange(wctx, connectivity.Ready)
		wcancel()
		if !left {
			t.Fatalf("round %d: a connection idle for 10 s still open; want it closed after %v", round, n.cfg.GRPCMaxConnIdle)
		}
	}
}

// TestGRPCIdleHoldersDoNotLockOutClients: connections that open and then
// sit silent fill --grpc-max-conns; new ones are served anyway, each in
// place of the one idle longest, and a Go client gets in, while a
// connection whose KV.Stream is open (a call in flight, though its client
// has sent nothing for longer than the others) keeps its stream. Before,
// the silent connections held every slot for ever: every new client was
// refused.
func TestGRPCIdleHoldersDoNotLockOutClients(t *testing.T) {
	const maxConns = 4
	n := startSolo(t, func(c *Config) {
		c.GRPCMaxConns = maxConns
		c.GRPCEvictIdleAfter = 200 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// No keepalive pings: this client sends nothing once its stream is open.
	busy, err := grpc.NewClient(n.cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	stream, err := concordpb.NewKVClient(busy).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ping := func(id uint64) error {
		if err := stream.Send(&concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: id,
			Request: &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}}}}); err != nil {
			return err
		}
		_, err := stream.Recv()
		return err
	}
	if err := ping(1); err != nil {
		t.Fatalf("the busy client's stream: %v", err)
	}
	for range maxConns + 3 {
		admitIdleHolder(t, n.cfg.Addr)
	}
	if got := n.grpcLis.Evicted(); got < 3 {
		t.Fatalf("%d idle connections evicted, want at least 3 (%d held past a limit of %d)", got, maxConns+3, maxConns)
	}
	cl, err := client.NewWithOptions(ctx, client.Options{Endpoints: []string{n.cfg.Addr}, Unary: true})
	if err != nil {
		t.Fatalf("a new client with the slots held by idle connections: %v", err)
	}
	defer cl.Close()
	if _, _, err := cl.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("a put from a new client with the slots held by idle connections: %v", err)
	}
	if err := ping(2); err != nil {
		t.Fatalf("the busy client's stream after the evictions: %v", err)
	}
}

// admitIdleHolder opens connections to addr that say they are HTTP/2 (the
// preface and an empty SETTINGS frame) and then sit silent, until one is
// served (the node's SETTINGS come back) rather than closed at once.
func admitIdleHolder(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(deadline)
		_, err = c.Read(make([]byte, 1))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a silent gRPC connection never served: %v", err)
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForwardsCarryOnAcrossIdleCloses: a node's own connections to its
// peers (Dial's, here the one a follower forwards KV calls on) are closed
// by the peer after GRPCMaxConnIdle like any other, and the next forward on
// them succeeds: the caller, calling the follower directly with no retries
// of its own, sees no error.
func TestForwardsCarryOnAcrossIdleCloses(t *testing.T) {
	nodes, _ := startClusterWith(t, make([]version.Level, 3), func(_ int, c *Config, _ *testHooks) {
		c.GRPCMaxConnIdle = 150 * time.Millisecond
		// Heartbeats leave the connections idle between them.
		c.HeartbeatInterval = time.Second
	})
	var follower *Node
	var leaderAddr string
	waitFor(t, 20*time.Second, func() error {
		for _, n := range nodes {
			if l, local := n.leaderOf(1); !local && l != 0 {
				if addr, ok := n.book.resolve(l); ok {
					follower, leaderAddr = n, addr
					return nil
				}
			}
		}
		return errors.New("no follower of shard 1 knows its leader's address yet")
	})
	cc, err := dial.Dial(follower.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := concordpb.NewKVClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peer, err := follower.conns.get(leaderAddr)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("fwd"), Value: fmt.Appendf(nil, "v%d", round)}); err != nil {
			t.Fatalf("round %d: a put forwarded on a connection the leader closed for idleness: %v", round, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		left := peer.WaitForStateChange(wctx, connectivity.Ready)
		wcancel()
		if !left {
			t.Fatalf("round %d: the follower's connection to the leader still open after 10 s idle; want it closed after %v", round, 150*time.Millisecond)
		}
	}
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("fwd"), Value: []byte("last")}); err != nil {
		t.Fatalf("a put forwarded on a connection the leader closed for idleness: %v", err)
	}
}
