package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/node"
	"github.com/concord-kv/concord/internal/storage"
)

func newServerCmd() *cobra.Command { return serverCmd(runServer) }

// serverCmd is `concord server`, which hands the configuration its flags
// make to run (runServer; tests look at it instead).
func serverCmd(run func(node.Config) error) *cobra.Command {
	cfg := node.DefaultConfig()
	var peers, join, logLevel, logFormat, pprofAddr, tokenFile string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a node",
		Long: "Run a Concord node. The nodes in --peers form the initial cluster the first time they start\n" +
			"with empty data dirs; a node started with --join and an empty data dir joins a running cluster\n" +
			"through any of the members listed. On restart a node takes its identity and membership from its\n" +
			"data dir (--peers and --join are then ignored); its --addr must be the one it was recorded at.\n" +
			"With no flags: a single-node cluster on 127.0.0.1:7001 with data in ./concord-data.",
		Args: argCount(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			slog.SetDefault(logger)
			if peers != "" {
				cfg.Peers = strings.Split(peers, ",")
			}
			if join != "" {
				cfg.Join = strings.Split(join, ",")
			}
			if err := checkNodeAddrs(cfg); err != nil {
				return err
			}
			if err := checkCounts(cmd, "shards", "replicas", "max-key-bytes", "max-value-bytes"); err != nil {
				return err
			}
			// 0 would read as "the default" to the node's config.
			if cmd.Flags().Changed("available-timeout") && cfg.AvailableTimeout <= 0 {
				return fmt.Errorf("--available-timeout must be positive (how long an available write waits for its shard to commit before it is held as tentative), got %v", cfg.AvailableTimeout)
			}
			if cmd.Flags().Changed("learner-timeout") && cfg.LearnerTimeout == 0 {
				return errors.New("--learner-timeout must be positive (how long a learner may make no progress before it is removed as stuck), got 0s")
			}
			// 0 would read as "the default" to the node's config, and to
			// grpc-go as unlimited.
			if cmd.Flags().Changed("max-concurrent-streams") && cfg.MaxConcurrentStreams < 1 {
				return fmt.Errorf("--max-concurrent-streams must be at least 1 (the gRPC calls one client connection may have open at once; "+
					"calls past it wait for one to end), got %d", cfg.MaxConcurrentStreams)
			}
			if tokenFile != "" {
				tok, err := readToken(tokenFile)
				if err != nil {
					return err
				}
				cfg.AuthToken = tok
			}
			if pprofAddr != "" {
				if _, _, err := servePprof(pprofAddr, defaultPprofTimeouts, logger); err != nil {
					return err
				}
			}
			return run(cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", cfg.Addr, "address to serve clients and peers on (gRPC)")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the node's data")
	f.StringVar(&peers, "peers", "", "comma-separated addresses of the initial cluster, this node included (default: --addr alone)")
	f.StringVar(&join, "join", "", "comma-separated addresses of members of a running cluster to join through (empty data dir only)")
	f.DurationVar(&cfg.SuspectAfter, "suspect-after", cfg.SuspectAfter, "silence after which a node is suspect: no new replicas, its leaders move away")
	f.DurationVar(&cfg.DeadAfter, "dead-after", cfg.DeadAfter, "silence after which a node is dead: its replicas are re-created elsewhere")
	f.DurationVar(&cfg.LearnerTimeout, "learner-timeout", cfg.LearnerTimeout, "when this node runs the scheduler: time a learner may make no progress while its shard is led before it is removed as stuck, after which its node takes no replica of that shard for as long (at least 10s)")
	f.IntVar(&cfg.TestDropJoinAnswers, "test-drop-join-answers", 0, "fault injection: discard this many join answers as if lost (needs --enable-fault-injection)")
	_ = f.MarkHidden("test-drop-join-answers")
	f.IntVar(&cfg.Shards, "shards", cfg.Shards, "number of shards (fixed when the cluster bootstraps)")
	f.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas per shard (capped at the node count)")
	f.IntVar(&cfg.MaxKeyBytes, "max-key-bytes", cfg.MaxKeyBytes, "largest key accepted, in bytes (at most 65536)")
	f.IntVar(&cfg.MaxValueBytes, "max-value-bytes", cfg.MaxValueBytes, "largest value accepted")
	f.DurationVar(&cfg.SessionTTL, "session-ttl", cfg.SessionTTL, "how long shards remember an idle client session (at-most-once window)")
	f.StringVar(&cfg.PeerWire, "peer-wire", "tcp", "how raft messages go to peers: tcp (framed connections on the peers' port) or grpc (gRPC streams); either is received")
	f.BoolVar(&cfg.LeaseReads, "lease-reads", cfg.LeaseReads, "shard leaders serve linearizable reads by leader lease, without a ReadIndex round, for the election timeout less 2 ticks, less 10 % (0.72 s by default) after a round was answered, on the monotonic clock, so a paused leader's lease runs out (false: every batch of reads takes a round)")
	f.IntVar(&cfg.MaxMovesPerNode, "max-moves-per-node", cfg.MaxMovesPerNode, "replica moves one node may take part in at a time, when this node runs the scheduler (0: default 4)")
	f.Int64Var(&cfg.ReserveDiskBytes, "reserve-disk-bytes", cfg.ReserveDiskBytes, "free bytes the data dir's filesystem must keep: while any live node has fewer, the cluster refuses writes that add data (deletes and reads go on) until it has them again plus a margin (-1: 1 GiB or 5 % of the filesystem, whichever is smaller; 0: off)")
	f.DurationVar(&cfg.AvailableTimeout, "available-timeout", cfg.AvailableTimeout, "how long an available write (put --available) waits for its shard to commit before this node holds it as a tentative write, reconciled when the shard has a quorum again")
	f.Int64Var(&cfg.MaxHintBytes, "max-hint-bytes", cfg.MaxHintBytes, "bytes of tentative writes (keys and values) this node may hold: past it an available write that cannot commit fails as an ordinary one (0: none held)")
	f.IntVar(&cfg.SnapshotRateMiB, "snapshot-rate-mib", cfg.SnapshotRateMiB, "MiB per second all snapshots this node sends may use together (negative: unlimited)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text (key=value lines) or json (one object per line)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "", "serve /healthz, /readyz, /metrics (Prometheus) and /api/status over HTTP on this address (default: off)")
	f.StringVar(&pprofAddr, "pprof-addr", "", "serve Go's pprof profiles over HTTP on this address (debugging)")
	f.StringVar(&cfg.RedisAddr, "redis-addr", "", "serve the Redis protocol (RESP2/RESP3) on this address, e.g. 127.0.0.1:6380 (default: off)")
	f.BoolVar(&cfg.RedisEnableFlush, "redis-enable-flush", false, "allow FLUSHDB and FLUSHALL on the Redis port")
	f.StringVar(&tokenFile, "auth-token-file", "", "file holding the token clients must give: gRPC metadata \"authorization: Bearer TOKEN\" (concord --auth-token-file), Redis AUTH, HTTP /api/status")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "PEM certificate the node presents on every port and to its peers (with --tls-key and --tls-ca: TLS on; see concord certs)")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&cfg.TLSCAFile, "tls-ca", "", "PEM CA certificate: peers (raft, forwarding) must present a certificate it signed; client certificates are checked against it")
	f.BoolVar(&cfg.EnableFaultInjection, "enable-fault-injection", false, "serve the Admin fault API (concord fault die, partition, heal, disk-low; CONCORD.FAULT over RESP) and allow --test-drop-join-answers; test clusters only")
	f.DurationVar(&cfg.TickInterval, "tick-interval", cfg.TickInterval, "raft tick; elections time out after 10 ticks")
	f.Uint64Var(&cfg.LogKeepEntries, "raft-log-keep-entries", cfg.LogKeepEntries, "most applied raft entries a replica keeps for followers that lag (further behind: snapshot)")
	f.Uint64Var(&cfg.LogTailEntries, "raft-log-tail-entries", cfg.LogTailEntries, "entries a leader keeps below its slowest follower's position")
	f.Uint64Var(&cfg.LogTruncateEntries, "raft-log-truncate-entries", cfg.LogTruncateEntries, "fewest entries a log truncation removes")
	f.IntVar(&cfg.RedisMaxClients, "redis-max-clients", 0, "most RESP connections the node serves at once, --addr and --redis-addr together; one more closes the oldest that has sent no command, or, when all have, gets \"ERR max number of clients reached\" (0: 10000)")
	f.IntVar(&cfg.GRPCMaxConns, "grpc-max-conns", 0, "most gRPC connections the node serves at once on --addr; one more takes the place of one idle for 30 s (no call in flight, nothing read), or, when none is, is closed at once (its client sees Unavailable and retries) (0: 10000)")
	f.IntVar(&cfg.MaxConcurrentStreams, "max-concurrent-streams", cfg.MaxConcurrentStreams, "most gRPC calls (streams) one connection may have open on --addr at once; a gRPC client's calls past it wait for one to end (at least 1)")
	f.IntVar(&cfg.RedisOutputBufferLimit, "redis-output-buffer-limit", 0, "bytes of replies one Redis connection may hold for one pipeline (0: 64 MiB)")
	_ = f.MarkHidden("redis-output-buffer-limit")
	_ = f.MarkHidden("tick-interval")
	_ = f.MarkHidden("raft-log-keep-entries")
	_ = f.MarkHidden("raft-log-truncate-entries")
	_ = f.MarkHidden("raft-log-tail-entries")
	return cmd
}

