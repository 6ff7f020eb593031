package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/version"
)

// freeAddrs returns n loopback addresses nothing listens on.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return out
}

// TestBootstrapAfterPeersProbedAndVanished protects the start of a
// cluster whose nodes came up a moment apart (the hardening acceptance
// check): node 2's own probes failed while its peers were not yet
// listening; they then probed node 2, bootstrapped with its answer, served,
// and one of them died before node 2 probed again. Node 2 must bootstrap
// under its initial id anyway (the cluster needs its replicas for a
// quorum), on the strength of the probes it received: a node that probes
// has no identity and has seen no node.
func TestBootstrapAfterPeersProbedAndVanished(t *testing.T) {
	peers := sortedPeers(freeAddrs(t, 3))
	self := peers[1] // initial id 2; nothing will ever listen at peers[0] and peers[2]
	cfg := testConfig()
	cfg.Addr, cfg.Peers, cfg.DataDir = self, peers, t.TempDir()
	cfg.Shards = 1
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	started := make(chan error, 1)
	go func() { started <- n.Start(context.Background()) }()

	conn, err := dial.Dial(self)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hash := peersHash(peers)
	for i, from := range []string{peers[0], peers[2]} {
		probeUntilAnswered(t, conn, &concordpb.ProbeRequest{FromAddress: from, PeersHash: hash, InitialNodeId: uint64(2*i + 1)})
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("node 2 still waits for peers that probed it and bootstrapped, then vanished")
	}
	if n.ID() != 2 {
		t.Fatalf("node started as %d, want its initial id 2", n.ID())
	}
}

// probeUntilAnswered sends req until the node (still starting) answers it.
func probeUntilAnswered(t *testing.T, conn *grpc.ClientConn, req *concordpb.ProbeRequest) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := concordpb.NewClusterClient(conn).Probe(ctx, req)
		cancel()
		if err == nil {
			if resp.GetInitialized() {
				t.Fatalf("a node still waiting for its peers answered %v", resp)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polls until the node listens
	}
}

// TestProbesThatDoNotVouch protects the bootstrap rule from probes that
// say nothing about this node's cluster: from an address outside --peers,
// from the node's own address, or from a node given another peer list.
func TestProbesThatDoNotVouch(t *testing.T) {
	peers := sortedPeers([]string{"10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"})
	n := &Node{cfg: Config{Addr: peers[1], Peers: peers}, boot: newBootEvidence()}
	hash := peersHash(peers)
	for _, req := range []*concordpb.ProbeRequest{
		{FromAddress: "10.0.0.9:7001", PeersHash: hash},
		{FromAddress: peers[1], PeersHash: hash},
		{FromAddress: peers[0], PeersHash: hash + 1},
	} {
		n.heardFreshPeer(req)
	}
	if got := n.boot.missing(peers, peers[1]); !slices.Equal(got, []string{peers[0], peers[2]}) {
		t.Fatalf("peers still to vouch: %v, want both others", got)
	}
	n.heardFreshPeer(&concordpb.ProbeRequest{FromAddress: peers[2], PeersHash: hash})
	if got := n.boot.missing(peers, peers[1]); !slices.Equal(got, []string{peers[0]}) {
		t.Fatalf("peers still to vouch after a good probe from %s: %v", peers[2], got)
	}
}

// TestFreshPeerWithAnotherPeerListDoesNotVouch protects against two
// clusters forming from peer lists that differ between nodes: A and C
// started with --peers A,B,C while B and D were started with --peers
// A,B,D. A fresh B answering A's probe must not count as B's vouch for A's
// initial id, or A and C bootstrap one cluster (expecting B as node 2)
// while B and D bootstrap another (expecting A as node 1), each with a
// quorum of its meta shard, both serving.
func TestFreshPeerWithAnotherPeerListDoesNotVouch(t *testing.T) {
	addrs := sortedPeers(freeAddrs(t, 4))
	a, b, c, d := addrs[0], addrs[1], addrs[2], addrs[3]
	newNode := func(addr string, peers []string) *Node {
		cfg := testConfig()
		cfg.Addr, cfg.Peers, cfg.DataDir = addr, peers, t.TempDir()
		cfg.Shards = 1
		cfg.Logger = slog.New(slog.DiscardHandler)
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// B, fresh, waits for A and D, which never answer.
	nb := newNode(b, []string{a, b, d})
	t.Cleanup(nb.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- nb.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-started })

	// A, with the other list, probes B until B answers.
	pa := sortedPeers([]string{a, b, c})
	na := newNode(a, pa)
	waitFor(t, 20*time.Second, func() error {
		if _, err := na.probe(context.Background(), b, peersHash(pa), 1); err != nil {
			return err
		}
		return nil
	})
	if dec, _ := na.probePeers(context.Background(), pa, peersHash(pa), 1); dec != decideWait {
		t.Fatalf("decision %v with C silent, want to wait", dec)
	}
	if missing := na.boot.missing(pa, a); !slices.Contains(missing, b) {
		t.Fatalf("B, started with --peers %s,%s,%s, vouched for A's initial id under --peers %s: still missing %v",
			a, b, d, strings.Join(pa, ","), missing)
	}
}

// TestWipedNodeJoinsWhenThePeerThatSawItDies: a wiped node restarted with
// its --peers joins through the peer whose probe answer said its initial id
// was seen. If that peer dies before the join is answered, the node must
// join through another member (any forwards to the placement leader), not
// retry the dead one until it is restarted by hand.
func TestWipedNodeJoinsWhenThePeerThatSawItDies(t *testing.T) {
	nodes, cfgs := startCluster(t, make([]version.Level, 5)) // 5 replicas of each shard: a quorum survives two nodes
	// Node 1 (first in the peer list, so the first node 2 probes) has
	// heard from node 2: it answers that id 2 was seen.
	waitFor(t, 20*time.Second, func() error {
		if !nodes[0].seen.has(2) {
			return fmt.Errorf("node %d has not heard from node 2 yet", nodes[0].ID())
		}
		return nil
	})
	nodes[1].Stop()
	cfg := cfgs[1]
	cfg.DataDir = t.TempDir() // node 2's disk is lost
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	n.testHooks.joinVia = func(via string) {
		for _, m := range nodes {
			if m.cfg.Addr == via {
				m.Stop()
				return
			}
		}
		t.Errorf("join decided through %s, not a peer", via)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("wiped node 2 did not join once the peer that saw it died: %v", err)
	}
	if n.ID() <= 5 {
		t.Fatalf("wiped node joined as %d, want a new id", n.ID())
	}
}
