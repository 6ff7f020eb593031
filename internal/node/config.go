package node

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/transport"
	"github.com/concord-kv/concord/internal/version"
)

// minSessionTTL is the shortest --session-ttl a node takes. A session must
// outlive every retry of its client's calls (the Go client's default
// deadline is 10 s), or a retry after its record expired applies again;
// and idle time is measured on the shard's clock, which a new leader whose
// clock is ahead can move up to kv.MaxClockStep (90 s) past real time once,
// so a session may be forgotten that much early. Two minutes leave a
// retry window of half a minute even then.
const minSessionTTL = 2 * time.Minute

// Config configures a node. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Addr is where the node serves clients and peers (gRPC).
	Addr string
	// DataDir holds the node's Pebble database.
	DataDir string
	// Peers are the addresses of the initial cluster, this node included.
	// Used only the first time a node starts with an empty data dir.
	Peers []string
	// Join are addresses of members of a running cluster. A node with an
	// empty data dir asks them in turn to register it as a new node, instead
	// of bootstrapping with Peers; a node with an identity ignores it.
	Join []string
	// SuspectAfter and DeadAfter are how long a node may be silent before
	// the placement leader judges it SUSPECT (no new replicas, leaders move
	// away) and DEAD (its replicas are re-created elsewhere).
	SuspectAfter, DeadAfter time.Duration
	// LearnerTimeout is how long a learner may make no progress while its
	// shard is led before the placement leader removes it as stuck, and
	// how long its node then takes no new replica of that shard
	// (scheduler.Settings.LearnerTimeout): at least minLearnerTimeout.
	LearnerTimeout time.Duration
	// TestDropJoinAnswers makes the node throw away the answers of its first
	// that many successful join attempts, as if they were lost, and retry:
	// a fault hook for tests of join idempotence, honoured only with
	// EnableFaultInjection.
	TestDropJoinAnswers int
	// Shards is the number of user shards, fixed at bootstrap.
	Shards int
	// Replicas is the replication factor R, capped at the node count.
	Replicas int
	// MaxKeyBytes and MaxValueBytes bound request sizes.
	MaxKeyBytes, MaxValueBytes int
	// SessionTTL is how long a shard remembers an idle client session:
	// at least minSessionTTL.
	SessionTTL time.Duration
	// TickInterval is the raft tick; elections time out after 10 ticks.
	TickInterval time.Duration
	// LogKeepEntries, LogTailEntries and LogTruncateEntries control raft
	// log truncation (multiraft.Config): a leader keeps what its slowest
	// follower lacks plus LogTailEntries, its followers truncate where it
	// does, no replica keeps more than LogKeepEntries applied entries, and
	// a truncation removes at least LogTruncateEntries.
	LogKeepEntries, LogTailEntries, LogTruncateEntries uint64
	// HeartbeatInterval is how often the node reports to the placement leader.
	HeartbeatInterval time.Duration
	// RepairInterval is how often the placement leader runs a scheduler
	// round. A replica move takes about three rounds (add a learner,
	// promote it, remove the excess voter), so this paces rebalancing.
	RepairInterval time.Duration
	// RedisAddr, when set, is where the node serves the Redis protocol
	// (internal/redisapi); empty: off.
	RedisAddr string
	// HTTPAddr, when set, is where the node serves /healthz, /readyz,
	// /metrics and /api/status (internal/httpapi); empty: off.
	HTTPAddr string
	// HTTPIdleTimeout closes an HTTP keep-alive connection that has sent
	// no request for that long; 0 means defaultHTTPIdleTimeout (2 min).
	// No flag: tests shorten it.
	HTTPIdleTimeout time.Duration
	// RedisEnableFlush allows FLUSHDB and FLUSHALL on the Redis port.
	RedisEnableFlush bool
	// RedisOutputBufferLimit bounds the replies one Redis connection holds
	// for one pipeline (0: redisapi's default, 64 MiB).
	RedisOutputBufferLimit int
	// RedisMaxClients bounds the node's RESP connections, on --addr and
	// --redis-addr together (0: redisapi's default, 10,000, Redis's
	// maxclients); one more closes the oldest that has sent no command
	// or, when all have, is answered "ERR max number of clients reached"
	// and closed.
	RedisMaxClients int
	// GRPCMaxConns bounds the node's gRPC connections on --addr (0:
	// DefaultGRPCMaxConns); one more takes the place of one idle for
	// GRPCEvictIdleAfter or, when none is, is closed as soon as it is
	// accepted.
	GRPCMaxConns int
	// GRPCMaxConnIdle closes a gRPC connection with no call in flight for
	// that long, with a GOAWAY (clients reconnect for their next call); 0
	// means dial.ServerKeepalive's (5 min). No flag: tests shorten it.
	GRPCMaxConnIdle time.Duration
	// GRPCEvictIdleAfter: at GRPCMaxConns, a new connection is served in
	// place of the one idle longest (no call in flight, nothing read) if it
	// has been idle this long (portmux.LimitListener.EvictIdle); 0 means
	// defaultGRPCEvictIdleAfter (30 s). No flag: tests shorten it.
	GRPCEvictIdleAfter time.Duration
	// MaxConcurrentStreams bounds the gRPC calls (streams) one connection
	// may have open on the node at once (grpc.MaxConcurrentStreams; 0:
	// DefaultMaxConcurrentStreams). The node tells each client so in its
	// HTTP/2 settings: a gRPC client's calls past it wait for one to end,
	// within their deadlines, and the server starts no more handlers than
	// that for a connection.
	MaxConcurrentStreams int
	// PeerDialer, when set, makes the node forward KV calls to peers over
	// their framed wire (grpcapi.WithPeerWire); the CLI sets it to the
	// public client's (client.NewPeerKV), which this layer may not import.
	// Nil: forwards are unary gRPC calls.
	PeerDialer grpcapi.PeerDialer
	// AuthToken, when set, is required from clients: as gRPC metadata
	// "authorization: Bearer TOKEN" (a caller with a CA-signed certificate
	// needs none), with AUTH (or HELLO AUTH) before any other Redis command,
	// and as an HTTP Bearer token on the admin routes. The node sends it on
	// its own calls to peers.
	AuthToken string
	// TLSCertFile, TLSKeyFile and TLSCAFile, all set or none, make every
	// port TLS: the main port (gRPC, raft, RESP), --redis-addr and
	// --http-addr present the certificate; peers must present one signed by
	// the CA, and the node presents its own to them.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// SnapshotRateMiB bounds the MiB per second of all snapshots the node
	// sends together (default 64; negative: unlimited).
	SnapshotRateMiB int
	// MaxMovesPerNode caps the replica moves (an added learner, or a
	// replica on its way out) one node takes part in at a time, when this
	// node runs the scheduler (0: the scheduler's default, 4).
	MaxMovesPerNode int
	// Version is the cluster version this node reports its binary applies
	// (package version); 0: version.Binary. Only tests set it, to stand for
	// an older binary.
	Version version.Level
	// PeerWire is how this node sends raft messages to its peers: "tcp"
	// (the default: framed connections through the peers' port mux) or
	// "grpc" (a gRPC stream per lane). A node receives both, so nodes with
	// different settings work together.
	PeerWire string
	// LeaseReads lets shard leaders serve linearizable reads by leader
	// lease, without a ReadIndex round, for a while after a round was
	// answered (multiraft.Config.LeaseReads; on in DefaultConfig and for
	// `concord server`, --lease-reads).
	LeaseReads bool
	// ReserveDiskBytes is the disk space guard's line (space.go): while
	// the data dir's filesystem has fewer free bytes, the node is low on
	// space and the cluster refuses client writes that add data.
	// ReserveDiskAuto (DefaultConfig's, and `concord server`'s): the
	// smaller of 1 GiB and 5 % of the filesystem; 0: the guard is off (the
	// zero Config's).
	ReserveDiskBytes int64
	// AvailableTimeout is how long an AVAILABLE write waits for its shard
	// to commit it before the node holds it as a tentative write (available
	// mode, internal/hints); 0: DefaultConfig's, 1 s.
	AvailableTimeout time.Duration
	// MaxHintBytes bounds the bytes of tentative writes the node holds
	// (keys and records): past it an AVAILABLE write that cannot commit
	// fails as an ordinary one would. 0 (the zero Config's) refuses every
	// tentative write; DefaultConfig's is DefaultMaxHintBytes.
	MaxHintBytes int64
	// EnableFaultInjection turns on the Admin service (Die, Partition, Heal,
	// DiskLow) and CONCORD.FAULT over RESP; off, they refuse every call.
	// For test clusters only.
	EnableFaultInjection bool
	Logger               *slog.Logger
}

