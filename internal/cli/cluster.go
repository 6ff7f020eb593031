package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/concord-kv/concord/internal/localcluster"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Run a local cluster of real node processes"}
	cmd.AddCommand(newClusterUpCmd())
	return cmd
}

type clusterUpFlags struct {
	nodes, basePort, shards, replicas int
	redisBasePort, httpBasePort       int
	dataDir, host                     string
	supervise, faults, tls            bool
	restartDelay                      time.Duration
	extra                             []string
}

func newClusterUpCmd() *cobra.Command {
	var f clusterUpFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start N nodes on 127.0.0.1 (one process and data dir each); Ctrl-C stops them all",
		Args:  argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkCounts(cmd, "shards", "replicas"); err != nil {
				return err
			}
			return clusterUp(f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.nodes, "nodes", 3, "number of nodes")
	fl.IntVar(&f.basePort, "base-port", 7001, "port of the first node; the others follow")
	fl.IntVar(&f.redisBasePort, "redis-base-port", 6380, "Redis protocol port of the first node; the others follow (0: no Redis port)")
	fl.IntVar(&f.httpBasePort, "http-base-port", 8001, "HTTP port (health, /metrics, /api/status) of the first node; the others follow (0: none)")
	fl.StringVar(&f.dataDir, "data-dir", "./data", "parent directory of the nodes' data dirs")
	fl.IntVar(&f.shards, "shards", 16, "number of shards")
	fl.IntVar(&f.replicas, "replicas", 3, "replicas per shard")
	fl.StringVar(&f.host, "host", "127.0.0.1", "address the nodes listen on")
	fl.BoolVar(&f.supervise, "supervise", false, "restart any node that exits, with the same address and data dir")
	fl.DurationVar(&f.restartDelay, "restart-delay", time.Second, "with --supervise: wait this long before restarting a node")
	fl.BoolVar(&f.faults, "enable-fault-injection", false, "start the nodes with the Admin fault API on")
	fl.BoolVar(&f.tls, "tls", false, "TLS on every port: certificates are made in DATA-DIR/tls (kept for later runs); clients need --tls-ca DATA-DIR/tls/ca.crt")
	fl.StringSliceVar(&f.extra, "server-flag", nil, "extra flag passed to every node (repeatable), e.g. --server-flag=--log-level=debug")
	return cmd
}

