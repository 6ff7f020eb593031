package redisapi

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/resp"
	"github.com/concord-kv/concord/internal/version"
)

// KV is the part of the KV service the server calls: the node passes the
// same grpcapi.KV its gRPC server registers, so a RESP command is validated,
// routed and forwarded exactly as a gRPC request.
type KV interface {
	Get(context.Context, *concordpb.GetRequest) (*concordpb.GetResponse, error)
	Batch(context.Context, *concordpb.BatchRequest) (*concordpb.BatchResponse, error)
	Scan(context.Context, *concordpb.ScanRequest) (*concordpb.ScanResponse, error)
	// Put and Delete carry a plain SET and a DEL of one key under
	// CONCORD.CONSISTENCY available: the service holds only such a write
	// as tentative when its shard cannot commit it (a Batch that writes is
	// refused AVAILABLE).
	Put(context.Context, *concordpb.PutRequest) (*concordpb.PutResponse, error)
	Delete(context.Context, *concordpb.DeleteRequest) (*concordpb.DeleteResponse, error)
}

// Backend is what the server needs from its node besides KV.
type Backend interface {
	KV
	// ShardOf returns the shard that owns key, as the KV service routes it
	// (internal/routing's hash over the node's shard table); false when the
	// node does not know the shards yet.
	ShardOf(key []byte) (shard uint64, ok bool)
	// Info reports the node's figures for INFO.
	Info() NodeInfo
	// Members are the addresses of the cluster's nodes (CONCORD.MEMBERS):
	// each serves gRPC and RESP on that one port. Removed and replaced
	// nodes, which serve nothing, are left out.
	Members() []string
	// ClusterVersion is the cluster's version as the node knows it, which
	// says which ops every replica applies (INCRBYFLOAT's text increment).
	ClusterVersion() version.Level
	// NoSpace is the refusal a write that adds data gets while the space
	// alarm is on, nil while it is off (grpcapi.KV.NoSpace): MULTI refuses
	// such a command as it is queued and aborts the transaction, as Redis
	// does for OOM.
	NoSpace() error
	Faults
}

// Faults are the node's fault-injection hooks, for CONCORD.FAULT; the
// server calls them only when Config.EnableFaultInjection is set.
type Faults interface {
	// Die ends the process, cleanly (as SIGTERM) or as kill -9 would, after
	// returning.
	Die(clean bool)
	// Partition cuts the node off from every peer whose address is not in
	// reachable and returns the ids cut off.
	Partition(reachable []string) []ids.NodeID
	Heal()
	// DiskLow makes the space guard read the disk as full (low) or
	// measure it again; an error (the guard is off) changes nothing.
	DiskLow(low bool) error
}

// NodeInfo is what INFO reports about the node.
type NodeInfo struct {
	NodeID    uint64
	ClusterID uint64
	Addr      string   // the node's gRPC address
	Shards    int      // user shards in the cluster, as this node knows them
	Hosted    []uint64 // user shards with a replica here
	Led       []uint64 // user shards whose leader is here
	DataDir   string
	// TentativeHeld is how many tentative writes (available mode) the
	// node holds, not yet reconciled: its hint log's count.
	TentativeHeld int64
}