// DefaultConfig returns the settings `concord server` starts with.
func DefaultConfig() Config {
	return Config{
		Addr:                 "127.0.0.1:7001",
		DataDir:              "concord-data",
		Shards:               16,
		Replicas:             3,
		MaxKeyBytes:          4096,
		MaxValueBytes:        1 << 20,
		SessionTTL:           time.Hour,
		TickInterval:         100 * time.Millisecond,
		LogKeepEntries:       5000,
		LogTailEntries:       100,
		LogTruncateEntries:   100,
		HeartbeatInterval:    time.Second,
		RepairInterval:       500 * time.Millisecond,
		SnapshotRateMiB:      64,
		SuspectAfter:         5 * time.Second,
		DeadAfter:            60 * time.Second,
		LearnerTimeout:       30 * time.Minute,
		LeaseReads:           true,
		ReserveDiskBytes:     ReserveDiskAuto,
		AvailableTimeout:     time.Second,
		MaxHintBytes:         DefaultMaxHintBytes,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams,
	}
}

// DefaultMaxHintBytes is --max-hint-bytes' default: 256 MiB of tentative
// writes held by one node.
const DefaultMaxHintBytes = 256 << 20

// validate fills in defaults and rejects impossible settings.
// MaxKeyBytesCap bounds --max-key-bytes. A key is read whole wherever it
// goes (every op, scan page and index entry carries it, the Redis keyspace
// walks hold a page of them, glob patterns are matched against it at
// len(pattern)·len(key)), so a limit of megabytes made each of those
// megabytes per key; 64 KiB is far above any key a client needs.
const MaxKeyBytesCap = 64 << 10

