package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/expiry"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/metrics"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/portmux"
	"github.com/concord-kv/concord/internal/redisapi"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/transport"
)

// muxTimeout bounds how long a new connection to the node's port may take
// (TLS handshake included) to send the bytes that tell gRPC from RESP and
// the framed wires: every client speaks first, at once, so this is all
// slack; short, so that silent connections hold the mux's pending slots
// (portmux.DefaultMaxPending) only briefly. A RESP client that connects
// and says nothing for this long reconnects.
const muxTimeout = 10 * time.Second

// DefaultGRPCMaxConns bounds the gRPC connections on the node's port unless
// --grpc-max-conns says otherwise: each holds a goroutine, HTTP/2 buffers
// and a socket, and grpc-go bounds only the streams of one connection.
// Generous, as --redis-max-clients' 10,000: a client multiplexes its calls
// over one connection (or a few), so only a flood comes near it.
const DefaultGRPCMaxConns = 10000

// DefaultMaxConcurrentStreams bounds the gRPC calls one connection may
// have open on the node at once unless --max-concurrent-streams says
// otherwise. grpc-go's own default is unlimited: one connection could hold
// any number of calls waiting (an AVAILABLE put up to --available-timeout,
// a linearizable read up to its deadline), each a goroutine and its request
// of up to 64 MiB. The server announces the bound in its HTTP/2 settings;
// gRPC clients queue the calls past it until one ends (within their
// deadlines) instead of failing them, and grpc-go's server starts no more
// handlers than that for a connection.
//
// 1,024 is far above what Concord's own traffic opens on one connection:
// the Go client sends its KV calls on one KV.Stream per node (none at all
// on its default framed wire) plus one routing refresh at a time and the
// admin calls its user makes, so `concord bench` (its --clients share --conns clients: 100 over
// 10 or 1,000 over 100) opens one or two streams per connection; a peer's
// raft transport connection carries its two lanes (--peer-wire grpc) and
// at most 4 snapshot streams (multiraft's MaxOutgoingSnapshots); forwards
// travel on the framed wire, or one KV.Stream. Only unary calls open a
// stream each: the Go client with Options.Unary and forwards to a node
// without KV.Stream, which past 1,024 at once on one connection wait for
// a slot rather than fail.
const DefaultMaxConcurrentStreams = 1024

// defaultGRPCEvictIdleAfter is how long a gRPC connection must have had no
// call in flight and read nothing before, at --grpc-max-conns, a new one
// is served in its place (Config.GRPCEvictIdleAfter): three of the
// keepalive pings every Concord client sends (dial.Keepalive), so that
// theirs are never taken for idle; a silent connection (a flood's, or a
// leaky pool's) goes.
const defaultGRPCEvictIdleAfter = 30 * time.Second

// maxMsgBytes bounds a gRPC message; larger requests are refused by gRPC
// with ResourceExhausted.
const maxMsgBytes = dial.MaxMsgBytes

