// Command compare runs the same workloads against etcd, Redis and Concord
// on this machine, one system at a time, and prints one table: the
// numbers `make bench-compare` reports. Every workload goes through
// `concord bench --target …`, so the load is identical key for key; the
// put and get rows are cross-checked with each peer's own tool (etcd's
// `benchmark`, `redis-benchmark`). Peers are installed by bench/peers.sh.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/concord-kv/concord/bench/internal/systems"
)

type options struct {
	concord, peers, out string
	duration            time.Duration
	keys                int
	systems             []string
	workloads           map[string]bool // by id; nil: all
	quick               bool
}

// A workload is one `concord bench` invocation, named for the table.
type workload struct {
	id   string // for -workloads
	name string
	args []string
	big  bool   // left out with -quick
	kind string // "put" or "get" for cross-checked rows, else ""
	// clients/conns for the cross-check with the peer's own tool.
	clients, conns int
}

var workloads = []workload{
	{id: "put1", name: "put, 1 client", args: []string{"--workload", "put", "--clients", "1", "--conns", "1"}, kind: "put", clients: 1, conns: 1},
	{id: "put100", name: "put, 100 clients", args: []string{"--workload", "put", "--clients", "100", "--conns", "10"}, kind: "put", clients: 100, conns: 10},
	{id: "put1000", name: "put, 1000 clients", args: []string{"--workload", "put", "--clients", "1000", "--conns", "100"}, big: true},
	{id: "get1", name: "get, 1 client", args: []string{"--workload", "get", "--clients", "1", "--conns", "1"}, kind: "get", clients: 1, conns: 1},
	{id: "get100", name: "get, 100 clients", args: []string{"--workload", "get", "--clients", "100", "--conns", "10"}, kind: "get", clients: 100, conns: 10},
	{id: "ycsba", name: "YCSB A, 100 clients", args: []string{"--workload", "a", "--clients", "100", "--conns", "10"}},
	{id: "ycsbc", name: "YCSB C, 100 clients", args: []string{"--workload", "c", "--clients", "100", "--conns", "10"}, big: true},
}

// row is one line of the table.
type row struct {
	System    string  `json:"system"`
	Workload  string  `json:"workload"`
	Tool      string  `json:"tool"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Errors    int64   `json:"errors"`
	BoxCPU    float64 `json:"box_cpu_pct"` // whole machine, % of one core
	// The servers' processes' CPU (from /proc/PID/stat) and the load
	// generator's, in CPU milliseconds per 1,000 operations.
	ServerCPU float64 `json:"server_cpu_ms_per_kop"`
	LoadCPU   float64 `json:"loadgen_cpu_ms_per_kop"`
	Note      string  `json:"note,omitempty"`
}

// current is the running system, stopped on Ctrl-C.
var (
	mu      sync.Mutex
	current *systems.System
)

func setCurrent(s *systems.System) { mu.Lock(); current = s; mu.Unlock() }

func main() {
	var o options
	var systemList string
	flag.StringVar(&o.concord, "concord", "bin/concord", "the concord binary (load generator and server)")
	flag.StringVar(&o.peers, "peers", ".cache/peers/bin", "where bench/peers.sh put etcd, benchmark and redis")
	flag.StringVar(&o.out, "out", "bench-out/compare", "directory for logs, per-run JSON and the table")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "measured time of each run")
	flag.IntVar(&o.keys, "keys", 10000, "key space of every workload")
	flag.StringVar(&systemList, "systems", "etcd,redis-everysec,redis-always,concord", "systems to run, in order")
	flag.BoolVar(&o.quick, "quick", false, "a smoke run: 2 s runs, no 1000-client or YCSB C rows")
	workloadList := flag.String("workloads", "", "workloads to run, by id (put1,put100,put1000,get1,get100,ycsba,ycsbc); default: all")
	flag.Parse()
	o.systems = strings.Split(systemList, ",")
	if *workloadList != "" {
		var err error
		if o.workloads, err = parseWorkloads(*workloadList); err != nil {
			fatal(err)
		}
	}
	if o.quick {
		o.duration = 2 * time.Second
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		mu.Lock()
		if current != nil {
			current.Stop()
		}
		os.Exit(130)
	}()
	start := time.Now()
	var rows []row
	for _, name := range o.systems {
		rs, err := runSystem(o, name)
		rows = append(rows, rs...)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
	}
	table := formatTable(rows, o, time.Since(start))
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(o.out, "compare.md"), []byte(table), 0o644); err != nil {
		fatal(err)
	}
	js, _ := json.MarshalIndent(rows, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, "compare.json"), js, 0o644); err != nil {
		fatal(err)
	}
}

// parseWorkloads reads -workloads: ids of the workloads table, comma-separated.
func parseWorkloads(list string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, w := range workloads {
		known[w.id] = true
	}
	set := map[string]bool{}
	for _, id := range strings.Split(list, ",") {
		if !known[id] {
			return nil, fmt.Errorf("-workloads: unknown workload %q", id)
		}
		set[id] = true
	}
	return set, nil
}

// runs says whether w is part of this run (-quick, -workloads).
func (o options) runs(w workload) bool {
	if w.big && o.quick {
		return false
	}
	return o.workloads == nil || o.workloads[w.id]
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench-compare:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// runSystem starts one system, runs every workload and its cross-checks,
// and stops it.
func runSystem(o options, name string) ([]row, error) {
	logf("starting %s", name)
	s, err := systems.Start(name, o.concord, o.peers, o.out)
	if err != nil {
		return nil, err
	}
	setCurrent(s)
	defer func() { s.Stop(); setCurrent(nil) }()

	if err := preload(o, s); err != nil {
		return nil, err
	}
	var rows []row
	rates := map[string]float64{}
	for _, w := range workloads {
		if !o.runs(w) {
			continue
		}
		r, err := runBench(o, s, w)
		if err != nil {
			return rows, err
		}
		logf("%s %s: %.0f ops/s p50 %.2f p99 %.2f ms", s.Name, w.name, r.OpsPerSec, r.P50, r.P99)
		rows = append(rows, r)
		rates[w.name] = r.OpsPerSec
	}
	cross, err := crossCheck(o, s, rates)
	return append(rows, cross...), err
}