// clusterUp starts the nodes as child processes and stops them together
// on Ctrl-C or SIGTERM.
func clusterUp(f clusterUpFlags) error {
	if f.nodes < 1 || f.basePort < 1 || f.basePort+f.nodes > 65536 || f.redisBasePort < 0 || f.redisBasePort+f.nodes > 65536 ||
		f.httpBasePort < 0 || f.httpBasePort+f.nodes > 65536 {
		return fmt.Errorf("--nodes must be positive and the ports must fit below 65536")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runClusterUp(ctx, f, self)
}

// runClusterUp starts the nodes from binary self and runs them until ctx
// ends or, without --supervise, until every node has exited by itself:
// then nothing is left to run, and the command fails rather than wait
// for a Ctrl-C (a node flag it cannot take, such as --replicas -1 or an
// unknown --server-flag, or a port in use, left `cluster up` running
// with no node, and exiting 0 once stopped).
func runClusterUp(ctx context.Context, f clusterUpFlags, self string) error {
	cfg := upConfig(f, self)
	allExited := make(chan struct{})
	var exited atomic.Int64
	report := cfg.OnExit
	cfg.OnExit = func(e localcluster.Exit) {
		report(e)
		// Unsupervised, a node that exited by itself stays down: the
		// count only grows.
		if !e.Asked && !f.supervise && exited.Add(1) == int64(f.nodes) {
			close(allExited)
		}
	}
	c, err := localcluster.Start(cfg)
	if err != nil {
		return err
	}
	printBanner(os.Stdout, f, c)
	select {
	case <-ctx.Done():
	case <-allExited:
		c.Shutdown(10 * time.Second)
		return errors.New("cluster: every node exited (their output above says why)")
	}
	fmt.Println("cluster: stopping all nodes")
	c.Shutdown(10 * time.Second)
	return nil
}

// upConfig is the launcher's configuration for the flags: consecutive
// ports from --base-port, data dirs DATA/node1..., output on stderr.
func upConfig(f clusterUpFlags, self string) localcluster.Config {
	cfg := localcluster.Config{Binary: self, Dir: f.dataDir, Shards: f.shards, Replicas: f.replicas,
		FaultInjection: f.faults, TLS: f.tls, ExtraArgs: f.extra, Supervise: f.supervise, RestartDelay: f.restartDelay,
		Output: func(i int) io.Writer { return prefixWriter(i + 1) }}
	for i := 0; i < f.nodes; i++ {
		cfg.Addrs = append(cfg.Addrs, f.host+":"+strconv.Itoa(f.basePort+i))
		if f.redisBasePort != 0 {
			cfg.RedisAddrs = append(cfg.RedisAddrs, f.host+":"+strconv.Itoa(f.redisBasePort+i))
		}
		if f.httpBasePort != 0 {
			cfg.HTTPAddrs = append(cfg.HTTPAddrs, f.host+":"+strconv.Itoa(f.httpBasePort+i))
		}
	}
	cfg.OnExit = func(e localcluster.Exit) {
		if !e.Asked { // asked: we are stopping
			fmt.Fprintf(os.Stderr, "cluster: node %d (pid %d) exited: %v\n", e.Node+1, e.PID, exitDesc(e.Err))
		}
	}
	cfg.OnRestart = func(i, pid int) {
		fmt.Fprintf(os.Stderr, "cluster: restarted node %d at %s (pid %d)\n", i+1, cfg.Addrs[i], pid)
	}
	return cfg
}

func exitDesc(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func printBanner(w io.Writer, f clusterUpFlags, c *localcluster.Cluster) {
	fmt.Fprintf(w, "Concord cluster of %s is starting; data under %s\n", counted(f.nodes, "node"), f.dataDir)
	for i, a := range c.Addrs() {
		line := fmt.Sprintf("  node %d: %s", i+1, a)
		if r := c.RedisAddr(i); r != "" {
			line += ", Redis protocol on " + r
		}
		if h := c.HTTPAddr(i); h != "" {
			line += ", HTTP on " + h
		}
		fmt.Fprintf(w, "%s (pid %d)\n", line, c.Process(i).PID())
	}
	if f.supervise {
		fmt.Fprintf(w, "Supervised: a node that exits is restarted after %v.\n", f.restartDelay)
	}
	eps := strings.Join(c.Addrs(), ",")
	tlsFlag, redisTLS, scheme, curlTLS := "", "", "http", ""
	if ca := c.CAFile(); ca != "" {
		fmt.Fprintf(w, "TLS on every port; CA certificate: %s (node and client certificates beside it)\n", ca)
		tlsFlag, redisTLS, scheme, curlTLS = " --tls-ca "+ca, " --tls --cacert "+ca, "https", " --cacert "+ca
	}
	// The command as it was run (bin/concord under make run), so that
	// the line works as pasted where concord is not on PATH.
	fmt.Fprintf(w, "Endpoints: %s\nTry:       %s put hello world --endpoints %s%s\n", eps, os.Args[0], eps, tlsFlag)
	if r := c.RedisAddr(0); r != "" {
		host, port, _ := net.SplitHostPort(r)
		fmt.Fprintf(w, "           redis-cli -h %s -p %s%s set hello world   (any node's Redis port)\n", host, port, redisTLS)
	}
	if h := c.HTTPAddr(0); h != "" {
		fmt.Fprintf(w, "           curl%s %s://%s/metrics   (also /healthz, /readyz, /api/status)\n", curlTLS, scheme, h)
	}
	fmt.Fprintln(w, "Ctrl-C stops the cluster.")
}

// prefixWriter writes a node's output to stderr, each line prefixed with the node.
func prefixWriter(node int) *lineWriter {
	return &lineWriter{prefix: fmt.Sprintf("[node%d] ", node)}
}

type lineWriter struct {
	mu     sync.Mutex
	prefix string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(os.Stderr, "%s%s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
