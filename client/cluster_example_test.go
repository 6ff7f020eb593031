package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/localcluster"
	"github.com/concord-kv/concord/internal/node"
)

// endpoints returns the addresses of the three nodes the examples talk
// to, starting them on first use. In a program of yours they are your
// nodes' addresses, for example "10.0.0.1:7001".
func endpoints() []string {
	cluster.once.Do(startCluster)
	if cluster.err != nil {
		// An example cannot fail otherwise than by its output: stop here,
		// with the reason, rather than print what was not checked.
		fmt.Fprintln(os.Stderr, "example cluster:", cluster.err)
		stopCluster()
		os.Exit(1)
	}
	return cluster.addrs
}

// cluster is the examples' cluster: real nodes (gRPC and framed TCP on
// 127.0.0.1, Raft, Pebble with fsync) run in this process, on ports the
// OS picked. It starts at the first example that asks for it, so that the
// package's tests, which run before the examples, run without it (an
// allocation count is process-wide) and a run of tests alone never
// starts it.
var cluster struct {
	once  sync.Once
	dir   string
	nodes []*node.Node
	addrs []string
	err   error
}

// TestMain runs the package's tests and examples, then stops the
// examples' cluster if one started.
func TestMain(m *testing.M) {
	code := m.Run()
	stopCluster()
	os.Exit(code)
}

func startCluster() {
	cluster.dir, cluster.err = os.MkdirTemp("", "concord-client-examples-")
	if cluster.err == nil {
		cluster.nodes, cluster.addrs, cluster.err = startExampleCluster(cluster.dir)
	}
}

// stopCluster stops every node made and removes their data.
func stopCluster() {
	for _, n := range cluster.nodes {
		n.Stop()
	}
	if cluster.dir != "" {
		os.RemoveAll(cluster.dir)
	}
}

// exampleShards is the cluster's shard count: a few, so that scans and
// batches cross shard boundaries, and few enough to start quickly.
const exampleShards = 4

// startExampleCluster starts three nodes in data dirs under dir and
// returns their addresses, and every node it made, started or not, for
// the caller to stop. The nodes start concurrently: each Start waits for
// its peers to bootstrap.
func startExampleCluster(dir string) (nodes []*node.Node, addrs []string, err error) {
	ports, err := localcluster.FreePorts(3)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range ports {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // stdout is the examples' output
	for i, a := range addrs {
		n, err := node.New(node.Config{Addr: a, DataDir: fmt.Sprintf("%s/node%d", dir, i+1), Peers: addrs,
			Shards: exampleShards, Logger: quiet})
		if err != nil {
			return nodes, nil, err
		}
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.Start(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nodes, nil, fmt.Errorf("node %d: %w", i+1, err)
		}
	}
	return nodes, addrs, nil
}

// replyHolder is a TCP proxy to one node that can hold back the node's
// replies while still passing the client's requests on: a request then
// reaches the node, and may apply, while its answer does not come back,
// as when a network loses a reply. Example_ambiguous uses it.
type replyHolder struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	held  bool       // guarded by mu: replies wait while set
	conns []net.Conn // guarded by mu: both ends of every connection, for close
}

// newReplyHolder listens on 127.0.0.1 (an OS-picked port) and forwards
// every connection to target.
func newReplyHolder(target string) (*replyHolder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &replyHolder{l: l, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	return p, nil
}

// Addr is the proxy's address, for the client's endpoints.
func (p *replyHolder) Addr() string { return p.l.Addr().String() }

// Hold makes the node's replies wait, from now on, until Release.
func (p *replyHolder) Hold() { p.set(true) }

// Release lets the replies held, and any later ones, through.
func (p *replyHolder) Release() { p.set(false) }

func (p *replyHolder) set(held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = held
	p.cond.Broadcast()
}

// Close stops listening and closes every connection.
func (p *replyHolder) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	p.cond.Broadcast()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *replyHolder) serve() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go p.replies(out, in)
	}
}

// replies copies the node's bytes to the client, each read waiting while
// replies are held.
func (p *replyHolder) replies(node, client net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := node.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
