package localcluster

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// DefaultShards is the server's default shard count, which WaitReady
// expects when Config.Shards is 0.
const DefaultShards = 16

// DefaultStopTimeout is how long Stop waits after SIGTERM when
// Config.StopTimeout is 0.
const DefaultStopTimeout = 20 * time.Second

var (
	// ErrNotRunning: the node has no running process to stop or signal.
	ErrNotRunning = errors.New("node is not running")
	// ErrRunning: the node must be down for Start or Wipe.
	ErrRunning = errors.New("node is already running")
	// ErrShutdown: the cluster was shut down and starts nothing more.
	ErrShutdown = errors.New("cluster is shut down")
)

// Config describes a cluster. Binary and Dir are required, and either
// Addrs or Nodes.
type Config struct {
	// Binary is the concord executable to run.
	Binary string
	// Dir holds the nodes' data dirs: Dir/node1, Dir/node2, ...
	Dir string
	// Addrs are the nodes' listen addresses, which are also their --peers.
	// When empty, Nodes addresses on 127.0.0.1 get ports from FreePort.
	Addrs []string
	Nodes int
	// Shards and Replicas become --shards and --replicas; 0 leaves the
	// server's default.
	Shards, Replicas int
	// LogLevel becomes --log-level; "" leaves the server's default.
	LogLevel string
	// RedisAddrs are the nodes' Redis protocol addresses (--redis-addr).
	// When empty and Redis is set, they get ports from FreePort.
	RedisAddrs []string
	Redis      bool
	// HTTPAddrs are the nodes' HTTP front door addresses (--http-addr:
	// health, metrics, status, dashboard). When empty and HTTP is set,
	// they get ports from FreePort.
	HTTPAddrs []string
	HTTP      bool
	// FaultInjection adds --enable-fault-injection (the Admin fault API).
	FaultInjection bool
	// TLS starts every node with TLS (--tls-cert, --tls-key, --tls-ca),
	// with certificates made in Dir/tls by New unless it has them
	// (CertDir, CAFile). Conn then dials with TLS.
	TLS bool
	// AuthToken, when set, is written to a file the nodes get as
	// --auth-token-file; Conn sends it.
	AuthToken string
	// ExtraArgs are appended to every node's command line.
	ExtraArgs []string

	// LogDir, when set, collects node i's stdout and stderr in
	// LogDir/node<i+1>.log, appended across restarts, each start headed by
	// a line with its command.
	LogDir string
	// Output, used when LogDir is "", says where node i's stdout and
	// stderr go; nil discards them.
	Output func(i int) io.Writer

	// StopTimeout bounds how long Stop waits after SIGTERM before it
	// sends SIGKILL; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// Supervise restarts, after RestartDelay and with the same address and
	// data dir, a node that exits without being asked to (by Stop, Kill,
	// KillAll, ExpectExit or Shutdown), until Shutdown.
	Supervise    bool
	RestartDelay time.Duration
	// OnExit, if set, is called each time a node's process exits, from
	// the goroutine that waited for it.
	OnExit func(Exit)
	// OnRestart, if set, is called when supervision has restarted node i.
	OnRestart func(i, pid int)
}

// Exit describes the end of one node process.
type Exit struct {
	Node  int   // index of the node
	PID   int   // of the process that exited
	Err   error // from wait: nil for exit status 0
	Asked bool  // false when it exited by itself (a crash, `concord fault die`)
}

// Cluster is a set of node processes, one per address, owned by one
// caller, who ends it with Shutdown.
type Cluster struct {
	cfg Config
	// addrs holds the nodes' addresses, by index; AddJoiner replaces the
	// slice (under mu), so readers need no lock.
	addrs atomic.Pointer[[]string]
	// redis holds the nodes' Redis addresses ("" each when the nodes serve
	// no Redis protocol), replaced with addrs.
	redis atomic.Pointer[[]string]
	// http holds the nodes' HTTP addresses, like redis.
	http atomic.Pointer[[]string]
	// peers are the initial nodes' addresses, their --peers.
	peers []string
	// joins holds, for nodes added by AddJoiner, the addresses they are
	// started with as --join, and their own extra flags (guarded by mu).
	joins map[int]joiner
	// nodeArgs holds flags given to one node alone (SetNodeArgs), after
	// the cluster's and a joiner's (guarded by mu).
	nodeArgs map[int][]string

	mu       sync.Mutex
	procs    []*Process               // guarded by mu: each node's latest process; nil before its first start
	starts   []int                    // guarded by mu: how many times each node was started
	shutdown bool                     // guarded by mu
	conns    map[int]*grpc.ClientConn // guarded by mu

	stopping chan struct{}  // closed by Shutdown: ends supervision's waits
	watchers sync.WaitGroup // one per process until it is reaped (and restarted, when supervised)
}