// checkNodeAddrs refuses a node address no peer or client can reach.
// --addr is the node's identity, written into its data dir and the
// cluster's routing table: with port 0 (listen on any free port) the node
// bootstrapped and served under the name 127.0.0.1:0, which nobody can
// dial; a port past 65535 in --peers or --join left the node waiting for a
// peer that cannot exist. (node.Config takes port 0: its tests never
// serve.) A named port (a service name) is left to the listen.
func checkNodeAddrs(cfg node.Config) error {
	check := func(flag string, addrs []string) error {
		for _, a := range addrs {
			if a == "" {
				continue // --addr "": the default; an empty peer: node.Config says so
			}
			_, port, err := net.SplitHostPort(a)
			if err != nil {
				return fmt.Errorf("%s %q: %w", flag, a, err)
			}
			if n, err := strconv.Atoi(port); err == nil && (n < 1 || n > 65535) {
				return fmt.Errorf("%s %q: the port must be between 1 and 65535: it is where the node's peers and clients reach it", flag, a)
			}
		}
		return nil
	}
	return errors.Join(check("--addr", []string{cfg.Addr}), check("--peers", cfg.Peers), check("--join", cfg.Join))
}

// checkCounts refuses a count flag given as 0 or less. node.Config and
// localcluster read a 0 as "the default", so --shards 0 started 16
// shards, --replicas 0 three replicas and --max-key-bytes 0 took keys of
// 4096 bytes, without a word to the user who typed 0; only a value the user gave is checked (Changed), the flag's
// own default is positive.
func checkCounts(cmd *cobra.Command, names ...string) error {
	for _, name := range names {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 1 {
			return fmt.Errorf("--%s must be at least 1, got %d", name, n)
		}
	}
	return nil
}

