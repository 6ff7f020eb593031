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
	fl.StringSliceVar(&f.extra, "server-flag", nil, "extra flag passed to every node (repeatable), e.g. --server-flag=--log-level=debug")
	return cmd
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
	addrs := make([]string, f.nodes)
	for i := range addrs {
		addrs[i] = f.host + ":" + strconv.Itoa(f.basePort+i)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var procs []*exec.Cmd
	var wg sync.WaitGroup
	for i, addr := range addrs {
		dir := filepath.Join(f.dataDir, fmt.Sprintf("node%d", i+1))
		args := append([]string{"server", "--addr", addr, "--data-dir", dir, "--peers", strings.Join(addrs, ","),
			"--shards", strconv.Itoa(f.shards), "--replicas", strconv.Itoa(f.replicas)}, f.extra...)
		c := exec.Command(self, args...)
		c.Stdout, c.Stderr = prefixWriter(i+1), prefixWriter(i+1)
		// If this process dies, even by SIGKILL, its nodes die with it.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stopAll(procs)
			return fmt.Errorf("start node %d: %w", i+1, err)
		}
		procs = append(procs, c)
		wg.Add(1)
		go func(i int, c *exec.Cmd) {
			defer wg.Done()
			err := c.Wait()
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "cluster: node %d (pid %d) exited: %v\n", i+1, c.Process.Pid, err)
			}
		}(i, c)
	}
	fmt.Printf("Concord cluster of %d nodes is starting; data under %s\n", f.nodes, f.dataDir)
	for i, a := range addrs {
		fmt.Printf("  node %d: %s (pid %d)\n", i+1, a, procs[i].Process.Pid)
	}
	fmt.Printf("Endpoints: %s\nTry:       concord put hello world --endpoints %s\nCtrl-C stops the cluster.\n",
		strings.Join(addrs, ","), strings.Join(addrs, ","))
	<-ctx.Done()
	fmt.Println("cluster: stopping all nodes")
	stopAll(procs)
	wg.Wait()
	return nil
}

// stopAll sends SIGTERM to every node and SIGKILL to those still running
// after a grace period.
func stopAll(procs []*exec.Cmd) {
	for _, c := range procs {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range procs {
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