// New lays out a cluster (addresses, data dirs) without starting it.
func New(cfg Config) (*Cluster, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, errors.New("localcluster: Config.Binary and Config.Dir are required")
	}
	addrs := append([]string(nil), cfg.Addrs...)
	if len(addrs) == 0 {
		if cfg.Nodes < 1 {
			return nil, errors.New("localcluster: Config needs Addrs or a positive Nodes")
		}
		ports, err := FreePorts(cfg.Nodes)
		if err != nil {
			return nil, err
		}
		for _, p := range ports {
			addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
	}
	redis, err := sideAddrs("Redis", cfg.RedisAddrs, cfg.Redis, len(addrs))
	if err != nil {
		return nil, err
	}
	httpAddrs, err := sideAddrs("HTTP", cfg.HTTPAddrs, cfg.HTTP, len(addrs))
	if err != nil {
		return nil, err
	}
	cfg.StopTimeout = cmp.Or(cfg.StopTimeout, DefaultStopTimeout)
	c := &Cluster{cfg: cfg, peers: addrs, joins: map[int]joiner{}, nodeArgs: map[int][]string{}, procs: make([]*Process, len(addrs)), starts: make([]int, len(addrs)),
		conns: map[int]*grpc.ClientConn{}, stopping: make(chan struct{})}
	c.addrs.Store(&addrs)
	c.redis.Store(&redis)
	c.http.Store(&httpAddrs)
	if err := c.prepareSecurity(); err != nil {
		return nil, err
	}
	return c, nil
}

// joiner is how a node added by AddJoiner starts.
type joiner struct {
	join  []string // --join
	extra []string // flags after the cluster's
}

// AddJoiner lays out one more node, on a free port, that joins the running
// cluster through the nodes at indexes via (`server --join`, instead of
// --peers), with extra flags after the cluster's; it returns its index.
// Start starts it. A joiner restarted with an empty data dir joins again.
func (c *Cluster) AddJoiner(via []int, extra ...string) (int, error) {
	if len(via) == 0 {
		return 0, errors.New("localcluster: a joiner needs a node to join through")
	}
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shutdown {
		return 0, ErrShutdown
	}
	addrs := c.Addrs()
	j := joiner{extra: extra}
	for _, v := range via {
		if v < 0 || v >= len(addrs) {
			return 0, fmt.Errorf("localcluster: no node %d to join through", v)
		}
		j.join = append(j.join, addrs[v])
	}
	i := len(addrs)
	addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	redis, err := sideAddrs("Redis", nil, c.cfg.Redis, 1)
	if err != nil {
		return 0, err
	}
	httpAddrs, err := sideAddrs("HTTP", nil, c.cfg.HTTP, 1)
	if err != nil {
		return 0, err
	}
	redis, httpAddrs = append(c.RedisAddrs(), redis...), append(c.HTTPAddrs(), httpAddrs...)
	c.joins[i] = j
	c.procs = append(c.procs, nil)
	c.starts = append(c.starts, 0)
	c.redis.Store(&redis)
	c.http.Store(&httpAddrs)
	c.addrs.Store(&addrs)
	return i, nil
}

// sideAddrs returns n nodes' addresses for a protocol beside gRPC (Redis,
// HTTP): the configured ones, free ports on 127.0.0.1 when want asks for
// them, else "" each (the protocol is off).
func sideAddrs(what string, configured []string, want bool, n int) ([]string, error) {
	out := make([]string, n)
	switch {
	case len(configured) > 0 && len(configured) != n:
		return nil, fmt.Errorf("localcluster: %d %s addresses for %d nodes", len(configured), what, n)
	case len(configured) > 0:
		copy(out, configured)
	case want:
		ports, err := FreePorts(n)
		if err != nil {
			return nil, err
		}
		for i, p := range ports {
			out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		}
	}
	return out, nil
}

// RedisAddr is node i's Redis protocol address, "" if it serves none.
func (c *Cluster) RedisAddr(i int) string { return (*c.redis.Load())[i] }

// RedisAddrs are the nodes' Redis protocol addresses, by index.
func (c *Cluster) RedisAddrs() []string { return append([]string(nil), *c.redis.Load()...) }

// HTTPAddr is node i's HTTP front door address, "" if it serves none.
func (c *Cluster) HTTPAddr(i int) string { return (*c.http.Load())[i] }

// HTTPAddrs are the nodes' HTTP addresses, by index.
func (c *Cluster) HTTPAddrs() []string { return append([]string(nil), *c.http.Load()...) }

// Start lays out a cluster and starts every node. It does not wait for
// the cluster to serve; see WaitReady. On error, whatever it started is
// stopped again.
func Start(cfg Config) (*Cluster, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.StartAll(); err != nil {
		c.Shutdown(c.cfg.StopTimeout)
		return nil, err
	}
	return c, nil
}