// readToken reads an auth token file: its content without surrounding
// white space, which must not be empty and must be a token the wires can
// carry (frame.CheckToken).
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--auth-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--auth-token-file %s is empty", path)
	}
	if err := frame.CheckToken(tok); err != nil {
		return "", fmt.Errorf("--auth-token-file %s: %w", path, err)
	}
	return tok, nil
}

// runServer runs a node until SIGINT or SIGTERM.
func runServer(cfg node.Config) error {
	cfg.PeerDialer = peerKV
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	// "" is the default data dir, as node.Config reads it.
	dataDir := cmp.Or(cfg.DataDir, node.DefaultConfig().DataDir)
	created := missingRoot(dataDir) // nothing has created it yet
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := n.Start(ctx); err != nil {
		removeFailedDataDir(created, dataDir, cfg.Logger)
		if ctx.Err() != nil {
			return nil // interrupted while waiting for peers
		}
		return fmt.Errorf("start node: %w", err)
	}
	select {
	case <-ctx.Done():
	case <-n.Failed():
		n.Shutdown(5 * time.Second)
		return n.Err()
	}
	cfg.Logger.Info("stopping node: handing off leaderships, then flushing")
	n.Shutdown(5 * time.Second)
	return nil
}

// missingRoot is the topmost directory of dir's path that does not exist
// (dir itself, or an ancestor a start would create with it), or "" when
// dir exists: a data dir that existed before is never removed.
func missingRoot(dir string) string {
	root := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			return root
		}
		root = d
		if filepath.Dir(d) == d {
			return root
		}
	}
}