// Config configures a Server. Zero fields take the defaults noted.
type Config struct {
	// MaxKeyBytes and MaxValueBytes are the node's limits (--max-key-bytes,
	// --max-value-bytes); they also bound RESP bulk strings.
	MaxKeyBytes, MaxValueBytes int
	// EnableFaultInjection allows CONCORD.FAULT (--enable-fault-injection).
	EnableFaultInjection bool
	// EnableFlush allows FLUSHDB and FLUSHALL (--redis-enable-flush).
	EnableFlush bool
	// AuthToken, when not empty, is the password AUTH and HELLO AUTH must
	// give before any other command (--auth-token-file).
	AuthToken string
	// MaxClients bounds open connections; more are refused with an error.
	// Default 10,000.
	MaxClients int
	// FirstCommandTimeout bounds how long a new connection may take to
	// start sending its first command (its TLS handshake included), and
	// then each wait for more of it: a connection silent for that long
	// before its first command is whole is closed. A large first command
	// over a slow link may take longer in all, as long as its bytes keep
	// coming. After its first command a connection may idle for ever
	// (Redis's timeout 0). Default 10 s, the port mux's: a real client
	// speaks at once, and a silent socket must not hold a MaxClients slot.
	FirstCommandTimeout time.Duration
	// OutputBufferLimit bounds the replies a connection holds in memory for
	// one pipeline; a client whose replies exceed it is disconnected.
	// Default 64 MiB.
	OutputBufferLimit int
	// WriteTimeout bounds how long a reply may wait for a client that does
	// not read; the connection is then closed. Default 30 s.
	WriteTimeout time.Duration
	// CommandTimeout bounds one command's calls to the KV service.
	// Default 10 s.
	CommandTimeout time.Duration
	// ShardWait bounds how long a command that needs the shard table
	// waits for a starting node to know it (within CommandTimeout), before
	// it answers UNAVAILABLE. Default 5 s; negative: no wait.
	ShardWait time.Duration
	// KeysLimit bounds the keys KEYS may return. Default 10,000.
	KeysLimit int
	Logger    *slog.Logger
	// Observe, when set, is told of every command answered: its name
	// (lower case; "unknown" for an unknown one), the first word of its
	// error reply ("" on success) and how long it took (the node's
	// metrics).
	Observe func(cmd, errCode string, d time.Duration)
	// ObserveOK, when set with Observe, returns what Observe does for
	// cmd's successful replies, bound to cmd: the server asks once per
	// command and calls it for each success. Observe looked up the
	// metric's series by its labels for every command, 2-3 % of a Redis
	// node's CPU under pipelined SET.
	ObserveOK func(cmd string) func(d time.Duration)
}

func (c *Config) fill() {
	if c.MaxKeyBytes <= 0 {
		c.MaxKeyBytes = 4096
	}
	if c.MaxValueBytes <= 0 {
		c.MaxValueBytes = 1 << 20
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 10000
	}
	if c.FirstCommandTimeout <= 0 {
		c.FirstCommandTimeout = 10 * time.Second
	}
	if c.OutputBufferLimit <= 0 {
		c.OutputBufferLimit = 64 << 20
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = 10 * time.Second
	}
	if c.ShardWait == 0 {
		c.ShardWait = 5 * time.Second
	}
	if c.KeysLimit <= 0 {
		c.KeysLimit = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server serves the Redis protocol on one listener.
type Server struct {
	cfg     Config
	b       Backend
	limits  resp.Limits
	started time.Time
	cursors cursorTable
	okObs   sync.Map // *command -> Config.ObserveOK(its name)

	ctx    context.Context // canceled by Close: ends the commands in flight
	cancel context.CancelFunc
	nextID atomic.Int64
	// refused counts the connections refused at MaxClients (Refused).
	refused atomic.Int64
	// crossWarned is when crossProtocolWarning last logged (Unix
	// nanoseconds; 0: never).
	crossWarned atomic.Int64

	mu      sync.Mutex
	lis     []net.Listener  // guarded by mu: every listener served
	clients map[int64]*conn // guarded by mu
	// silent are the connections that have sent no command yet, oldest
	// first (of *conn): at MaxClients a new connection closes the oldest
	// of them rather than be refused.
	silent *list.List     // guarded by mu
	closed bool           // guarded by mu
	wg     sync.WaitGroup // the accept loop and one per connection
}

// New returns a server of b's KV service.
func New(b Backend, cfg Config) *Server {
	cfg.fill()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, b: b, started: time.Now(), ctx: ctx, cancel: cancel, clients: map[int64]*conn{}, silent: list.New()}
	// A bulk string may carry a value, or a key, or an option; one command
	// may carry a whole batch (MSET): the batch limit, with room for framing.
	s.limits = resp.Limits{
		MaxBulkBytes:    max(cfg.MaxValueBytes, cfg.MaxKeyBytes) + 1024,
		MaxArgs:         1 << 20,
		MaxInlineBytes:  64 << 10,
		MaxCommandBytes: 2 * (8 << 20),
	}
	s.cursors.m = map[uint64][]byte{}
	return s
}

// Listen binds addr and serves it until Close.
func (s *Server) Listen(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.Serve(lis)
	return nil
}

// Serve serves lis, in its own goroutine, until Close. A server may serve
// several listeners (its own port, and the node's shared gRPC port).
func (s *Server) Serve(lis net.Listener) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		lis.Close()
		return
	}
	s.lis = append(s.lis, lis)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.acceptLoop(lis)
	}()
}

