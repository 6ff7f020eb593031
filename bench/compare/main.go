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
	quick               bool
	// rounds repeats the whole run, the systems in the given order in odd
	// rounds and reversed in even ones (-rounds).
	rounds int
	// only, when set, holds the ids of the workloads to run (-workloads).
	only map[string]bool
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
	{id: "put-c1", name: "put, 1 client", args: []string{"--workload", "put", "--clients", "1", "--conns", "1"}, kind: "put", clients: 1, conns: 1},
	{id: "put-c100", name: "put, 100 clients", args: []string{"--workload", "put", "--clients", "100", "--conns", "10"}, kind: "put", clients: 100, conns: 10},
	{id: "put-c1000", name: "put, 1000 clients", args: []string{"--workload", "put", "--clients", "1000", "--conns", "100"}, big: true},
	{id: "get-c1", name: "get, 1 client", args: []string{"--workload", "get", "--clients", "1", "--conns", "1"}, kind: "get", clients: 1, conns: 1},
	{id: "get-c100", name: "get, 100 clients", args: []string{"--workload", "get", "--clients", "100", "--conns", "10"}, kind: "get", clients: 100, conns: 10},
	{id: "ycsb-a", name: "YCSB A, 100 clients", args: []string{"--workload", "a", "--clients", "100", "--conns", "10"}},
	{id: "ycsb-c", name: "YCSB C, 100 clients", args: []string{"--workload", "c", "--clients", "100", "--conns", "10"}, big: true},
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
	Round     int     `json:"round,omitempty"` // with -rounds > 1
}

// current is the running system, stopped on Ctrl-C.
var (
	mu      sync.Mutex
	current *systems.System
)

func setCurrent(s *systems.System) { mu.Lock(); current = s; mu.Unlock() }

func main() {
	var o options
	var systemList, workloadList string
	flag.StringVar(&o.concord, "concord", "bin/concord", "the concord binary (load generator and server)")
	flag.StringVar(&o.peers, "peers", ".cache/peers/bin", "where bench/peers.sh put etcd, benchmark and redis")
	flag.StringVar(&o.out, "out", "bench-out/compare", "directory for logs, per-run JSON and the table")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "measured time of each run")
	flag.IntVar(&o.keys, "keys", 10000, "key space of every workload")
	flag.StringVar(&systemList, "systems", "etcd,redis-everysec,redis-always,concord", "systems to run, in order")
	flag.BoolVar(&o.quick, "quick", false, "a smoke run: 2 s runs, no 1000-client or YCSB C rows")
	flag.StringVar(&workloadList, "workloads", "", "workloads to run, by id (put-c1,put-c100,put-c1000,get-c1,get-c100,ycsb-a,ycsb-c); empty runs all, in that order")
	flag.IntVar(&o.rounds, "rounds", 1, "repeat the run, alternating the systems' order, and add a table of each row's medians (ratios: the median of each round's)")
	flag.Parse()
	if o.rounds < 1 {
		fatal(fmt.Errorf("-rounds must be at least 1, got %d", o.rounds))
	}
	o.systems = strings.Split(systemList, ",")
	only, err := parseWorkloads(workloadList)
	if err != nil {
		fatal(err)
	}
	o.only = only
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
	var table string
	for round := 1; round <= o.rounds; round++ {
		rs := runRound(o, round)
		rows = append(rows, rs...)
		t := formatTable(rs, o, time.Since(start))
		if o.rounds > 1 {
			t = fmt.Sprintf("\n### Round %d of %d (systems: %s)\n", round, o.rounds, strings.Join(roundOrder(o.systems, round), ", ")) + t
		}
		fmt.Print(t)
		table += t
	}
	if o.rounds > 1 {
		s := formatMedians(rows, o.rounds)
		fmt.Print(s)
		table = s + table
	}
	if err := os.WriteFile(filepath.Join(o.out, "compare.md"), []byte(table), 0o644); err != nil {
		fatal(err)
	}
	js, _ := json.MarshalIndent(rows, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, "compare.json"), js, 0o644); err != nil {
		fatal(err)
	}
}

// runRound runs every system once, in the round's order (roundOrder), and
// returns their rows in the systems' given order, marked with the round
// when there are several (their files then go to round-N under -out).
func runRound(o options, round int) []row {
	ro := o
	if o.rounds > 1 {
		ro.out = filepath.Join(o.out, fmt.Sprintf("round-%d", round))
		if err := os.MkdirAll(ro.out, 0o755); err != nil {
			fatal(err)
		}
	}
	var rows []row
	for _, name := range roundOrder(o.systems, round) {
		got, err := runSystem(ro, name)
		rows = append(rows, got...)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
	}
	if o.rounds > 1 {
		for i := range rows {
			rows[i].Round = round
		}
	}
	return inSystemOrder(rows, o.systems)
}

// parseWorkloads reads -workloads: a comma-separated list of workload ids.
// An unknown id is an error, so that a typo does not silently run nothing.
func parseWorkloads(list string) (map[string]bool, error) {
	if list == "" {
		return nil, nil
	}
	known := map[string]bool{}
	var all []string
	for _, w := range workloads {
		known[w.id] = true
		all = append(all, w.id)
	}
	only := map[string]bool{}
	for _, id := range strings.Split(list, ",") {
		if !known[id] {
			return nil, fmt.Errorf("unknown workload %q (want some of %s)", id, strings.Join(all, ","))
		}
		only[id] = true
	}
	return only, nil
}

// runs reports whether w is part of this run. The order stays the table's:
// puts run before gets, so gets read a store the puts filled.
func (o options) runs(w workload) bool {
	if o.only != nil {
		return o.only[w.id]
	}
	return !(w.big && o.quick)
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
