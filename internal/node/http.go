package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/httpapi"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
)

// The HTTP front door (--http-addr: /healthz, /readyz, /metrics,
// /api/status; internal/httpapi) and what feeds /metrics.

// readyLag is how many committed entries a replica may still have to apply
// while the node counts as caught up.
const readyLag = 1000

// defaultHTTPIdleTimeout is how long an idle keep-alive HTTP connection
// is kept (Config.HTTPIdleTimeout): longer than a scraper's interval.
const defaultHTTPIdleTimeout = 2 * time.Minute

// startHTTP serves the HTTP front door on cfg.HTTPAddr, if set. Like the
// Redis port it opens before the node has an identity, so probes see
// "not ready" rather than "connection refused" while the node starts.
func (n *Node) startHTTP() error {
	if n.cfg.HTTPAddr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w", n.cfg.HTTPAddr, err)
	}
	n.httpLis = lis
	idle := n.cfg.HTTPIdleTimeout
	if idle <= 0 {
		idle = defaultHTTPIdleTimeout
	}
	// Every phase of a connection has a deadline, so a client that opens
	// connections and leaves them idle, or trickles a request or never
	// reads the answer, holds a goroutine and a socket for a bounded time
	// (without IdleTimeout or ReadTimeout an idle keep-alive connection
	// was held until the client closed it).
	n.httpSrv = &http.Server{
		Handler:           httpapi.Handler(httpBackend{n}, httpapi.Config{Metrics: n.metrics.Handler(), AuthToken: n.cfg.AuthToken}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         n.sec.httpTLS(),
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		serve := n.httpSrv.Serve
		if n.httpSrv.TLSConfig != nil {
			serve = func(l net.Listener) error { return n.httpSrv.ServeTLS(l, "", "") } // the certificate is in TLSConfig
		}
		if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	}()
	return nil
}

// HTTPAddr is the address of the HTTP front door, "" if none.
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

type httpBackend struct{ n *Node }

func (b httpBackend) Ready() error { return b.n.readiness() }

func (b httpBackend) Status(ctx context.Context, stale bool) (*concordpb.StatusResponse, error) {
	if !b.n.isReady() {
		return nil, errors.New("the node has not started raft yet")
	}
	return b.n.cluster.Status(ctx, &concordpb.StatusRequest{Stale: stale})
}

// readiness is nil once the node is a member whose replicas all know a
// leader and have applied what they know is committed (within readyLag).
func (n *Node) readiness() error {
	if !n.isReady() {
		return errors.New("the node has not joined a cluster or started raft yet")
	}
	infos := n.host.Infos()
	if len(infos) == 0 && n.routes.Load() == nil {
		return errors.New("the node holds no replicas and has no routing table yet")
	}
	for _, info := range infos {
		if info.Desc == nil {
			continue // being created from a snapshot
		}
		if info.LeaderNode == 0 {
			return fmt.Errorf("shard %d has no known leader", info.Shard)
		}
		if info.Commit > info.Applied+readyLag {
			return fmt.Errorf("shard %d is catching up: %d committed entries to apply", info.Shard, info.Commit-info.Applied)
		}
	}
	return nil
}

// observeUnary is the gRPC interceptor that times every unary request.
func (n *Node) observeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	n.metrics.Request("grpc", methodName(info.FullMethod), status.Code(err).String(), time.Since(start))
	return resp, err
}

// methodName turns "/concord.v1.KV/Put" into "KV.Put".
func methodName(full string) string {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndex(full[:max(strings.Index(full, "/"), 0)], "."); i >= 0 {
		full = full[i+1:]
	}
	return strings.Replace(full, "/", ".", 1)
}

// stateCollector reports, at scrape time, what the node holds: replicas and
// leaders, each shard's indexes, and (on the placement leader) how many
// nodes are in each state.
type stateCollector struct{ n *Node }