// Node is one Concord process. See the package doc.
type Node struct {
	cfg Config
	log *slog.Logger
	eng *storage.Engine
	lis net.Listener
	srv *grpc.Server
	// grpcLis bounds srv's connections (--grpc-max-conns).
	grpcLis *portmux.LimitListener
	sec     security // TLS and auth settings, loaded by New
	// kv is the KV service, registered on srv and called in process by
	// redis, the Redis protocol server (on the node's port, and on
	// --redis-addr if set).
	kv       *grpcapi.KV
	kvConns  *grpcapi.ConnServer // the framed client wire
	redis    *redisapi.Server
	redisLis net.Listener // --redis-addr's listener, nil without it
	// metrics is what /metrics serves; httpSrv serves it on --http-addr.
	metrics *metrics.Node
	httpLis net.Listener
	httpSrv *http.Server

	// ident is nil until the node has bootstrapped or joined.
	ident     atomic.Pointer[storepb.NodeIdent]
	host      *multiraft.Host      // set once, when ident is
	transport *transport.Transport // set once, when ident is
	ready     chan struct{}        // closed when host and transport are set
	readyNow  atomic.Bool          // set just before ready is closed: isReady, per Redis command, without a channel

	book      addressBook
	seen      seenSet
	boot      bootEvidence // while fresh: the peers that vouched for its initial id
	conns     connPool
	placement placementState
	steps     stepCounts // scheduler steps executed, per kind
	// routes is the placement leader's view of the shards, from heartbeats.
	routes atomic.Pointer[[]*concordpb.ShardRoute]
	// routeCache is the routing view derived from routes and the host's
	// descriptors (routes.go).
	routeCache atomic.Pointer[routeView]
	partition  partition
	// cluster is the Cluster service, which the repair loop calls directly
	// when this node leads the shard it repairs.
	cluster *grpcapi.Cluster

	// clusterVersion is the cluster's version (a version.Level) as the
	// last heartbeat answer gave it; 0 (version.Unknown) until then.
	clusterVersion atomic.Uint32
	// learnMu serializes learnClusterVersion (the heartbeat loop, and the
	// placement leader's raise), so neither records or stores a lower
	// version over the other's higher one.
	learnMu sync.Mutex
	// testHooks are set by tests only, before Start.
	testHooks testHooks

	// requests counts client requests, for the rate heartbeats report.
	requests requestMeter
	// space is the disk space guard (space.go).
	space spaceGuard
	// shardSizes caches the replicas' sizes the heartbeats report
	// (shardsize.go).
	shardSizes shardSizes
	// hints holds the tentative writes of available mode this node took
	// (internal/hints), opened with storage; recon proposes them when
	// their shards have a quorum again (reconcile.go).
	hints *hints.Log
	recon reconciler
	// versionedShards are the shards versionShards made versioned (only
	// the sweep's goroutine touches it).
	versionedShards map[ids.ShardID]bool
	// failed is closed when the node stops itself for good (its identity
	// was removed); failErr says why.
	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	// startMu is held by Start while it runs: Stop closes stopC (which
	// ends Start's waits for peers) and then waits for it, so that it
	// never closes storage under a bootstrap or join being written, nor
	// returns while Start goes on to start raft and the loops.
	startMu  sync.Mutex
	stopSig  sync.Once // closes stopC
	stopOnce sync.Once
	stopC    chan struct{}
	wg       sync.WaitGroup
	// stopping is set once Shutdown begins: every heartbeat from then on
	// says so (HeartbeatRequest.stopping), and stoppingSent is closed once
	// the first such heartbeat was sent (answered or not).
	stopping     atomic.Bool
	stoppingSent chan struct{}
	stoppingOnce sync.Once
	// rpcs counts the gRPC handlers running: Stop waits for them (at most
	// drainTimeout) before it closes storage, since grpc.Server.Stop does not.
	rpcs         inflight
	drainTimeout time.Duration
	// afterReadIndex, if set (tests), runs in a linearizable read between
	// its barrier and its read.
	afterReadIndex func()
}

// inflight counts running RPC handlers; wait returns once none runs.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n reaches 0, while a wait is pending
}

func (f *inflight) begin() { f.mu.Lock(); f.n++; f.mu.Unlock() }

func (f *inflight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// wait returns the number of handlers still running after timeout, 0 if
// they all ended.
func (f *inflight) wait(timeout time.Duration) int {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return 0
	}
	idle := make(chan struct{})
	f.idle = idle
	f.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return 0
	case <-t.C:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.n
	}
}

func (n *Node) trackUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, kvMethods) {
		n.requests.count.Add(1)
	}
	n.rpcs.begin()
	defer n.rpcs.end()
	return h(ctx, req)
}

// kvMethods prefixes the full names of the client KV service's methods.
const kvMethods = "/concord.v1.KV/"

func (n *Node) trackStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	n.rpcs.begin()
	defer n.rpcs.end()
	return h(srv, ss)
}

// trackGRPCUnary is trackUnary for a call that came over gRPC, counted on
// its connection as well, for --grpc-max-conns' eviction of idle ones
// (portmux.CallStarted: O(1)). One interceptor for both: each level of a
// gRPC chain costs an allocation per call.
func (n *Node) trackGRPCUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	addr := peerAddr(ctx)
	portmux.CallStarted(addr)
	defer portmux.CallEnded(addr)
	return n.trackUnary(ctx, req, info, h)
}

func (n *Node) trackGRPCStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	addr := peerAddr(ss.Context())
	portmux.CallStarted(addr)
	defer portmux.CallEnded(addr)
	return n.trackStream(srv, ss, info, h)
}

func peerAddr(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
}

// serverKeepalive is dial.ServerKeepalive with Config.GRPCMaxConnIdle.
func (n *Node) serverKeepalive() keepalive.ServerParameters {
	kp := dial.ServerKeepalive
	kp.MaxConnectionIdle = cmp.Or(n.cfg.GRPCMaxConnIdle, kp.MaxConnectionIdle)
	return kp
}

