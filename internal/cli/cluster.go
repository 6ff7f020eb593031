package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Run a local cluster of real node processes"}
	cmd.AddCommand(newClusterUpCmd())
	return cmd
}

type clusterUpFlags struct {
	nodes, basePort, shards, replicas int
	dataDir, host                     string
	supervise, faults                 bool
	restartDelay                      time.Duration
	extra                             []string
}

func newClusterUpCmd() *cobra.Command {
	var f clusterUpFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start N nodes on 127.0.0.1 (one process and data dir each); Ctrl-C stops them all",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return clusterUp(f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.nodes, "nodes", 3, "number of nodes")
	fl.IntVar(&f.basePort, "base-port", 7001, "port of the first node; the others follow")
	fl.StringVar(&f.dataDir, "data-dir", "./data", "parent directory of the nodes' data dirs")
	fl.IntVar(&f.shards, "shards", 16, "number of shards")
	fl.IntVar(&f.replicas, "replicas", 3, "replicas per shard")
	fl.StringVar(&f.host, "host", "127.0.0.1", "address the nodes listen on")
	fl.BoolVar(&f.supervise, "supervise", false, "restart any node that exits, with the same address and data dir")
	fl.DurationVar(&f.restartDelay, "restart-delay", time.Second, "with --supervise: wait this long before restarting a node")
	fl.BoolVar(&f.faults, "enable-fault-injection", false, "start the nodes with the Admin fault API on")
	fl.StringSliceVar(&f.extra, "server-flag", nil, "extra flag passed to every node (repeatable), e.g. --server-flag=--log-level=debug")
	return cmd
}

// localCluster is a set of node processes started by `cluster up`.
type localCluster struct {
	f     clusterUpFlags
	self  string
	addrs []string
	ctx   context.Context // ends on Ctrl-C or SIGTERM

	mu    sync.Mutex
	procs []*exec.Cmd // guarded by mu: the running process of each node, nil while down
}

// clusterUp starts the nodes as child processes and stops them together.
func clusterUp(f clusterUpFlags) error {
	if f.nodes < 1 || f.basePort < 1 || f.basePort+f.nodes > 65536 {
		return fmt.Errorf("--nodes must be positive and the ports must fit below 65536")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lc := &localCluster{f: f, self: self, ctx: ctx, procs: make([]*exec.Cmd, f.nodes)}
	for i := 0; i < f.nodes; i++ {
		lc.addrs = append(lc.addrs, f.host+":"+strconv.Itoa(f.basePort+i))
	}
	var wg sync.WaitGroup
	for i := range lc.addrs {
		if err := lc.start(i); err != nil {
			lc.stopAll()
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); lc.watch(i) }()
	}
	lc.printBanner()
	<-ctx.Done()
	fmt.Println("cluster: stopping all nodes")
	lc.stopAll()
	wg.Wait()
	return nil
}

func (lc *localCluster) start(i int) error {
	dir := filepath.Join(lc.f.dataDir, fmt.Sprintf("node%d", i+1))
	args := []string{"server", "--addr", lc.addrs[i], "--data-dir", dir, "--peers", strings.Join(lc.addrs, ","),
		"--shards", strconv.Itoa(lc.f.shards), "--replicas", strconv.Itoa(lc.f.replicas)}
	if lc.f.faults {
		args = append(args, "--enable-fault-injection")
	}
	c := exec.Command(lc.self, append(args, lc.f.extra...)...)
	c.Stdout, c.Stderr = prefixWriter(i+1), prefixWriter(i+1)
	// If this process dies, even by SIGKILL, its nodes die with it.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start node %d: %w", i+1, err)
	}
	lc.mu.Lock()
	lc.procs[i] = c
	lc.mu.Unlock()
	return nil
}

// watch waits for node i to exit and, when supervising, restarts it.
func (lc *localCluster) watch(i int) {
	for {
		lc.mu.Lock()
		c := lc.procs[i]
		lc.mu.Unlock()
		err := c.Wait()
		lc.mu.Lock()
		lc.procs[i] = nil
		lc.mu.Unlock()
		if lc.ctx.Err() != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "cluster: node %d (pid %d) exited: %v\n", i+1, c.Process.Pid, exitDesc(err))
		if !lc.f.supervise {
			return
		}
		select {
		case <-lc.ctx.Done():
			return
		case <-time.After(lc.f.restartDelay):
		}
		for lc.start(i) != nil {
			select {
			case <-lc.ctx.Done():
				return
			case <-time.After(lc.f.restartDelay):
			}
		}
		lc.mu.Lock()
		pid := lc.procs[i].Process.Pid
		lc.mu.Unlock()
		fmt.Fprintf(os.Stderr, "cluster: restarted node %d at %s (pid %d)\n", i+1, lc.addrs[i], pid)
	}
}

func exitDesc(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (lc *localCluster) printBanner() {
	fmt.Printf("Concord cluster of %d nodes is starting; data under %s\n", lc.f.nodes, lc.f.dataDir)
	lc.mu.Lock()
	for i, a := range lc.addrs {
		fmt.Printf("  node %d: %s (pid %d)\n", i+1, a, lc.procs[i].Process.Pid)
	}
	lc.mu.Unlock()
	if lc.f.supervise {
		fmt.Printf("Supervised: a node that exits is restarted after %v.\n", lc.f.restartDelay)
	}
	eps := strings.Join(lc.addrs, ",")
	fmt.Printf("Endpoints: %s\nTry:       concord put hello world --endpoints %s\nCtrl-C stops the cluster.\n", eps, eps)
}

// stopAll sends SIGTERM to every node and SIGKILL to those still running
// after a grace period.
func (lc *localCluster) stopAll() {
	lc.mu.Lock()
	procs := append([]*exec.Cmd(nil), lc.procs...)
	lc.mu.Unlock()
	for _, c := range procs {
		if c != nil {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range procs {
		if c == nil {
			continue
		}
		for time.Now().Before(deadline) && c.Process.Signal(syscall.Signal(0)) == nil {
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Process.Kill()
	}
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