var (
	descReplicas  = prometheus.NewDesc("concord_replicas", "Replicas this node holds.", nil, nil)
	descLeaders   = prometheus.NewDesc("concord_leaders", "Replicas on this node that lead their shard.", nil, nil)
	descReady     = prometheus.NewDesc("concord_ready", "1 if the node is ready (as /readyz), else 0.", nil, nil)
	descLag       = prometheus.NewDesc("concord_shard_apply_lag_entries", "Committed entries a replica here has not applied yet.", []string{"shard"}, nil)
	descApplied   = prometheus.NewDesc("concord_shard_applied_index", "The applied index of a replica here.", []string{"shard"}, nil)
	descLogKept   = prometheus.NewDesc("concord_shard_raft_log_applied_entries", "Applied entries a replica here still holds in its raft log (what it keeps for followers that lag; see leader-aware log truncation).", []string{"shard"}, nil)
	descTerm      = prometheus.NewDesc("concord_shard_term", "The raft term of a replica here.", []string{"shard"}, nil)
	descIsLeader  = prometheus.NewDesc("concord_shard_is_leader", "1 if the replica here leads its shard.", []string{"shard"}, nil)
	descRounds    = prometheus.NewDesc("concord_shard_read_rounds_total", "ReadIndex rounds the replica here issued since it was loaded; each serves every linearizable read queued before it.", []string{"shard"}, nil)
	descNodes     = prometheus.NewDesc("concord_cluster_nodes", "Nodes by state, as the placement leader judges them (reported by the placement leader only).", []string{"state"}, nil)
	descPlLeader  = prometheus.NewDesc("concord_placement_leader", "1 if this node leads the placement service (shard 0).", nil, nil)
	descBCHits    = prometheus.NewDesc("concord_storage_block_cache_hits_total", "Pebble block cache lookups that found the block, since the node's storage opened.", nil, nil)
	descBCMisses  = prometheus.NewDesc("concord_storage_block_cache_misses_total", "Pebble block cache lookups that read the block from its file, since the node's storage opened.", nil, nil)
	descBCBytes   = prometheus.NewDesc("concord_storage_block_cache_bytes", "Bytes of sstable blocks the Pebble block cache holds.", nil, nil)
	descFlushed   = prometheus.NewDesc("concord_storage_flushed_bytes_total", "Bytes Pebble wrote flushing memtables to L0, since the node's storage opened.", nil, nil)
	descCompact   = prometheus.NewDesc("concord_storage_compacted_bytes_total", "Bytes Pebble wrote compacting sstables, since the node's storage opened.", nil, nil)
	descFlushes   = prometheus.NewDesc("concord_storage_flushes_total", "Pebble memtable flushes, since the node's storage opened.", nil, nil)
	descFwdCalls  = prometheus.NewDesc("concord_forwarded_calls_total", "KV calls this node forwarded to other nodes on their request streams, by what the stream travelled on: wire=\"tcp\" the framed TCP wire, wire=\"grpc\" KV.Stream over gRPC (a node that does not speak the wire).", []string{"wire"}, nil)
	descAbsorbed  = prometheus.NewDesc("concord_writes_absorbed_total", "Writes left out of merged commands by this node (proposing as leader, or forwarding) because a later blind PUT of the same key in the same command overwrote them unobserved; each was answered as applied.", nil, nil)
	descVersion   = prometheus.NewDesc("concord_cluster_version", "The cluster version this node has learned (0: none yet); features of a higher level are not used (package version).", nil, nil)
	descBinary    = prometheus.NewDesc("concord_binary_version", "The highest cluster version this node's binary applies.", nil, nil)
	descDiskFree  = prometheus.NewDesc("concord_disk_free_bytes", "Free bytes of the filesystem holding the node's data dir, at the space guard's last measurement (0 with the guard off).", nil, nil)
	descReserve   = prometheus.NewDesc("concord_disk_reserve_bytes", "The node's --reserve-disk-bytes in bytes: under it the node is low on space (0: the guard is off).", nil, nil)
	descDiskLow   = prometheus.NewDesc("concord_disk_low", "1 while this node is low on space by its own measurement (under its reserve, until back above it plus a margin).", nil, nil)
	descAlarm     = prometheus.NewDesc("concord_space_alarm", "1 while this node refuses client writes that add data because it or another live node is low on space.", nil, nil)
	descTentative = prometheus.NewDesc("concord_tentative_writes", "Tentative writes (available mode) this node holds in its hint log, to be reconciled when their shards have a quorum.", nil, nil)
	descTentBytes = prometheus.NewDesc("concord_tentative_bytes", "Bytes (keys and records) of the tentative writes this node holds; bounded by --max-hint-bytes.", nil, nil)
	descCoalesced = prometheus.NewDesc("concord_incrs_coalesced_total", "INCRs this node, leading their shard or forwarding to its leader, sent inside a run of INCRs of one key that went as one op (Op.repeat), less one per run: the ops the runs saved; each was answered as applied alone.", nil, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReplicas, descLeaders, descReady, descLag, descApplied, descLogKept, descTerm, descIsLeader, descRounds, descNodes, descPlLeader, descBCHits, descBCMisses, descBCBytes, descFlushed, descCompact, descFlushes, descAbsorbed, descCoalesced, descFwdCalls, descVersion, descBinary, descDiskFree, descReserve, descDiskLow, descAlarm, descTentative, descTentBytes} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	ready := 0.0
	if n.readiness() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, float64(n.clusterVersion.Load()))
	ch <- prometheus.MustNewConstMetric(descBinary, prometheus.GaugeValue, float64(n.level()))
	c.collectSpace(ch)
	if n.eng != nil { // set before the HTTP server starts
		bc := n.eng.BlockCacheStats()
		ch <- prometheus.MustNewConstMetric(descBCHits, prometheus.CounterValue, float64(bc.Hits))
		ch <- prometheus.MustNewConstMetric(descBCMisses, prometheus.CounterValue, float64(bc.Misses))
		ch <- prometheus.MustNewConstMetric(descBCBytes, prometheus.GaugeValue, float64(bc.Bytes))
		ws := n.eng.WriteStats()
		ch <- prometheus.MustNewConstMetric(descFlushed, prometheus.CounterValue, float64(ws.FlushedBytes))
		ch <- prometheus.MustNewConstMetric(descCompact, prometheus.CounterValue, float64(ws.CompactedBytes))
		ch <- prometheus.MustNewConstMetric(descFlushes, prometheus.CounterValue, float64(ws.Flushes))
	}
	if n.hints != nil { // opened before the HTTP server starts
		ch <- prometheus.MustNewConstMetric(descTentative, prometheus.GaugeValue, float64(n.hints.Count()))
		ch <- prometheus.MustNewConstMetric(descTentBytes, prometheus.GaugeValue, float64(n.hints.Bytes()))
	}
	if n.kv != nil { // set before the HTTP server starts
		ch <- prometheus.MustNewConstMetric(descAbsorbed, prometheus.CounterValue, float64(n.kv.WritesAbsorbed()))
		ch <- prometheus.MustNewConstMetric(descCoalesced, prometheus.CounterValue, float64(n.kv.IncrsCoalesced()))
		framed, grpc := n.kv.ForwardedCalls()
		ch <- prometheus.MustNewConstMetric(descFwdCalls, prometheus.CounterValue, float64(framed), "tcp")
		ch <- prometheus.MustNewConstMetric(descFwdCalls, prometheus.CounterValue, float64(grpc), "grpc")
	}
	if !n.isReady() {
		return
	}
	replicas, leaders := 0, 0
	for _, info := range n.host.Infos() {
		if info.Desc == nil {
			continue
		}
		replicas++
		shard := strconv.FormatUint(uint64(info.Shard), 10)
		isLeader := 0.0
		if info.IsLeader {
			leaders++
			isLeader = 1
		}
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(info.Commit-min(info.Commit, info.Applied)), shard)
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(info.Applied), shard)
		ch <- prometheus.MustNewConstMetric(descLogKept, prometheus.GaugeValue, float64(info.Applied-min(info.Applied, info.Truncated)), shard)
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(info.Term), shard)
		ch <- prometheus.MustNewConstMetric(descIsLeader, prometheus.GaugeValue, isLeader, shard)
		ch <- prometheus.MustNewConstMetric(descRounds, prometheus.CounterValue, float64(info.ReadRounds), shard)
	}
	ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(replicas))
	ch <- prometheus.MustNewConstMetric(descLeaders, prometheus.GaugeValue, float64(leaders))
	c.collectNodes(ch)
}