// New validates cfg and returns a node that Start will run.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sec, err := loadSecurity(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, sec: sec, log: cfg.Logger, ready: make(chan struct{}), stopC: make(chan struct{}), failed: make(chan struct{}), drainTimeout: 2 * time.Second,
		stoppingSent: make(chan struct{})}
	n.placement.kick, n.placement.report = make(chan struct{}, 1), make(chan struct{}, 1)
	n.book.m = map[ids.NodeID]*concordpb.NodeDescriptor{}
	n.seen.m = map[ids.NodeID]*seenEntry{}
	n.boot = newBootEvidence()
	n.conns.m = map[string]*grpc.ClientConn{}
	n.conns.opts = append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(grpcapi.StampFromNode(n.ID), grpcapi.StampCluster(n.clusterID))},
		sec.peerDial...)
	n.cluster = grpcapi.NewCluster(n.backend())
	n.metrics = metrics.New()
	n.metrics.Register(stateCollector{n})
	n.recon.reconciled = newReconcileCounter()
	n.metrics.Register(n.recon.reconciled)
	return n, nil
}

// Start opens storage, serves gRPC, establishes the node's identity
// (bootstrapping or joining if its data dir is empty) and starts raft. It
// returns once the node serves, or when ctx ends first.
func (n *Node) Start(ctx context.Context) error {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	select {
	case <-n.stopC:
		return errors.New("node: stopped before it started")
	default:
	}
	eng, err := storage.Open(n.cfg.DataDir)
	if err != nil {
		return err
	}
	n.eng = eng
	if err := n.loadLocal(); err != nil {
		return n.abort(err)
	}
	if err := n.checkAddrAtStart(); err != nil {
		return n.abort(err)
	}
	if n.hints, err = hints.Open(eng, n.cfg.MaxHintBytes); err != nil {
		return n.abort(fmt.Errorf("open the hint log: %w", err))
	}
	if err := n.checkVersionAtStart(); err != nil {
		return n.abort(err)
	}
	if n.lis, err = net.Listen("tcp", n.cfg.Addr); err != nil {
		return n.abort(fmt.Errorf("listen on %s: %w", n.cfg.Addr, err))
	}
	// TLS below the mux: it must read plaintext to tell gRPC from RESP.
	n.lis = n.sec.listen(n.lis)
	n.srv = n.newServer()
	// One port, two protocols: gRPC, and RESP for clients given only the
	// node's address (the CS739 library, redis-cli -p <gRPC port>).
	mux := portmux.New(n.lis, muxTimeout)
	n.serveRaftConns(mux.Match(transport.Magic))
	n.serveClientConns(mux.Match(grpcapi.StreamMagic))
	n.redis = n.newRedis()
	n.redis.Serve(mux.Other())
	// --redis-addr opens with the node's port, before the node has an
	// identity, as that port does: a client that connects while the node
	// starts waits in the backlog or gets Unavailable, never "connection
	// refused" from a node that is coming up.
	if err := n.startRedis(); err != nil {
		return n.abort(err)
	}
	if err := n.startHTTP(); err != nil {
		return n.abort(err)
	}
	// Every call is counted on its connection (trackGRPCUnary), so that
	// one with a call in flight is never taken for idle.
	n.grpcLis = portmux.Limit(mux.GRPC(), cmp.Or(n.cfg.GRPCMaxConns, DefaultGRPCMaxConns)).
		EvictIdle(cmp.Or(n.cfg.GRPCEvictIdleAfter, defaultGRPCEvictIdleAfter))
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		_ = mux.Serve() // ends when the gRPC server closes its listener
	}()
	go func() {
		defer n.wg.Done()
		if err := n.srv.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc server stopped", "err", err)
		}
	}()
	if err := n.establishIdentity(ctx); err != nil {
		return n.abort(err)
	}
	if n.testHooks.identified != nil {
		n.testHooks.identified()
	}
	select {
	case <-n.stopC:
		return n.abort(errors.New("node: stopped while starting"))
	default:
	}
	// Measured before the node is ready to serve clients, so that one
	// restarted on a full disk refuses writes from its first request, and
	// once it has its identity, which the refusals name.
	n.startSpaceGuard()
	if err := n.startRaft(); err != nil {
		return n.abort(err)
	}
	n.startLoops()
	id := n.ident.Load()
	n.log.Info("node serving", "node", id.GetNodeId(), "cluster", fmt.Sprintf("%x", id.GetClusterId()), "addr", n.cfg.Addr,
		"redis_addr", n.RedisAddr(), "http_addr", n.HTTPAddr())
	return nil
}