// Addr is the address of the first listener served, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lis) == 0 {
		return nil
	}
	return s.lis[0].Addr()
}

func (s *Server) acceptLoop(lis net.Listener) {
	for {
		nc, err := lis.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.cfg.Logger.Error("redis listener stopped", "err", err)
			}
			return
		}
		s.admit(nc)
	}
}

// admit registers a connection and starts serving it, or refuses it when
// the server is full or closing.
func (s *Server) admit(nc net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return
	}
	if len(s.clients) >= s.cfg.MaxClients && !s.evictSilentLocked() {
		s.refused.Add(1)
		// Not under s.mu: on a TLS port the write runs the handshake
		// first, which waits for the client's hello; a client that sends
		// none would hold the lock, and with it every accept, for as long
		// as it liked. The deadline bounds the handshake's reads too.
		go func() {
			_ = nc.SetDeadline(time.Now().Add(time.Second))
			_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
			nc.Close()
		}()
		return
	}
	c := newConn(s, nc, s.nextID.Add(1))
	s.clients[c.id] = c
	// The deadline of the first command's first bytes; its first read
	// also runs the TLS handshake, under the same deadline. Each read of
	// the command's bytes moves it on (progressed); spoke lifts it.
	_ = nc.SetReadDeadline(time.Now().Add(s.cfg.FirstCommandTimeout))
	c.silent, c.silentAt = true, s.silent.PushBack(c)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.serve()
		s.forget(c)
	}()
}

// evictSilentLocked closes the oldest connection that has sent no command
// (or, with a token, has not authenticated) and forgets it, making room
// for a new one; false when every connection has spoken and logged in. A
// real client speaks at once, so a flood of silent sockets pushes out only
// itself (the port mux's rule), never a client that spoke, and a new
// client is served while the flood holds every slot. A connection whose
// first command is still arriving counts from its last bytes (progressed):
// silent sockets go before it, but it is not safe from eviction, or a
// flood that sent a byte now and then would hold every slot for good.
func (s *Server) evictSilentLocked() bool {
	front := s.silent.Front()
	if front == nil {
		return false
	}
	c := s.silent.Remove(front).(*conn)
	c.silentAt = nil
	delete(s.clients, c.id)
	_ = c.nc.Close() // its goroutine ends on the failed read
	return true
}

// progressed records that bytes of c's first command have arrived: it has
// FirstCommandTimeout again for the next ones, and it goes to the back of
// the connections pushed out for new ones (a large first command over a
// slow link is not pushed out before sockets that have sent nothing).
func (s *Server) progressed(c *conn) {
	_ = c.nc.SetReadDeadline(time.Now().Add(s.cfg.FirstCommandTimeout))
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.silentAt != nil {
		s.silent.MoveToBack(c.silentAt)
	}
}

// spoke records that c has sent its first command: it may now idle for
// ever (Redis's timeout 0). Once it is also authenticated (proven) it is
// no longer pushed out for a new one: an unauthenticated client that sent
// a PING would otherwise hold its slot for good, and a flood of them
// would keep every real client out.
func (s *Server) spoke(c *conn) {
	_ = c.nc.SetReadDeadline(time.Time{})
	if c.authed {
		s.proven(c)
	}
}