// removeFailedDataDir removes root, the directories a start that failed
// created for dataDir, when the node got no identity in it. Left behind,
// the empty database made the dir look like a node's: `concord restore
// --data-dir` refused it as "not empty", and an operator could not tell it
// from a node that had once run. Nothing is removed if the storage cannot
// be opened again (another process holds its lock: two nodes started on
// one new dir at once) or holds an identity (the node bootstrapped or
// joined before it failed: the cluster may know it).
func removeFailedDataDir(root, dataDir string, logger *slog.Logger) {
	if root == "" {
		return
	}
	eng, err := storage.Open(dataDir)
	if err != nil {
		logger.Warn("failed start: data dir left as it is", "data_dir", dataDir, "err", err)
		return
	}
	_, identified, err := eng.Ident()
	_ = eng.Close()
	if err != nil || identified {
		return
	}
	if err := os.RemoveAll(root); err != nil {
		logger.Warn("failed start: could not remove the data dir it created", "data_dir", root, "err", err)
	}
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// pprofTimeouts are the deadlines of the --pprof-addr server.
type pprofTimeouts struct {
	readHeader, idle time.Duration
}

// defaultPprofTimeouts are the main HTTP server's (internal/node/http.go).
var defaultPprofTimeouts = pprofTimeouts{readHeader: 10 * time.Second, idle: 2 * time.Minute}

// newPprofServer is the HTTP server of net/http/pprof's handlers. A client
// that opens connections and leaves them idle, or never finishes its
// request headers, holds a goroutine and a socket only until t's
// deadlines. It has no WriteTimeout, which a CPU profile or trace (30 s
// by default, ?seconds=N) would outlast, and no ReadTimeout: that read
// deadline stays on the connection while the handler runs, and net/http
// cancels the request's context when it passes, which ends a profile
// early.
func newPprofServer(t pprofTimeouts) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: t.readHeader,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    64 << 10,
	}
}

// servePprof serves net/http/pprof on addr, for profiling a running node,
// and returns the server and the address it listens on. It listens before
// returning, so an address that cannot be bound fails the start.
func servePprof(addr string, t pprofTimeouts, logger *slog.Logger) (*http.Server, string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--pprof-addr: %w", err)
	}
	srv := newPprofServer(t)
	// The address listened on, not the one asked for: with port 0 the
	// port was chosen here and nothing else said which.
	logger.Info("serving pprof", "addr", lis.Addr().String())
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pprof server stopped", "addr", addr, "err", err)
		}
	}()
	return srv, lis.Addr().String(), nil
}

// peerKV is the node's PeerDialer: forwards to peers travel on the public
// client's request stream (the framed wire, gRPC as the fallback).
func peerKV(conn grpc.ClientConnInterface, addr string, w grpcapi.PeerWire) grpcapi.PeerKV {
	return client.NewPeerKV(conn, addr, client.PeerWire{TLS: w.TLS, Token: w.Token, FromNode: w.FromNode, Cluster: w.Cluster, Sent: w.Sent})
}
