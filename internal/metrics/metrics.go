// Package metrics holds one node's Prometheus metrics: the registry that
// /metrics serves and the instruments the front doors and the raft host
// report into. Each node owns a registry of its own (tests run several nodes
// in one process), so nothing here is global.
//
// Names follow Prometheus conventions: a concord_ prefix, base units
// (seconds, bytes), _total for counters. Gauges that describe state (the
// replicas held, apply lag) are not kept up to date by the code that changes
// the state: a Collector the node registers reads them at scrape time.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Latency buckets from 100 µs to about 13 s: an fsync here takes 0.2–0.5 ms,
// a put a few ms, a read or write caught in an election seconds.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)

// Node is one node's registry and the instruments that code elsewhere
// reports into. The zero value is not usable; a nil *Node is, and reports
// nothing (unit tests of the packages that report need no registry).
type Node struct {
	reg           *prometheus.Registry
	requests      *prometheus.HistogramVec
	commits       *prometheus.HistogramVec
	readies       prometheus.Counter
	records       prometheus.Counter
	proposals     *prometheus.HistogramVec
	leaderChanges prometheus.Counter
	snapshotBytes *prometheus.CounterVec
	raftFrames    *prometheus.CounterVec
	raftMessages  *prometheus.CounterVec
	reads         *prometheus.CounterVec
}

// New returns a registry holding the Go runtime's and the process's
// collectors and Concord's instruments.
func New() *Node {
	m := &Node{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "concord_request_duration_seconds",
		Help:    "Client requests served by this node, by protocol, operation and outcome (gRPC status code name).",
		Buckets: latencyBuckets,
	}, []string{"protocol", "op", "code"})
	m.commits = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "concord_storage_commit_duration_seconds",
		Help:    "One raft loop turn's storage commit (log entries, hard state and applied state in one Pebble batch); synced=\"true\" includes the fsync.",
		Buckets: latencyBuckets,
	}, []string{"synced"})
	// Ready cycles and records per commit, against puts, give what a loop
	// turn's per-replica overhead costs (hard state, applied state).
	m.readies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "concord_raft_readies_total",
		Help: "Ready cycles (one replica's Ready persisted, applied and advanced) handled by the raft loop.",
	})
	m.records = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "concord_storage_records_total",
		Help: "Records (sets and deletes: memtable inserts) in the raft loop's storage commits.",
	})
	m.proposals = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "concord_proposal_duration_seconds",
		Help:    "Proposals from handing them to the raft host to their outcome (committed and applied, or failed), by outcome.",
		Buckets: latencyBuckets,
	}, []string{"outcome"})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "concord_leader_changes_total",
		Help: "Times a replica on this node became or stopped being its shard's leader.",
	})
	m.snapshotBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_snapshot_bytes_total",
		Help: "Bytes of replica snapshots streamed, by direction (sent, received).",
	}, []string{"direction"})
	// Frames and messages together give the messages per frame, the
	// batching the peer transport achieves (issue 14, peer traffic).
	m.raftFrames = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_raft_frames_total",
		Help: "Frames of raft messages (one RaftBatch each) exchanged with peer nodes, by direction (sent, received); snapshots not included.",
	}, []string{"direction"})
	m.raftMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_raft_messages_total",
		Help: "Raft messages carried by those frames, by direction (sent, received).",
	}, []string{"direction"})
	// Lease reads against rounds: how much ReadIndex traffic leader
	// leases save (issue 14 step 2).
	m.reads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "concord_linearizable_reads_total",
		Help: "Linearizable reads served by leaders on this node, by path: lease (by the host loop, no ReadIndex round), lease_fast (by lease, off the host loop) or round (released by a ReadIndex round).",
	}, []string{"path"})
	// Every label value a counter is documented with (docs/operations.md)
	// is there at 0 from the start: a series that appears only at its
	// first event (the first snapshot, or none on a quiet node) left
	// /metrics without it, and a rate() or an alert on it without data.
	for _, dir := range []string{"sent", "received"} {
		m.snapshotBytes.WithLabelValues(dir)
		m.raftFrames.WithLabelValues(dir)
		m.raftMessages.WithLabelValues(dir)
	}
	for _, path := range []string{"lease", "lease_fast", "round"} {
		m.reads.WithLabelValues(path)
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.commits, m.readies, m.records, m.proposals, m.leaderChanges, m.snapshotBytes, m.raftFrames, m.raftMessages, m.reads)
	return m
}

// Register adds c, a collector of state read at scrape time.
func (m *Node) Register(c prometheus.Collector) {
	if m != nil {
		m.reg.MustRegister(c)
	}
}

// Handler serves the registry in Prometheus's text format.
func (m *Node) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Request records one client request.
func (m *Node) Request(protocol, op, code string, d time.Duration) {
	if m != nil {
		m.requests.WithLabelValues(protocol, op, code).Observe(d.Seconds())
	}
}

// RequestObserver returns what Request does for protocol, op and code,
// bound to them: a caller that records many requests of one kind looks
// the series up once, not per request.
func (m *Node) RequestObserver(protocol, op, code string) func(time.Duration) {
	if m == nil {
		return func(time.Duration) {}
	}
	o := m.requests.WithLabelValues(protocol, op, code)
	return func(d time.Duration) { o.Observe(d.Seconds()) }
}

// Commit records one storage commit of the raft loop: its duration, the
// Ready cycles of its turn and the records of its batch.
func (m *Node) Commit(synced bool, d time.Duration, readies, records int) {
	if m != nil {
		m.commits.WithLabelValues(strconv.FormatBool(synced)).Observe(d.Seconds())
		m.readies.Add(float64(readies))
		m.records.Add(float64(records))
	}
}

// Proposal records one proposal's time to its outcome.
func (m *Node) Proposal(ok bool, d time.Duration) {
	if m != nil {
		outcome := "ok"
		if !ok {
			outcome = "error"
		}
		m.proposals.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

// LeaderChange records that a replica here gained or lost leadership.
func (m *Node) LeaderChange() {
	if m != nil {
		m.leaderChanges.Inc()
	}
}

// Reads records linearizable reads served by lease (by the host loop, or
// off it by the request's goroutine) and by ReadIndex round.
func (m *Node) Reads(byLease, byLeaseFast, byRound uint64) {
	if m != nil {
		m.reads.WithLabelValues("lease").Add(float64(byLease))
		m.reads.WithLabelValues("lease_fast").Add(float64(byLeaseFast))
		m.reads.WithLabelValues("round").Add(float64(byRound))
	}
}

// SnapshotBytes records n bytes of snapshot data sent (or received).
func (m *Node) SnapshotBytes(sent bool, n int) {
	if m != nil {
		dir := "received"
		if sent {
			dir = "sent"
		}
		m.snapshotBytes.WithLabelValues(dir).Add(float64(n))
	}
}

// RaftFrame records one frame of msgs raft messages sent to (or received
// from) a peer node.
func (m *Node) RaftFrame(sent bool, msgs int) {
	if m != nil {
		dir := "received"
		if sent {
			dir = "sent"
		}
		m.raftFrames.WithLabelValues(dir).Inc()
		m.raftMessages.WithLabelValues(dir).Add(float64(msgs))
	}
}