// proven takes c off the list of connections pushed out for new ones: it
// has spoken and is authenticated.
func (s *Server) proven(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.silentAt != nil {
		s.silent.Remove(c.silentAt)
		c.silentAt = nil
	}
}

// forget takes c off the server's books once its goroutine ends.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.silentAt != nil {
		s.silent.Remove(c.silentAt)
		c.silentAt = nil
	}
	if s.clients[c.id] == c {
		delete(s.clients, c.id)
	}
}

// Refused is how many connections were refused at MaxClients.
func (s *Server) Refused() int64 { return s.refused.Load() }

// Clients is the number of open connections.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// Close stops accepting, cancels the commands in flight, closes every
// connection and waits (at most timeout) for their goroutines to end.
func (s *Server) Close(timeout time.Duration) {
	s.mu.Lock()
	s.closed = true
	for _, l := range s.lis {
		l.Close()
	}
	for _, c := range s.clients {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		s.cfg.Logger.Warn("redis connections still running after close", "timeout", timeout)
	}
}

// cursorTable maps SCAN cursors, which clients read as integers, to the key
// the next page starts at. It is node-wide (a client library may continue a
// scan on another pooled connection) and bounded: the oldest cursors are
// forgotten first, and a forgotten cursor is an error, not a restart.
type cursorTable struct {
	mu    sync.Mutex
	m     map[uint64][]byte // guarded by mu
	order []uint64          // guarded by mu: insertion order, for eviction
	bytes int               // guarded by mu: the keys' bytes in m
}

// maxCursors and maxCursorBytes bound the cursor table: at most 16,384
// cursors and 64 MiB of their keys. The count alone let 16,384 cursors
// after keys of 64 KiB (--max-key-bytes' cap) hold 1 GiB; at the default
// 4 KiB keys the count binds first, or nearly.
const (
	maxCursors     = 16384
	maxCursorBytes = 64 << 20
)

func (t *cursorTable) put(start []byte) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := newCursorID(t.m)
	t.m[id] = start
	t.bytes += len(start)
	t.order = append(t.order, id)
	for len(t.order) > maxCursors || t.bytes > maxCursorBytes {
		t.bytes -= len(t.m[t.order[0]])
		delete(t.m, t.order[0])
		t.order = t.order[1:]
	}
	return id
}

// maxCursorID bounds cursor ids below 2^53, so that a client that reads
// the cursor as a double (JavaScript's numbers) sends back the same one.
const maxCursorID = 1<<53 - 1

// newCursorID returns a random id in [1, maxCursorID] not in taken.
// Random, not counted: every node (and every run of one) counting from 1
// would take another node's cursor, or one from before a restart, for one
// of its own and continue a different scan silently, skipping keys. Among
// 2^53 ids a foreign cursor is one of this node's with odds of 2^-39.
func newCursorID(taken map[uint64][]byte) uint64 {
	for {
		id := rand.Uint64N(maxCursorID) + 1
		if _, dup := taken[id]; !dup {
			return id
		}
	}
}

func (t *cursorTable) get(id uint64) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[id]
	return v, ok
}

// crossProtocolWarning logs that c sent a command named POST or Host: (an
// HTTP request, perhaps a cross-protocol attack: crossProtocol) and is
// closed; at most once a minute, as Redis does, so that a flood of them
// cannot flood the log.
func (s *Server) crossProtocolWarning(c *conn) {
	now := time.Now().UnixNano()
	last := s.crossWarned.Load()
	if last != 0 && now-last < int64(time.Minute) || !s.crossWarned.CompareAndSwap(last, now) {
		return
	}
	remote := ""
	if c.nc != nil {
		remote = c.nc.RemoteAddr().String()
	}
	s.cfg.Logger.Warn("possible cross-protocol attack: a client sent a command named POST or Host: "+
		"(an HTTP request to the Redis port); connection closed", "client", c.id, "remote", remote)
}