// newServer builds the gRPC server and registers the front door's services.
func (n *Node) newServer() *grpc.Server {
	// ServerCodec counts a request's repeated elements before it decodes it.
	srv := grpc.NewServer(append(n.sec.grpcOptions(), grpc.MaxRecvMsgSize(maxMsgBytes), grpc.MaxSendMsgSize(maxMsgBytes),
		grpc.ForceServerCodecV2(grpcapi.ServerCodec()),
		// validate took 0 for the default and refused past uint32.
		grpc.MaxConcurrentStreams(uint32(n.cfg.MaxConcurrentStreams)),
		grpc.KeepaliveEnforcementPolicy(dial.KeepaliveEnforcement), grpc.KeepaliveParams(n.serverKeepalive()),
		// Auth as a call's headers arrive, before its message is read.
		grpc.InTapHandle(n.sec.auth.Tap()),
		// Auth first: a refused call is neither counted nor timed.
		// MarkAnswered before every interceptor that answers with an
		// error, so a node forwarding here tells each from a broken
		// connection (grpcapi/forward.go).
		// trackGRPC* count each call on its connection; a call auth
		// refuses ends at once, and its bytes, read, show the client is
		// there (portmux.EvictIdle).
		grpc.ChainUnaryInterceptor(n.sec.auth.Unary(), grpcapi.MarkAnswered(), n.trackGRPCUnary, n.observeUnary, grpcapi.RefuseOtherCluster(n.clusterID),
			grpcapi.DropPartitioned(n.blocked)),
		grpc.ChainStreamInterceptor(n.sec.auth.Stream(), n.trackGRPCStream))...)
	b := n.backend()
	limits := grpcapi.Limits{MaxKeyBytes: n.cfg.MaxKeyBytes, MaxValueBytes: n.cfg.MaxValueBytes}
	// Stream calls get the per-call accounting the unary chain gives.
	n.kv = grpcapi.NewKV(b, limits).WithCallInterceptors(n.trackUnary, n.observeUnary).
		WithAvailable(n.hints, n.cfg.AvailableTimeout, n.heldTentative).HoldOnlyWhile(n.mayHoldTentative)
	if n.cfg.PeerDialer != nil {
		// Forwards to peers travel as the client's calls do: on the framed
		// wire, with the peer dial's TLS and token, stamped with this node's
		// id for partitions and its cluster id, which a node of another
		// cluster refuses (grpcapi/peerwire.go).
		n.kv.WithPeerWire(n.cfg.PeerDialer, grpcapi.PeerWire{TLS: n.sec.peerTLS, Token: n.cfg.AuthToken, FromNode: func() uint64 { return uint64(n.ID()) },
			Cluster: n.clusterID})
	}
	concordpb.RegisterKVServer(srv, n.kv)
	concordpb.RegisterClusterServer(srv, n.cluster)
	concordpb.RegisterBackupServer(srv, grpcapi.NewBackup(n.kv))
	concordpb.RegisterRaftTransportServer(srv, grpcapi.NewRaftTransport(b))
	concordpb.RegisterAdminServer(srv, grpcapi.NewAdmin(b, n.cfg.EnableFaultInjection))
	return srv
}

// abort stops the node Start is starting (Start holds startMu).
func (n *Node) abort(err error) error {
	n.stop()
	return err
}

// serveRaftConns hands the framed raft connections the port mux routes to
// l to the transport, once raft runs; before, they are closed (the peer
// reconnects). It ends when the mux closes, with the gRPC server.
func (n *Node) serveRaftConns(l net.Listener) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case <-n.ready:
				go n.transport.ServeConn(c) // tracked by the transport, closed by its Stop
			default:
				_ = c.Close()
			}
		}
	}()
}

// serveClientConns serves the framed client connections (the client's
// default TCP wire for KV.Stream) the port mux routes to l, with the KV
// service's stream handler and the same auth and message bounds as gRPC.
func (n *Node) serveClientConns(l net.Listener) {
	n.kvConns = n.kv.NewConnServer(n.sec.auth.CheckClientConn, maxMsgBytes, n.log)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.kvConns.Serve(l) // ends when the mux closes, with the gRPC server
	}()
}

