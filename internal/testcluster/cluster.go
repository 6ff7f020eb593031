package testcluster

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/localcluster"
)

// DefaultShards is the server's default shard count, assumed when
// Options.Shards is 0.
const DefaultShards = localcluster.DefaultShards

// superviseDelay is how long a supervised node stays down before its
// restart: long enough that a test polling every 50 ms sees it down.
const superviseDelay = 500 * time.Millisecond

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
	// Redis gives every node a Redis protocol port (--redis-addr on a free
	// port); see RedisAddr.
	Redis bool
	// HTTP gives every node an HTTP front door (--http-addr on a free
	// port); see HTTPAddr.
	HTTP bool
	// ExtraArgs are appended to every node's command line, e.g.
	// "--raft-log-keep-entries=20".
	ExtraArgs []string
	// FaultInjection starts the nodes with --enable-fault-injection.
	FaultInjection bool
	// TLS starts the nodes with TLS on every port, certificates from
	// `concord certs` in CertDir; the cluster's clients and connections
	// use it (ClientOptions).
	TLS bool
	// AuthToken starts the nodes with it as --auth-token-file; the
	// cluster's clients and connections send it.
	AuthToken string
	// Supervise restarts a node that exits by itself (as after the fault
	// API's die), as `concord cluster up --supervise` does; such exits are
	// then expected, not failures.
	Supervise bool
	// ReserveDiskBytes becomes --reserve-disk-bytes, the disk space guard's
	// reserve: 0 (the zero Options') turns the guard off, so that a test
	// host with less free disk than the server's default reserve (-1: the
	// smaller of 1 GiB and 5 % of the filesystem) does not fail tests with
	// NOSPACE that are about something else. A test of the guard sets it
	// (or gives a node its own with SetNodeArgs, which comes after).
	ReserveDiskBytes int64
}

// launchConfig is the localcluster configuration for opts: binary bin, the
// nodes' data dirs and logs under dir.
func launchConfig(bin string, opts Options, dir string, onExit func(localcluster.Exit)) localcluster.Config {
	reserve := fmt.Sprintf("--reserve-disk-bytes=%d", opts.ReserveDiskBytes)
	return localcluster.Config{Binary: bin, Dir: dir, LogDir: dir,
		Nodes: cmp.Or(opts.Nodes, 3), Shards: opts.Shards, Replicas: opts.Replicas,
		LogLevel: cmp.Or(opts.LogLevel, os.Getenv("CONCORD_TEST_LOG_LEVEL"), "info"),
		// The reserve first: a flag in opts.ExtraArgs wins over it.
		ExtraArgs: append([]string{reserve}, opts.ExtraArgs...), StopTimeout: stopTimeout, OnExit: onExit,
		Redis: opts.Redis, HTTP: opts.HTTP, FaultInjection: opts.FaultInjection, Supervise: opts.Supervise,
		RestartDelay: superviseDelay, TLS: opts.TLS, AuthToken: opts.AuthToken}
}

// Cluster is a set of node processes started by one test: a
// localcluster.Cluster that reports through the test.
type Cluster struct {
	t          testing.TB
	lc         *localcluster.Cluster
	supervised bool

	mu         sync.Mutex
	unexpected []string // guarded by mu: nodes that exited unasked
}

// New allocates ports and data dirs and starts every node. It does not wait
// for the cluster to serve; see WaitReady.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t, supervised: opts.Supervise}
	dir := t.TempDir()
	lc, err := localcluster.New(launchConfig(Binary(t), opts, dir, c.onExit))
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	c.lc = lc
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(c.cleanup)
	for i := 0; i < lc.N(); i++ {
		c.Start(i)
	}
	return c
}

