package testcluster

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// DefaultShards is the server's default shard count, assumed when
// Options.Shards is 0.
const DefaultShards = 16

// stopTimeout bounds how long a node may take to exit after SIGTERM.
const stopTimeout = 20 * time.Second

// Options configures a cluster.
type Options struct {
	// Nodes is the number of nodes; 0 means 3.
	Nodes int
	// Shards and Replicas become --shards and --replicas; 0 leaves the
	// server's default.
	Shards, Replicas int
	// LogLevel becomes --log-level; "" means $CONCORD_TEST_LOG_LEVEL, or info.
	LogLevel string
	// ExtraArgs are appended to every node's command line, e.g.
	// "--raft-log-keep-entries=20".
	ExtraArgs []string
}

// Cluster is a set of node processes started by one test.
type Cluster struct {
	t     testing.TB
	opts  Options
	bin   string
	dir   string
	peers []string
	nodes []*node

	mu         sync.Mutex
	unexpected []string                 // guarded by mu: nodes that exited unasked
	conns      map[int]*grpc.ClientConn // guarded by mu
}

type node struct {
	index   int
	addr    string
	dataDir string
	logPath string
	starts  int      // number of times started; only the test goroutine touches it
	proc    *process // guarded by Cluster.mu; nil when not running
}

type process struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited and been reaped
	err      error         // the exit error, valid once done is closed
	expected atomic.Bool   // Stop or Kill asked the process to exit
}

// New allocates ports and data dirs and starts every node. It does not wait
// for the cluster to serve; see WaitReady.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.LogLevel == "" {
		opts.LogLevel = cmp.Or(os.Getenv("CONCORD_TEST_LOG_LEVEL"), "info")
	}
	c := &Cluster{t: t, opts: opts, bin: Binary(t), dir: t.TempDir(), conns: map[int]*grpc.ClientConn{}}
	for i := 0; i < opts.Nodes; i++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c.peers = append(c.peers, addr)
		dir := filepath.Join(c.dir, fmt.Sprintf("node%d", i))
		c.nodes = append(c.nodes, &node{index: i, addr: addr, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "node.log")})
	}
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(c.cleanup)
	for i := range c.nodes {
		c.Start(i)
	}
	return c
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(c.nodes) }

// Endpoints are the nodes' addresses, by index.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.peers...) }

// Addr is node i's address.
func (c *Cluster) Addr(i int) string { return c.nodes[i].addr }

// DataDir is node i's data directory.
func (c *Cluster) DataDir(i int) string { return c.nodes[i].dataDir }

// LogPath is node i's log file.
func (c *Cluster) LogPath(i int) string { return c.nodes[i].logPath }

// Index returns the index of the node at addr, or -1.
func (c *Cluster) Index(addr string) int {
	for i, n := range c.nodes {
		if n.addr == addr {
			return i
		}
	}
	return -1
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool {
	p := c.proc(i)
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// PID is the process id of node i, or 0 if it is not running.
func (c *Cluster) PID(i int) int {
	if p := c.proc(i); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

func (c *Cluster) proc(i int) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].proc
}

// Start starts node i with its address, data dir and the cluster's peers
// (it must not be running).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	c.mu.Lock()
	running := n.proc != nil
	c.mu.Unlock()
	if running {
		c.t.Fatalf("testcluster: Start(%d): node is already running", i)
	}
	if err := os.MkdirAll(filepath.Dir(n.logPath), 0o755); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	defer f.Close() // the child holds its own copy
	n.starts++
	args := []string{"server", "--addr", n.addr, "--data-dir", n.dataDir, "--peers", strings.Join(c.peers, ","),
		"--log-level", c.opts.LogLevel}
	if c.opts.Shards != 0 {
		args = append(args, "--shards", strconv.Itoa(c.opts.Shards))
	}
	if c.opts.Replicas != 0 {
		args = append(args, "--replicas", strconv.Itoa(c.opts.Replicas))
	}
	args = append(args, c.opts.ExtraArgs...)
	fmt.Fprintf(f, "=== testcluster: start #%d of node %d at %s: concord %s\n",
		n.starts, i, time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The node dies with the test binary, even if that is SIGKILLed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("testcluster: start node %d: %v", i, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	n.proc = p
	c.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		if !p.expected.Load() {
			c.mu.Lock()
			c.unexpected = append(c.unexpected, fmt.Sprintf("node %d (%s, pid %d) exited unexpectedly: %v",
				i, n.addr, cmd.Process.Pid, p.err))
			c.mu.Unlock()
		}
	}()
	c.t.Logf("testcluster: started node %d at %s (pid %d, start #%d)", i, n.addr, cmd.Process.Pid, n.starts)
}

// take detaches node i's process, failing the test if it is not running.
func (c *Cluster) take(i int, op string) *process {
	c.t.Helper()
	c.mu.Lock()
	p := c.nodes[i].proc
	c.nodes[i].proc = nil
	c.mu.Unlock()
	if p == nil {
		c.t.Fatalf("testcluster: %s(%d): node is not running", op, i)
	}
	p.expected.Store(true)
	return p
}

// Stop stops node i gracefully (SIGTERM) and waits for it to exit. A node
// that does not exit within 20 s, or exits with an error, fails the test.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	p := c.take(i, "Stop")
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		c.t.Errorf("testcluster: node %d did not exit within %v of SIGTERM; killing it", i, stopTimeout)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if p.err != nil {
		c.t.Errorf("testcluster: node %d exited with %v after SIGTERM (want a clean exit)", i, p.err)
	}
	c.t.Logf("testcluster: stopped node %d (SIGTERM, exited after %v)", i, time.Since(start).Round(time.Millisecond))
}