// StartAll starts every node, in order, stopping at the first error.
func (c *Cluster) StartAll() error {
	for i := range c.N() {
		if err := c.Start(i); err != nil {
			return err
		}
	}
	return nil
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(*c.addrs.Load()) }

// Addrs are the nodes' addresses, by index.
func (c *Cluster) Addrs() []string { return append([]string(nil), *c.addrs.Load()...) }

// Addr is node i's address.
func (c *Cluster) Addr(i int) string { return (*c.addrs.Load())[i] }

// Index returns the index of the node at addr, or -1.
func (c *Cluster) Index(addr string) int {
	for i, a := range *c.addrs.Load() {
		if a == addr {
			return i
		}
	}
	return -1
}

// Name is node i's name in directory and file names: node1 for index 0.
func Name(i int) string { return "node" + strconv.Itoa(i+1) }

// DataDir is node i's data dir.
func (c *Cluster) DataDir(i int) string { return filepath.Join(c.cfg.Dir, Name(i)) }

// LogPath is node i's log file, or "" without Config.LogDir.
func (c *Cluster) LogPath(i int) string {
	if c.cfg.LogDir == "" {
		return ""
	}
	return filepath.Join(c.cfg.LogDir, Name(i)+".log")
}

// Shards is the number of user shards the nodes are started with.
func (c *Cluster) Shards() int { return cmp.Or(c.cfg.Shards, DefaultShards) }

// Args is node i's command line after the binary: `server` and its flags.
// It reads what AddJoiner changes: not concurrently with AddJoiner.
func (c *Cluster) Args(i int) []string {
	j, joins := c.joins[i]
	args := []string{"server", "--addr", c.Addr(i), "--data-dir", c.DataDir(i)}
	if joins {
		args = append(args, "--join", strings.Join(j.join, ","))
	} else {
		args = append(args, "--peers", strings.Join(c.peers, ","))
	}
	if c.cfg.Shards != 0 {
		args = append(args, "--shards", strconv.Itoa(c.cfg.Shards))
	}
	if c.cfg.Replicas != 0 {
		args = append(args, "--replicas", strconv.Itoa(c.cfg.Replicas))
	}
	if c.cfg.LogLevel != "" {
		args = append(args, "--log-level", c.cfg.LogLevel)
	}
	if c.cfg.FaultInjection {
		args = append(args, "--enable-fault-injection")
	}
	if a := c.RedisAddr(i); a != "" {
		args = append(args, "--redis-addr", a)
	}
	if a := c.HTTPAddr(i); a != "" {
		args = append(args, "--http-addr", a)
	}
	args = append(args, c.securityArgs()...)
	return append(append(append(args, c.cfg.ExtraArgs...), j.extra...), c.nodeArgs[i]...)
}

// SetNodeArgs gives node i flags of its own from its next start on, after
// the cluster's (a test that restarts one node with another setting);
// none replaces those set before. Not while Start or Args runs.
func (c *Cluster) SetNodeArgs(i int, extra ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodeArgs[i] = extra
}

// Start starts node i, which must not be running, on its address and
// data dir.
func (c *Cluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startLocked(i)
}

// startLocked forks with mu held, so that Shutdown, which takes mu to
// collect the processes, cannot miss one being started.
func (c *Cluster) startLocked(i int) error {
	if c.shutdown {
		return ErrShutdown
	}
	if p := c.procs[i]; p != nil && p.Running() {
		return fmt.Errorf("start node %d: %w", i, ErrRunning)
	}
	c.starts[i]++
	args := c.Args(i)
	cmd := exec.Command(c.cfg.Binary, args...)
	closeOut, err := c.attachOutput(cmd, i, args)
	if err != nil {
		return fmt.Errorf("start node %d: %w", i, err)
	}
	defer closeOut() // the child holds its own copy of a log file
	// The node dies with its owner, even if the owner is SIGKILLed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node %d: %w", i, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	c.procs[i] = p
	c.watchers.Add(1)
	go c.watch(i, p)
	return nil
}

// attachOutput points cmd's stdout and stderr at node i's log file or at
// Config.Output, and returns what to close once the process has started.
func (c *Cluster) attachOutput(cmd *exec.Cmd, i int, args []string) (func(), error) {
	if c.cfg.LogDir == "" {
		if c.cfg.Output != nil {
			w := c.cfg.Output(i)
			cmd.Stdout, cmd.Stderr = w, w
		}
		return func() {}, nil
	}
	if err := os.MkdirAll(c.cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(c.LogPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== localcluster: start #%d of %s (index %d) at %s: concord %s\n",
		c.starts[i], Name(i), i, time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = f, f
	return func() { f.Close() }, nil
}