// onExit records a node that exited without Stop, Kill or ExpectExit.
func (c *Cluster) onExit(e localcluster.Exit) {
	if e.Asked || c.supervised {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unexpected = append(c.unexpected, fmt.Sprintf("node %d (%s, pid %d) exited unexpectedly: %v",
		e.Node, c.lc.Addr(e.Node), e.PID, e.Err))
}

// Launcher is the cluster's launcher, for what this package does not wrap.
func (c *Cluster) Launcher() *localcluster.Cluster { return c.lc }

// N is the number of nodes.
func (c *Cluster) N() int { return c.lc.N() }

// Endpoints are the nodes' addresses, by index.
func (c *Cluster) Endpoints() []string { return c.lc.Addrs() }

// Addr is node i's address.
func (c *Cluster) Addr(i int) string { return c.lc.Addr(i) }

// RedisAddr is node i's Redis protocol address ("" without Options.Redis).
func (c *Cluster) RedisAddr(i int) string { return c.lc.RedisAddr(i) }

// HTTPAddr is node i's HTTP front door address ("" without Options.HTTP).
func (c *Cluster) HTTPAddr(i int) string { return c.lc.HTTPAddr(i) }

// CertDir holds the certificates of a TLS cluster (ca.crt, node.crt,
// client.crt and their keys).
func (c *Cluster) CertDir() string { return c.lc.CertDir() }

// DataDir is node i's data directory.
func (c *Cluster) DataDir(i int) string { return c.lc.DataDir(i) }

// LogPath is node i's log file.
func (c *Cluster) LogPath(i int) string { return c.lc.LogPath(i) }

// Index returns the index of the node at addr, or -1.
func (c *Cluster) Index(addr string) int { return c.lc.Index(addr) }

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool { return c.lc.Running(i) }

// PID is the process id of node i, or 0 if it is not running.
func (c *Cluster) PID(i int) int { return c.lc.PID(i) }

// Start starts node i with its address, data dir and the cluster's peers
// (it must not be running).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if err := c.lc.Start(i); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	c.t.Logf("testcluster: started node %d at %s (pid %d)", i, c.Addr(i), c.PID(i))
}

// Stop stops node i gracefully (SIGTERM) and waits for it to exit. A node
// that does not exit within 20 s, or exits with an error, fails the test.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	start := time.Now()
	err := c.lc.Stop(i)
	if errors.Is(err, localcluster.ErrNotRunning) {
		c.t.Fatalf("testcluster: %v", err)
	} else if err != nil {
		c.t.Errorf("testcluster: %v", err)
	}
	c.t.Logf("testcluster: stopped node %d (SIGTERM, exited after %v)", i, time.Since(start).Round(time.Millisecond))
}

// Kill kills node i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	pid := c.PID(i)
	if err := c.lc.Kill(i); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	c.t.Logf("testcluster: killed node %d (SIGKILL, pid %d)", i, pid)
}

// KillAll SIGKILLs every running node at once, then waits for them all.
func (c *Cluster) KillAll() {
	c.t.Helper()
	c.t.Logf("testcluster: killed %d nodes (SIGKILL)", c.lc.KillAll())
}

// Wipe deletes node i's data dir; the node must not be running.
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	if err := c.lc.Wipe(i); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	c.t.Logf("testcluster: wiped data dir of node %d", i)
}

// cleanup kills every process by PID, reports nodes that exited unasked, and
// prints the logs' tails if the test failed.
func (c *Cluster) cleanup() {
	c.lc.Shutdown(0) // SIGKILL: a test's end needs no clean shutdown
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
	for i := 0; i < c.N(); i++ {
		if b, err := os.ReadFile(c.LogPath(i)); err == nil {
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
	for i := 0; i < c.N(); i++ {
		b, err := os.ReadFile(c.LogPath(i))
		if err != nil {
			c.t.Logf("testcluster: node %d log: %v", i, err)
			continue
		}
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		from := 0
		if lines > 0 && len(all) > lines {
			from = len(all) - lines
		}
		c.t.Logf("testcluster: node %d (%s) log, lines %d-%d of %d:\n%s", i, c.Addr(i), from+1, len(all), len(all),
			strings.Join(all[from:], "\n"))
	}
}

// Log returns everything node i has logged so far, across restarts.
func (c *Cluster) Log(i int) string {
	b, _ := os.ReadFile(c.LogPath(i))
	return string(b)
}

// LogMark returns the current length of node i's log, for LogSince.
func (c *Cluster) LogMark(i int) int64 {
	st, err := os.Stat(c.LogPath(i))
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

// SetNodeArgs gives node i flags of its own from its next start on
// (localcluster.Cluster.SetNodeArgs).
func (c *Cluster) SetNodeArgs(i int, extra ...string) { c.lc.SetNodeArgs(i, extra...) }

// AddJoiner adds a node on a free port that joins the running cluster
// through the nodes at indexes via (`server --join`), with extra flags
// after the cluster's, starts it and returns its index.
func (c *Cluster) AddJoiner(via []int, extra ...string) int {
	c.t.Helper()
	i, err := c.lc.AddJoiner(via, extra...)
	if err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	c.Start(i)
	return i
}
