// Command placement measures the placement service (issue 11, "Measure")
// on local clusters of real `concord server` processes, started by
// internal/localcluster on free ports of 127.0.0.1 with their data in
// temporary dirs:
//
//   - balance: the time from a node's start (`server --join`) or from
//     `concord node remove ID` until the cluster is balanced again, with
//     -keys keys of -value-size bytes preloaded, from each of -sizes nodes
//     to one more and back;
//   - keys: keys held (counting replicas) and led per node at the last
//     size, from per-shard key counts;
//   - rebuild: the time to rebuild a node that lost its disk (kill -9,
//     delete its data dir, start it again: it joins under a new id and the
//     scheduler replaces its old replicas) holding -rebuild-bytes of data,
//     at each of -rebuild-sizes value sizes;
//   - ycsb: YCSB A throughput while a node joins (and while one is
//     removed) until balanced, next to the same workload with no move.
//
// Load comes from internal/bench, the engine of `concord bench`, run in
// this process so that a run can be ended the moment a move completes.
// It prints a markdown report (also written to -out) headed by the
// command, date, commit and machine load. Every process it started is
// stopped by PID at the end, on error and on Ctrl-C, and the data dirs
// removed; the nodes' logs stay in -logs.
//
//	go run ./bench/placement -out bench-out/placement.md        # make bench-placement
//	go run ./bench/placement -quick -out bench-out/placement-quick.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// params sizes the measurements.
type params struct {
	keys, valueSize int
	sizes           []int
	replicas        int
	metaReplicas    int
	maxValueBytes   int
	poll            time.Duration
	balanceTimeout  time.Duration
	leaderWait      time.Duration // after replica balance, for leader balance
	rebuildBytes    int
	rebuildSizes    []int
	rebuildTimeout  time.Duration
	ycsbDuration    time.Duration
	leadIn          time.Duration // load before a move starts
	idleMoves       bool          // also time each move with no load
	clients         int
	preloadClients  int
}

func fullParams() params {
	return params{keys: 100_000, valueSize: 1024, sizes: []int{3, 5, 7}, replicas: 3, metaReplicas: 5,
		maxValueBytes: 2 << 20, poll: 150 * time.Millisecond, balanceTimeout: 3 * time.Minute, leaderWait: time.Minute,
		rebuildBytes: 100 << 20, rebuildSizes: []int{5 << 10, 50 << 10, 500 << 10, 1536 << 10},
		rebuildTimeout: 5 * time.Minute, ycsbDuration: 10 * time.Second, leadIn: 2 * time.Second,
		clients: 16, preloadClients: 64, idleMoves: true}
}

// quickParams is a smoke run of about two minutes: a join takes over a
// minute whatever the data (see docs/benchmarks.md), so it times the moves
// under load only.
func quickParams() params {
	p := fullParams()
	p.idleMoves = false
	p.keys, p.sizes = 5000, []int{3}
	p.rebuildBytes, p.rebuildSizes = 10<<20, []int{50 << 10}
	p.ycsbDuration, p.leadIn = 3*time.Second, time.Second
	return p
}

var phaseIDs = []string{"balance", "rebuild"}

type driver struct {
	p      params
	bin    string
	logDir string
	start  time.Time
	rep    report
}

func main() { os.Exit(run()) }