// collectSpace reports the space guard's state.
func (c stateCollector) collectSpace(ch chan<- prometheus.Metric) {
	g := &c.n.space
	ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(g.free.Load()))
	ch <- prometheus.MustNewConstMetric(descReserve, prometheus.GaugeValue, float64(g.reserve.Load()))
	ch <- prometheus.MustNewConstMetric(descDiskLow, prometheus.GaugeValue, boolGauge(g.low.Load()))
	ch <- prometheus.MustNewConstMetric(descAlarm, prometheus.GaugeValue, boolGauge(g.alarm.Load()))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectNodes reports node states where the placement view is at hand.
func (c stateCollector) collectNodes(ch chan<- prometheus.Metric) {
	info, ok := c.n.host.Info(routing.MetaShard)
	if !ok || !info.IsLeader {
		ch <- prometheus.MustNewConstMetric(descPlLeader, prometheus.GaugeValue, 0)
		return
	}
	v, err := c.n.placementView()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descPlLeader, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descPlLeader, prometheus.GaugeValue, 1)
	counts := map[concordpb.NodeState]int{}
	for _, s := range scheduler.NodeStates(v) {
		counts[s]++
	}
	for s := range concordpb.NodeState_name {
		st := concordpb.NodeState(s)
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(counts[st]), nodeStateName(st))
	}
}

func nodeStateName(s concordpb.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_"))
}