// Kill kills node i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	p := c.take(i, "Kill")
	_ = p.cmd.Process.Kill()
	<-p.done
	c.t.Logf("testcluster: killed node %d (SIGKILL, pid %d)", i, p.cmd.Process.Pid)
}

// KillAll SIGKILLs every running node at once, then waits for them all.
func (c *Cluster) KillAll() {
	c.t.Helper()
	var ps []*process
	for i := range c.nodes {
		if c.Running(i) {
			ps = append(ps, c.take(i, "KillAll"))
		}
	}
	for _, p := range ps {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range ps {
		<-p.done
	}
	c.t.Logf("testcluster: killed %d nodes (SIGKILL)", len(ps))
}

// Wipe deletes node i's data dir; the node must not be running.
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	if c.proc(i) != nil {
		c.t.Fatalf("testcluster: Wipe(%d): node is running", i)
	}
	if err := os.RemoveAll(c.nodes[i].dataDir); err != nil {
		c.t.Fatalf("testcluster: wipe node %d: %v", i, err)
	}
	c.t.Logf("testcluster: wiped data dir of node %d", i)
}

// cleanup kills every process by PID, reports nodes that exited unasked, and
// prints the logs' tails if the test failed.
func (c *Cluster) cleanup() {
	c.mu.Lock()
	var ps []*process
	for _, n := range c.nodes {
		if n.proc != nil {
			ps = append(ps, n.proc)
			n.proc.expected.Store(true)
			n.proc = nil
		}
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = map[int]*grpc.ClientConn{}
	c.mu.Unlock()
	for _, p := range ps {
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	}
	for _, p := range ps {
		<-p.done
	}
	c.mu.Lock()
	for _, u := range c.unexpected {
		c.t.Errorf("testcluster: %s", u)
	}
	c.mu.Unlock()
	if c.t.Failed() {
		c.dumpLogs()
		c.keepLogs()
	}
}

// keepLogs copies the nodes' logs to $CONCORD_TEST_KEEP_LOGS/<test name>/
// when that variable is set, for a failed test.
func (c *Cluster) keepLogs() {
	root := os.Getenv("CONCORD_TEST_KEEP_LOGS")
	if root == "" {
		return
	}
	dir := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(c.t.Name()),
		time.Now().Format("20060102-150405.000"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Logf("testcluster: keep logs: %v", err)
		return
	}
	for i, n := range c.nodes {
		if b, err := os.ReadFile(n.logPath); err == nil {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("node%d.log", i)), b, 0o644)
		}
	}
	c.t.Logf("testcluster: node logs kept in %s", dir)
}

func (c *Cluster) dumpLogs() {
	lines := 60
	if v, err := strconv.Atoi(os.Getenv("CONCORD_TEST_LOG_LINES")); err == nil {
		lines = v
	}
	for i, n := range c.nodes {
		b, err := os.ReadFile(n.logPath)
		if err != nil {
			c.t.Logf("testcluster: node %d log: %v", i, err)
			continue
		}
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		from := 0
		if lines > 0 && len(all) > lines {
			from = len(all) - lines
		}
		c.t.Logf("testcluster: node %d (%s) log, lines %d-%d of %d:\n%s", i, n.addr, from+1, len(all), len(all),
			strings.Join(all[from:], "\n"))
	}
}

// Log returns everything node i has logged so far, across restarts.
func (c *Cluster) Log(i int) string {
	b, _ := os.ReadFile(c.nodes[i].logPath)
	return string(b)
}

// LogMark returns the current length of node i's log, for LogSince.
func (c *Cluster) LogMark(i int) int64 {
	st, err := os.Stat(c.nodes[i].logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// LogSince returns what node i logged after mark (from LogMark).
func (c *Cluster) LogSince(i int, mark int64) string {
	s := c.Log(i)
	if int64(len(s)) < mark {
		return ""
	}
	return s[mark:]
}

var ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// FreePort returns a TCP port on 127.0.0.1 that the OS reported free, never
// the same one twice in one test binary.
func FreePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ports.used[port] {
			ports.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port found")
}