func run() int {
	var (
		out, bin, logDir, only, sizes, rebuildSizes string
		quick                                       bool
		keys, valueSize, rebuildMiB                 int
		ycsb, poll, leaderWait                      time.Duration
	)
	flag.StringVar(&out, "out", "bench-out/placement.md", "also write the markdown report here")
	flag.StringVar(&bin, "bin", "bin/concord", "the concord binary the nodes run")
	flag.StringVar(&logDir, "logs", "bench-out/placement-logs", "directory for the nodes' logs (CLUSTER/nodeN.log)")
	flag.StringVar(&only, "only", "", "comma-separated phases to run (default all): "+strings.Join(phaseIDs, ","))
	flag.BoolVar(&quick, "quick", false, "smoke run: 5,000 keys, 3 nodes, moves under load only, one 10 MiB rebuild (about two minutes)")
	flag.IntVar(&keys, "keys", 0, "keys preloaded for the balance and keys-per-node measurements (default 100000; quick 5000)")
	flag.IntVar(&valueSize, "value-size", 0, "their value size in bytes (default 1024)")
	flag.StringVar(&sizes, "sizes", "", "cluster sizes N measured N→N+1→N, comma-separated, ascending (default 3,5,7; quick 3)")
	flag.IntVar(&rebuildMiB, "rebuild-mib", 0, "data on the node that loses its disk, MiB (default 100; quick 10)")
	flag.StringVar(&rebuildSizes, "rebuild-sizes", "", "value sizes of the rebuild runs, bytes, comma-separated (default 5120,51200,512000,1572864)")
	flag.DurationVar(&ycsb, "ycsb", 0, "duration of the YCSB A run with no move (default 10s; quick 3s)")
	flag.DurationVar(&poll, "poll", 0, "status poll interval (default 150ms)")
	flag.DurationVar(&leaderWait, "leader-wait", 0, "how long to wait for leader balance once replicas are balanced (default 1m)")
	flag.Parse()

	d := &driver{bin: bin, logDir: logDir, start: time.Now()}
	d.p = fullParams()
	if quick {
		d.p = quickParams()
	}
	d.p.leaderWait = cmpOr(leaderWait, d.p.leaderWait)
	if err := d.p.apply(keys, valueSize, rebuildMiB, sizes, rebuildSizes, ycsb, poll); err != nil {
		fmt.Fprintln(os.Stderr, "placement:", err)
		return 2
	}
	phases, err := parseOnly(only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "placement:", err)
		return 2
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "placement: %v (run `make build` first)\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer stopAll() // every node, by PID, also after an error or Ctrl-C

	d.rep.header = d.header(os.Args, "start")
	err = d.runPhases(ctx, phases)
	d.rep.footer = "uptime at the end: " + uptime()
	if err != nil {
		d.rep.errors = append(d.rep.errors, err.Error())
	}
	md := d.rep.markdown(d.p)
	fmt.Print(md)
	if out != "" {
		if werr := writeFile(out, md); werr != nil {
			fmt.Fprintln(os.Stderr, "placement:", werr)
			return 1
		}
		d.logf("report written to %s", out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "placement:", err)
		return 1
	}
	return 0
}

func (d *driver) runPhases(ctx context.Context, phases map[string]bool) error {
	var errs []error
	if phases["balance"] {
		if err := d.balancePhase(ctx); err != nil {
			errs = append(errs, fmt.Errorf("balance: %w", err))
		}
	}
	if phases["rebuild"] && ctx.Err() == nil {
		if err := d.rebuildPhase(ctx); err != nil {
			errs = append(errs, fmt.Errorf("rebuild: %w", err))
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("interrupted: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// apply overrides the defaults with the flags that were given (non-zero).
func (p *params) apply(keys, valueSize, rebuildMiB int, sizes, rebuildSizes string, ycsb, poll time.Duration) error {
	if keys < 0 || valueSize < 0 || rebuildMiB < 0 || ycsb < 0 || poll < 0 {
		return errors.New("sizes and durations must not be negative")
	}
	p.keys = cmpOr(keys, p.keys)
	p.valueSize = cmpOr(valueSize, p.valueSize)
	if rebuildMiB > 0 {
		p.rebuildBytes = rebuildMiB << 20
	}
	p.ycsbDuration = cmpOr(ycsb, p.ycsbDuration)
	p.poll = cmpOr(poll, p.poll)
	var err error
	if sizes != "" {
		if p.sizes, err = parseInts(sizes, 1); err != nil {
			return fmt.Errorf("-sizes: %w", err)
		}
		if !slices.IsSorted(p.sizes) || p.sizes[0] < p.replicas {
			return fmt.Errorf("-sizes must ascend from at least %d (the replicas per shard)", p.replicas)
		}
	}
	if rebuildSizes != "" {
		if p.rebuildSizes, err = parseInts(rebuildSizes, 1); err != nil {
			return fmt.Errorf("-rebuild-sizes: %w", err)
		}
	}
	for _, s := range append([]int{p.valueSize}, p.rebuildSizes...) {
		if s > p.maxValueBytes {
			p.maxValueBytes = s + 4096 // the server's limit must admit the largest value
		}
	}
	return nil
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// parseInts parses a comma-separated list of integers of at least lo.
func parseInts(s string, lo int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < lo {
			return nil, fmt.Errorf("%d is below %d", n, lo)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseOnly(only string) (map[string]bool, error) {
	m := map[string]bool{}
	if only == "" {
		for _, id := range phaseIDs {
			m[id] = true
		}
		return m, nil
	}
	for f := range strings.SplitSeq(only, ",") {
		if !slices.Contains(phaseIDs, f) {
			return nil, fmt.Errorf("-only: unknown phase %q (have %s)", f, strings.Join(phaseIDs, ","))
		}
		m[f] = true
	}
	return m, nil
}

func (d *driver) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// header records how and where the run was made.
func (d *driver) header(args []string, when string) []string {
	return []string{
		"command: `" + strings.Join(args, " ") + "`",
		"date: " + d.start.UTC().Format(time.RFC3339),
		"commit: " + commit(),
		fmt.Sprintf("machine: %d CPUs (%s), shared with other work; uptime at the %s: %s", runtime.NumCPU(), cpuModel(), when, uptime()),
	}
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func writeFile(path, s string) error {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		if err := os.MkdirAll(path[:i], 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