// startRaft creates the transport and the host and starts them.
func (n *Node) startRaft() error {
	id := n.ident.Load()
	n.transport = transport.New(transport.Config{
		ClusterID: id.GetClusterId(), NodeID: ids.NodeID(id.GetNodeId()),
		Resolve:   n.book.resolvePeer,
		OnReceive: n.markSeen,
		Blocked:   n.blocked,
		Logger:    n.log,
		// A negative rate (unlimited) becomes 0, which the transport reads so.
		SnapshotRateBytes: max(int64(n.cfg.SnapshotRateMiB), 0) << 20,
		SnapshotBytes:     n.metrics.SnapshotBytes,
		Frames:            n.metrics.RaftFrame,
		DialOptions:       n.sec.peerDial,
		Wire:              n.cfg.PeerWire,
		TLS:               n.sec.peerTLS,
		Token:             n.cfg.AuthToken,
		AuthConn:          n.sec.auth.CheckPeerConn,
		// A received snapshot must leave the space guard's reserve free,
		// so that catching a replica up cannot fill the disk the guard
		// keeps client writes off (none while the guard is off).
		SnapshotDiskMargin: snapshotDiskMargin(n.space.reserve.Load()),
	}, n.eng)
	hc := multiraft.DefaultConfig(ids.NodeID(id.GetNodeId()))
	hc.TickInterval = n.cfg.TickInterval
	hc.LeaseReads = n.cfg.LeaseReads
	hc.LogKeepEntries, hc.LogTailEntries, hc.LogTruncateEntries = n.cfg.LogKeepEntries, n.cfg.LogTailEntries, n.cfg.LogTruncateEntries
	hc.Logger = n.log
	hc.Placement = n.placementOf
	hc.Observer = n.metrics
	hc.OnLeaderKnown = func(ids.ShardID) { n.placement.reportSoon() }
	hc.Ticks = n.testHooks.ticks
	// Leaders go where `concord leader transfer` and the placement
	// scheduler put them; the preferred replica campaigns only at start.
	hc.NoLeaderPreference = true
	n.host = multiraft.New(hc, n.eng, n.transport, func(shard ids.ShardID) replica.StateMachine {
		if shard == routing.MetaShard {
			return placement.New()
		}
		return kv.New(uint64(shard))
	})
	n.transport.SetReceiver(n.host)
	if err := n.host.Start(); err != nil {
		return err
	}
	// A node the placement service marks gone stops leading here at once
	// (multiraft's LeaderGone), not an election timeout later.
	n.book.setGone(n.host.LeaderGone)
	n.readyNow.Store(true)
	close(n.ready)
	return nil
}

// startLoops starts the node's periodic goroutines: heartbeats to the
// placement leader (heartbeat.go), replica repair on the placement leader
// (repair.go), session expiry (sessions.go), the expiry sweep, the disk
// space guard's measurements (space.go), about once a second, more often
// with faster heartbeats (tests), and the reconciler of tentative writes
// (reconcile.go).
func (n *Node) startLoops() {
	if !n.testHooks.noHeartbeats {
		n.goLoop(n.cfg.HeartbeatInterval, n.sendHeartbeat, n.placement.report, true)
	}
	if !n.testHooks.noRepairs {
		n.goLoop(n.cfg.RepairInterval, n.repair, n.placement.kick, false)
	}
	n.goLoop(min(n.cfg.SessionTTL/4, time.Minute), n.expireSessions, nil, false)
	n.goLoop(expiry.Interval, n.sweepExpired, nil, false)
	if n.space.reserve.Load() != 0 {
		n.goLoop(min(n.cfg.HeartbeatInterval, time.Second), n.checkSpace, nil, false)
	}
	n.startReconciler()
}

// goLoop runs f every interval until the node stops, and also whenever
// kick (nil: never) delivers, and once at the start if now is set (the
// heartbeat: a joining node is heard of at once, not an interval later).
func (n *Node) goLoop(interval time.Duration, f func(ctx context.Context), kick <-chan struct{}, now bool) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		run := func() {
			ctx, cancel := context.WithTimeout(context.Background(), max(interval, 2*time.Second))
			defer cancel()
			f(ctx)
		}
		if now {
			run()
		}
		for {
			select {
			case <-n.stopC:
				return
			case <-t.C:
			case <-kick:
			}
			run()
		}
	}()
}

// Failed is closed when the node has stopped itself for good: its identity
// was removed from the cluster. Err says why.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err is why the node stopped itself; nil until Failed is closed.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

