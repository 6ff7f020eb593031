// Command redisbench is `make bench-redis`: redis-benchmark against a
// 3-node Concord cluster's Redis port and, in the same run, against
// redis-server with the append-only file fsynced every second and on every
// write, one system at a time, each test in its own redis-benchmark
// invocation so that the servers' CPU per operation can be read around it
// (/proc/PID/stat). Prints one markdown table and writes it to
// <out>/table.md; the raw CSV of every invocation and the servers' logs
// stay in <out>. Peers (redis-server, redis-benchmark) come from
// bench/peers.sh.
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
	n, c, d, r          int
	warmup, bothPaths   bool
	tests, systems      []string
	pipelines           []int
}

// result is one redis-benchmark invocation: one system, one test, one -P.
type result struct {
	System    string  `json:"system"`
	Test      string  `json:"test"`
	Pipeline  int     `json:"pipeline"`
	Requests  int     `json:"requests"`
	RPS       float64 `json:"requests_per_sec"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	ServerCPU float64 `json:"server_cpu_us_per_request"`
	Errors    string  `json:"errors,omitempty"` // what redis-benchmark -e printed, if anything
	// Via: for Concord's one-key rows, whether node 1 led the key's shard
	// after the row ("leader") or forwarded to another node ("forwarded").
	Via string `json:"via,omitempty"`
}

// current is the running system, stopped on Ctrl-C.
var (
	mu      sync.Mutex
	current *systems.System
)

func setCurrent(s *systems.System) { mu.Lock(); current = s; mu.Unlock() }

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-redis:", err)
		os.Exit(2)
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
	run := runInfo{start: time.Now(), loadBefore: loadAvg()}
	var results []result
	for _, name := range o.systems {
		rs, err := runSystem(o, name)
		results = append(results, rs...)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
	}
	run.took, run.loadAfter = time.Since(run.start), loadAvg()
	table := formatTable(results, o, run)
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(o.out, "table.md"), []byte(table), 0o644); err != nil {
		fatal(err)
	}
	js, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, "results.json"), js, 0o644); err != nil {
		fatal(err)
	}
}

func parseFlags() (options, error) {
	var o options
	var tests, systemList, pipelines string
	flag.StringVar(&o.concord, "concord", "bin/concord", "the concord binary")
	flag.StringVar(&o.peers, "peers", ".cache/peers/bin", "where bench/peers.sh put redis-server and redis-benchmark")
	flag.StringVar(&o.out, "out", "bench-out/redis", "directory for logs, raw CSV and the table")
	flag.IntVar(&o.n, "n", 200000, "redis-benchmark -n: requests per test")
	flag.IntVar(&o.c, "c", 50, "redis-benchmark -c: connections")
	flag.IntVar(&o.d, "d", 256, "redis-benchmark -d: value size in bytes")
	flag.IntVar(&o.r, "r", 0, "redis-benchmark -r: random keys among this many (0: one key per test, as redis-benchmark's default)")
	flag.BoolVar(&o.warmup, "warmup", true, "before a system's measured rows, wait for Concord's start-up leader balancing and run every test once at the largest -P, unmeasured")
	flag.BoolVar(&o.bothPaths, "both-paths", true, "run Concord's one-key tests (no -r) twice: through the key's leader and through a node that forwards to it")
	flag.StringVar(&tests, "tests", "set,get,incr,mset", "redis-benchmark tests, each run on its own")
	flag.StringVar(&pipelines, "pipelines", "1,16", "redis-benchmark -P values")
	flag.StringVar(&systemList, "systems", "concord,redis-everysec,redis-always", "systems to run, in order")
	flag.Parse()
	if flag.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if o.n <= 0 || o.c <= 0 || o.d <= 0 || o.r < 0 {
		return o, fmt.Errorf("-n, -c and -d must be positive and -r not negative")
	}
	o.tests = splitList(tests)
	o.systems = splitList(systemList)
	for _, s := range o.systems {
		if s != "concord" && s != "redis-everysec" && s != "redis-always" {
			return o, fmt.Errorf("unknown system %q (want concord, redis-everysec or redis-always)", s)
		}
	}
	for _, p := range splitList(pipelines) {
		var v int
		if _, err := fmt.Sscan(p, &v); err != nil || v <= 0 {
			return o, fmt.Errorf("bad -P value %q", p)
		}
		o.pipelines = append(o.pipelines, v)
	}
	if len(o.tests) == 0 || len(o.systems) == 0 || len(o.pipelines) == 0 {
		return o, fmt.Errorf("no tests, systems or -P values to run")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench-redis:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// runSystem starts one system, runs every -P and test against it, and
// stops it.
func runSystem(o options, name string) ([]result, error) {
	logf("starting %s", name)
	s, err := systems.Start(name, o.concord, o.peers, o.out)
	if err != nil {
		return nil, err
	}
	setCurrent(s)
	defer func() { s.Stop(); setCurrent(nil) }()
	if o.warmup {
		if err := warmUp(o, s); err != nil {
			return nil, err
		}
	}
	var out []result
	for _, p := range o.pipelines {
		for _, t := range o.tests {
			both := o.bothPaths && s.Target == "concord" && o.r == 0
			ps := []path{{redisAddr: s.RedisAddrs[0]}}
			if both {
				if got := paths(o, s, t); got != nil {
					ps = got
				}
			}
			for _, pa := range ps {
				r, err := runTest(o, s, pa.redisAddr, pa.via, t, p)
				if err != nil {
					return out, err
				}
				if pa.via == "" {
					r.Via = viaOf(o, s, t)
				} else {
					r.Via = confirmPath(o, s, t, pa)
				}
				logf("%s %s -P %d: %.0f requests/s, p50 %.3f ms, server CPU %.1f µs/request%s%s",
					s.Name, r.Test, p, r.RPS, r.P50, r.ServerCPU, errNote(r.Errors), viaNote(r.Via))
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func errNote(e string) string {
	if e == "" {
		return ""
	}
	return " (errors: " + e + ")"
}