// minLearnerTimeout is the shortest --learner-timeout a node takes: the
// scheduler's StepTimeout (10 s). The step that adds a learner may itself
// run that long before the learner's snapshot is even sent, so a shorter
// timeout could remove a learner before it had the time one step is
// given; and a learner's progress is seen only in its node's heartbeat
// reports (one a second, each counting for three), so anything shorter
// than a few of them judged a learner stuck that was moving. (The bound
// does not follow HeartbeatInterval: that has no flag, and tests that
// lengthen it to an hour keep the default timeout.) It is a floor of
// sense, not advice: a learner whose snapshot takes longer than the
// timeout to arrive is removed on every try (a snapshot send gives up
// after 10 min; the default is 30 min).
var minLearnerTimeout = scheduler.DefaultSettings(time.Second).StepTimeout

func (c *Config) validate() error {
	d := DefaultConfig()
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if len(c.Join) > 0 && len(c.Peers) > 0 {
		return errors.New("--join and --peers are exclusive: --peers bootstraps a new cluster, --join adds this node to a running one")
	}
	if len(c.Peers) == 0 {
		c.Peers = []string{c.Addr}
	}
	switch c.PeerWire {
	case "":
		c.PeerWire = transport.WireTCP
	case transport.WireTCP, transport.WireGRPC:
	default:
		return fmt.Errorf("--peer-wire %q: want %q or %q", c.PeerWire, transport.WireTCP, transport.WireGRPC)
	}
	for _, f := range []struct {
		v   *int
		def int
	}{{&c.Shards, d.Shards}, {&c.Replicas, d.Replicas}, {&c.MaxKeyBytes, d.MaxKeyBytes}, {&c.MaxValueBytes, d.MaxValueBytes},
		{&c.SnapshotRateMiB, d.SnapshotRateMiB}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.SessionTTL, d.SessionTTL}, {&c.TickInterval, d.TickInterval}, {&c.HeartbeatInterval, d.HeartbeatInterval},
		{&c.RepairInterval, d.RepairInterval}, {&c.SuspectAfter, d.SuspectAfter}, {&c.DeadAfter, d.DeadAfter},
		{&c.AvailableTimeout, d.AvailableTimeout}, {&c.LearnerTimeout, d.LearnerTimeout}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	if c.LogKeepEntries == 0 {
		c.LogKeepEntries = d.LogKeepEntries
	}
	if c.LogTruncateEntries == 0 {
		c.LogTruncateEntries = d.LogTruncateEntries
	}
	if c.LogTailEntries == 0 {
		c.LogTailEntries = d.LogTailEntries
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := c.checkIntervals(); err != nil {
		return err
	}
	switch {
	case c.Shards < 1 || c.Shards > 4096:
		return fmt.Errorf("--shards must be between 1 and 4096, got %d", c.Shards)
	case c.Replicas < 1:
		return fmt.Errorf("--replicas must be at least 1, got %d", c.Replicas)
	case c.MaxKeyBytes < 1:
		return fmt.Errorf("--max-key-bytes must be at least 1, got %d", c.MaxKeyBytes)
	case c.MaxValueBytes < 1:
		return fmt.Errorf("--max-value-bytes must be at least 1, got %d", c.MaxValueBytes)
	case c.MaxKeyBytes > MaxKeyBytesCap:
		return fmt.Errorf("--max-key-bytes above %d (64 KiB) is not supported, got %d", MaxKeyBytesCap, c.MaxKeyBytes)
	case c.MaxValueBytes > grpcapi.DefaultMaxBatchBytes: // a value must fit in a batch
		return fmt.Errorf("--max-value-bytes above %d (8 MiB, the most one batch may carry) is not supported, got %d",
			grpcapi.DefaultMaxBatchBytes, c.MaxValueBytes)
	case c.ReserveDiskBytes < ReserveDiskAuto:
		return fmt.Errorf("--reserve-disk-bytes must be a number of bytes, 0 (the guard off) or -1 (the default: 1 GiB or 5 %% of the filesystem, whichever is smaller), got %d",
			c.ReserveDiskBytes)
	case c.AvailableTimeout < 0:
		return fmt.Errorf("--available-timeout must be positive (how long an available write waits for its shard to commit before it is held as tentative), got %v", c.AvailableTimeout)
	case c.MaxHintBytes < 0:
		return fmt.Errorf("--max-hint-bytes must be a number of bytes, 0 (no tentative writes held) or more, got %d", c.MaxHintBytes)
	case c.SessionTTL < minSessionTTL:
		// Zero took the default above: this is a value given.
		return fmt.Errorf("--session-ttl must be at least %v (a client's retries must find its session; the shard's clock may run up to %v ahead), got %v",
			minSessionTTL, time.Duration(kv.MaxClockStep), c.SessionTTL)
	case c.RedisMaxClients < 0:
		return fmt.Errorf("--redis-max-clients must not be negative (0: 10000), got %d", c.RedisMaxClients)
	case c.GRPCMaxConns < 0:
		return fmt.Errorf("--grpc-max-conns must not be negative (0: %d), got %d", DefaultGRPCMaxConns, c.GRPCMaxConns)
	case c.MaxConcurrentStreams < 0 || int64(c.MaxConcurrentStreams) > math.MaxUint32:
		return fmt.Errorf("--max-concurrent-streams must be between 1 and %d (the gRPC calls one connection may have open at once), got %d",
			uint32(math.MaxUint32), c.MaxConcurrentStreams)
	case c.GRPCMaxConnIdle < 0 || c.GRPCEvictIdleAfter < 0:
		return fmt.Errorf("the gRPC idle times must not be negative (0: their defaults), got %v and %v", c.GRPCMaxConnIdle, c.GRPCEvictIdleAfter)
	case c.MaxMovesPerNode < 0:
		return fmt.Errorf("--max-moves-per-node must not be negative, got %d", c.MaxMovesPerNode)
	case c.SuspectAfter < 0 || c.DeadAfter <= c.SuspectAfter:
		return fmt.Errorf("--dead-after (%v) must be longer than --suspect-after (%v), and both positive", c.DeadAfter, c.SuspectAfter)
	case c.LearnerTimeout < minLearnerTimeout:
		// Zero took the default above: this is a value given.
		return fmt.Errorf("--learner-timeout must be at least %v (the time a placement step is given; a learner's progress is seen only in its node's heartbeats), got %v",
			minLearnerTimeout, c.LearnerTimeout)
	case c.TestDropJoinAnswers > 0 && !c.EnableFaultInjection:
		return errors.New("dropping join answers is a fault hook: it needs --enable-fault-injection")
	}
	if (c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != "") && (c.TLSCertFile == "" || c.TLSKeyFile == "" || c.TLSCAFile == "") {
		return errors.New("--tls-cert, --tls-key and --tls-ca go together: the node presents its certificate and checks its peers' against the CA")
	}
	if err := frame.CheckToken(c.AuthToken); err != nil {
		return fmt.Errorf("--auth-token-file: %w", err)
	}
	if c.RedisAddr != "" {
		if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
			return fmt.Errorf("--redis-addr %q: %w", c.RedisAddr, err)
		}
	}
	for _, a := range append(append([]string{c.Addr}, c.Peers...), c.Join...) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("address %q: %w", a, err)
		}
	}
	return nil
}

// checkIntervals refuses a negative interval (0 was replaced by its
// default): each drives a ticker, and time.NewTicker panics on a
// non-positive one, after the node has bootstrapped its data dir.
func (c *Config) checkIntervals() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"--session-ttl", c.SessionTTL}, {"--tick-interval", c.TickInterval},
		{"the heartbeat interval", c.HeartbeatInterval}, {"the repair interval", c.RepairInterval}} {
		if f.v < 0 {
			return fmt.Errorf("%s must be positive, got %v", f.name, f.v)
		}
	}
	return nil
}