// fail stops the node for good with err: logged, then Failed closes.
func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.log.Error("stopping node", "err", err)
		n.failErr = err
		close(n.failed)
	})
}

// Addr is the address the node serves on.
func (n *Node) Addr() string { return n.lis.Addr().String() }

// clusterID is the node's cluster id, 0 until it is initialized.
func (n *Node) clusterID() uint64 { return n.ident.Load().GetClusterId() }

// ID is the node's id, 0 until it is initialized.
func (n *Node) ID() ids.NodeID { return ids.NodeID(n.ident.Load().GetNodeId()) }

// Stop ends every goroutine of the node and closes its storage. gRPC's Stop
// cancels the running handlers but does not wait for them, so Stop waits
// (at most drainTimeout) for them to return before closing storage: those
// waiting on the host end with ErrStopped once it stops, and a read that
// passed its barrier finishes its read. A handler that outlives the wait and
// then reads gets storage.ErrClosed (Unavailable), never Pebble's panic.
//
// Stop called while Start runs ends Start's waits for peers and waits for
// Start to return: Start then starts nothing more.
func (n *Node) Stop() {
	n.stopSig.Do(func() { close(n.stopC) })
	n.startMu.Lock() // waits for a running Start to return
	defer n.startMu.Unlock()
	n.stop()
}

// stop is Stop without waiting for Start (which calls it to abort).
func (n *Node) stop() {
	n.stopSig.Do(func() { close(n.stopC) })
	n.stopOnce.Do(func() {
		if n.httpSrv != nil {
			_ = n.httpSrv.Close()
		}
		if n.srv != nil {
			n.srv.Stop()
		}
		if n.kvConns != nil {
			n.kvConns.Close() // cancels their calls, before the host and storage go
		}
		if n.redis != nil {
			// Cancels the commands in flight and waits for the
			// connections, before the host and storage go.
			n.redis.Close(n.drainTimeout)
		}
		select {
		case <-n.ready:
			n.host.Stop()
			n.transport.Stop()
		default:
		}
		if left := n.rpcs.wait(n.drainTimeout); left > 0 {
			n.log.Warn("closing storage with RPC handlers still running", "handlers", left)
		}
		n.wg.Wait()
		if n.kv != nil {
			n.kv.ClosePeers()
		}
		n.conns.closeAll()
		if n.eng != nil {
			if err := n.eng.Close(); err != nil {
				n.log.Error("closing storage", "err", err)
			}
		}
	})
}

// Shutdown leaves gracefully: it tells the placement leader that this node
// is stopping (so that it plans no leadership or replica onto it), hands
// leadership of the shards this node leads to caught-up peers, its
// replicas taking none back (so the cluster does not wait out an election
// timeout), gives in-flight requests a moment to finish, then stops and
// flushes storage. It is bounded by timeout.
func (n *Node) Shutdown(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	select {
	case <-n.ready:
		n.announceStop(min(stopReportWait, timeout/4))
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-time.Second))
		start := time.Now()
		if err := n.host.TransferLeadersAway(ctx); err != nil {
			n.log.Info("some leaderships not handed off before shutdown", "err", err)
		} else {
			n.log.Info("leaderships handed off", "took", time.Since(start).Round(time.Millisecond))
		}
		cancel()
	default:
		// Not serving yet (Start may still run, and set srv): nothing
		// to hand off or drain.
		n.Stop()
		return
	}
	if n.srv != nil {
		// GracefulStop also waits for the peers' raft streams, which never
		// end on their own: give in-flight client requests a moment, no more.
		done := make(chan struct{})
		go func() { n.srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(min(time.Until(deadline), time.Second)):
		}
	}
	n.Stop()
}

// stopReportWait bounds how long Shutdown waits for the heartbeat that
// tells the placement leader this node is stopping: an unanswering
// placement leader must not delay a stop by more.
const stopReportWait = time.Second

// announceStop makes every heartbeat from now on say that this node is
// stopping, asks the heartbeat loop for one now, and waits until it was
// sent or wait passed (the loop may be inside a heartbeat that hangs; the
// next one says it). The placement leader then plans no leadership or new
// replica onto this node (scheduler.Report.Stopping), and its leader
// balancing does not hand back the leaderships this node is handing off.
func (n *Node) announceStop(wait time.Duration) {
	n.stopping.Store(true)
	n.placement.reportSoon()
	select {
	case <-n.stoppingSent:
	case <-time.After(wait):
		n.log.Info("placement leader not told of the stop in time; handing off anyway", "waited", wait)
	}
}
