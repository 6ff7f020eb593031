// Command seeds reproduces on Concord the experiments of the five earlier
// designs in shared/seeds (RecoverKV figures 2, 4 and 5, GTStore figure 3,
// the CS739 project 1 table and the ECE419 servers x clients grid). Every
// measurement is one `concord bench` run against a real cluster of
// `concord server` processes, started by internal/localcluster (the
// launcher behind `concord cluster up`) on free ports and a temporary data
// dir; the driver stops every process it started, also on Ctrl-C or error.
//
// It writes into -out: runs/NAME.json (the bench result with the command,
// cluster and CPU use), img/seeds/*.svg (hand-written SVG plots),
// logs/cluster-NAME/nodeN.log (each node's output) and seeds.md (tables
// and plot links); with -docs DIR it copies seeds.md and the plots to
// DIR/seeds.md and DIR/img/seeds/.
//
//	go run ./bench/seeds -out bench-out/seeds -docs docs       # `make bench-seeds`, about 9 min
//	go run ./bench/seeds -out bench-out/seeds-quick -quick    # `make bench-seeds QUICK=1`, about 2 min
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// params sizes the experiments; quickParams is the smoke-test version.
type params struct {
	point       time.Duration // measured time of one point
	failDur     time.Duration // RecoverKV fig. 4 run length
	killAt      time.Duration // ... and when a node is killed
	fig2Keys    []int
	fig2Clients int
	fig4Clients int
	fig5Clients []int
	gtNodes     int
	gtReplicas  []int
	gtClients   []int
	eceServers  []int
	eceClients  []int
	keys        int // preloaded key space of fig. 4, fig. 5, GTStore, CS739, ECE419
	cs739Ops    int
	preloadConc int // goroutines that preload keys
}

func fullParams() params {
	return params{point: 5 * time.Second, failDur: 20 * time.Second, killAt: 8 * time.Second,
		fig2Keys: []int{1000, 10000, 100000}, fig2Clients: 1, fig4Clients: 16,
		fig5Clients: []int{1, 2, 4, 8, 16, 32, 64},
		gtNodes:     7, gtReplicas: []int{1, 3, 5}, gtClients: []int{1, 16},
		eceServers: []int{1, 2, 3, 4, 5}, eceClients: []int{1, 5, 10, 20},
		keys: 10000, cs739Ops: 1000, preloadConc: 64}
}

func quickParams() params {
	return params{point: 1 * time.Second, failDur: 6 * time.Second, killAt: 2500 * time.Millisecond,
		fig2Keys: []int{1000, 3000}, fig2Clients: 1, fig4Clients: 16,
		fig5Clients: []int{1, 4, 16},
		gtNodes:     7, gtReplicas: []int{1, 3}, gtClients: []int{1},
		eceServers: []int{1, 3}, eceClients: []int{1, 5},
		keys: 2000, cs739Ops: 200, preloadConc: 64}
}

var experimentIDs = []string{"fig2", "fig4", "fig5", "gtstore", "cs739", "ece419"}

type driver struct {
	p        params
	bin      string
	out      string
	quick    bool
	only     map[string]bool
	start    time.Time
	runs     []*runRecord
	byName   map[string]*runRecord
	failures []string
	kills    map[string]float64 // fig. 4 op -> kill time on the failure run's timeline
	machine  string
	commit   string
}

// Results as written by `concord bench -o json` (the fields used here).
type latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

type cdfPoint struct {
	Pct float64 `json:"pct"`
	Ms  float64 `json:"ms"`
}

type sample struct {
	T         float64 `json:"t_sec"`
	OpsPerSec float64 `json:"ops_per_sec"`
	Errors    int64   `json:"errors"`
}

type opStats struct {
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	NotFound   int64   `json:"not_found"`
	Throughput float64 `json:"throughput_ops_per_sec"`
	Latency    latency `json:"latency_ms"`
}

type benchResult struct {
	DurationSec  float64            `json:"duration_sec"`
	Ops          int64              `json:"ops"`
	Errors       int64              `json:"errors"`
	ErrorsByKind map[string]int64   `json:"errors_by_kind"`
	Throughput   float64            `json:"throughput_ops_per_sec"`
	Latency      latency            `json:"latency_ms"`
	CDF          []cdfPoint         `json:"latency_cdf"`
	ByOp         map[string]opStats `json:"by_op"`
	Timeline     []sample           `json:"timeline"`
}

func (r *benchResult) notFound() int64 {
	var n int64
	for _, s := range r.ByOp {
		n += s.NotFound
	}
	return n
}

type clusterInfo struct {
	Name      string   `json:"name"`
	Nodes     int      `json:"nodes"`
	Replicas  int      `json:"replicas"`
	Shards    int      `json:"shards"`
	Endpoints []string `json:"endpoints"`
}

// cpuUse is in percent of one core over the run's wall time; the machine
// has runtime.NumCPU()*100 %. Other = the whole machine minus the servers
// and the load generator.
type cpuUse struct {
	Box     float64 `json:"box"`
	Servers float64 `json:"servers"`
	Bench   float64 `json:"bench"`
	Other   float64 `json:"other"`
}

type killInfo struct {
	Node  string  `json:"node"`
	AtSec float64 `json:"at_sec"` // on the run's timeline (measurement start = 0), estimated
	Error string  `json:"error,omitempty"`
}

// runRecord is one `concord bench` invocation; written as runs/NAME.json.
type runRecord struct {
	Name       string          `json:"name"`
	Experiment string          `json:"experiment"`
	PreloadRun bool            `json:"preload_run,omitempty"`
	Command    []string        `json:"command"`
	Cluster    clusterInfo     `json:"cluster"`
	Started    time.Time       `json:"started"`
	WallSec    float64         `json:"wall_sec"`
	Load1      float64         `json:"load1_at_start"`
	CPU        *cpuUse         `json:"cpu_pct_of_one_core,omitempty"`
	Kill       *killInfo       `json:"kill,omitempty"`
	Error      string          `json:"error,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	res        *benchResult
}

func main() {
	os.Exit(run())
}

func run() int {
	var (
		out, docs, bin, only string
		quick                bool
	)
	flag.StringVar(&out, "out", "bench-out/seeds", "directory for seeds.md, img/seeds/*.svg, runs/*.json and logs/")
	flag.StringVar(&docs, "docs", "", "also copy seeds.md and the plots to DIR/seeds.md and DIR/img/seeds/ (not done when interrupted)")
	flag.StringVar(&bin, "bin", "bin/concord", "the concord binary (cluster, load generator, fault injection)")
	flag.StringVar(&only, "only", "", "comma-separated experiments to run (default all): "+strings.Join(experimentIDs, ","))
	flag.BoolVar(&quick, "quick", false, "smoke run: 1 s points, fewer points (about 2 minutes)")
	flag.Parse()

	d := &driver{bin: bin, out: out, quick: quick, start: time.Now(), byName: map[string]*runRecord{},
		kills: map[string]float64{}, only: map[string]bool{}}
	d.p = fullParams()
	if quick {
		d.p = quickParams()
	}
	for _, id := range strings.Split(only, ",") {
		if id = strings.TrimSpace(id); id != "" {
			if !contains(experimentIDs, id) {
				fmt.Fprintf(os.Stderr, "seeds: unknown experiment %q (have %s)\n", id, strings.Join(experimentIDs, ","))
				return 2
			}
			d.only[id] = true
		}
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "seeds: %v (run `make build` first)\n", err)
		return 2
	}
	if abs, err := filepath.Abs(bin); err == nil {
		d.bin = abs
	}
	for _, sub := range []string{"runs", "logs", filepath.Join("img", "seeds")} {
		if err := os.MkdirAll(filepath.Join(out, sub), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "seeds:", err)
			return 1
		}
	}
	// Nothing from an earlier run may pass for this one's.
	for _, pat := range []string{filepath.Join(out, "runs", "*.json"), filepath.Join(out, "img", "seeds", "*.svg")} {
		old, _ := filepath.Glob(pat)
		for _, f := range old {
			_ = os.Remove(f)
		}
	}
	d.machine, d.commit = machineInfo()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Last resort: whatever happens below, no cluster outlives the driver.
	defer stopAllClusters()

	d.logf("seeds: %s mode, output in %s; %s", map[bool]string{true: "quick", false: "full"}[quick], out, d.machine)
	exps := map[string]func(context.Context) error{
		"fig2": d.fig2, "fig4": d.fig4, "fig5": d.fig5, "gtstore": d.gtstore, "cs739": d.cs739, "ece419": d.ece419,
	}
	var ran []string
	for _, id := range experimentIDs {
		if len(d.only) > 0 && !d.only[id] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		d.logf("== %s", id)
		if err := exps[id](ctx); err != nil && ctx.Err() == nil {
			d.fail("%s: %v", id, err)
		}
		ran = append(ran, id)
		d.logf("== %s done in %s", id, time.Since(t0).Round(time.Second))
	}
	stopAllClusters()
	interrupted := ctx.Err() != nil

	md := d.report(ran, interrupted)
	mdPath := filepath.Join(out, "seeds.md")
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		d.fail("write %s: %v", mdPath, err)
	}
	if docs != "" && !interrupted {
		if err := copyToDocs(out, docs); err != nil {
			d.fail("copy to %s: %v", docs, err)
		} else {
			d.logf("copied seeds.md and the plots to %s", docs)
		}
	}
	d.logf("seeds: wrote %s (%d runs) in %s", mdPath, len(d.runs), time.Since(d.start).Round(time.Second))
	if interrupted {
		d.logf("seeds: interrupted; every cluster started was stopped")
		return 130
	}
	if len(d.failures) > 0 {
		d.logf("seeds: %d failure(s):", len(d.failures))
		for _, f := range d.failures {
			fmt.Println("  " + f)
		}
		return 1
	}
	return 0
}

func (d *driver) logf(format string, a ...any) {
	el := time.Since(d.start).Round(time.Second)
	fmt.Printf("[%s +%s] %s\n", time.Now().Format("15:04:05"), el, fmt.Sprintf(format, a...))
}

func (d *driver) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	d.failures = append(d.failures, msg)
	d.logf("FAILED: %s", msg)
}

// connsFor gives every client its own connection set, as each client of
// the earlier designs was its own process.
func connsFor(clients int) int { return max(1, clients) }

func dur(t time.Duration) string { return t.String() }

// runOpts: kill, when not empty, is the address of a node to kill killAt
// after the run starts; preload marks a run that only fills the key space.
type runOpts struct {
	kill    string
	killAt  time.Duration
	preload bool
}

// bench runs one `concord bench` against c and records it.
func (d *driver) bench(ctx context.Context, c *cluster, exp, name string, args []string, o runOpts) *runRecord {
	kill, killAt := o.kill, o.killAt
	full := append([]string{"bench", "--endpoints", c.endpoints(), "-o", "json", "--key-size", "16", "--value-size", "256"}, args...)
	rec := &runRecord{Name: name, Experiment: exp, Command: append([]string{"concord"}, full...),
		Cluster: clusterInfo{Name: c.name, Nodes: c.nodes, Replicas: c.replicas, Shards: c.shards, Endpoints: c.addrs},
		Started: time.Now(), Load1: load1(), PreloadRun: o.preload}
	d.runs = append(d.runs, rec)
	d.byName[name] = rec
	if err := ctx.Err(); err != nil {
		rec.Error = err.Error()
		return rec
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, d.bin, full...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	busy0, total0, cpuOK := cpuTicks()
	srv0 := c.serverTicks()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		rec.Error = err.Error()
		d.fail("%s: %v", name, err)
		return rec
	}
	var killWall time.Time
	killDone := make(chan struct{})
	if kill != "" {
		rec.Kill = &killInfo{Node: kill}
		go func() {
			defer close(killDone)
			select {
			case <-time.After(killAt):
			case <-ctx.Done():
				return
			}
			killWall = time.Now()
			if err := c.kill(ctx, kill); err != nil {
				rec.Kill.Error = err.Error()
			}
		}()
	} else {
		close(killDone)
	}
	err := cmd.Wait()
	end := time.Now()
	<-killDone
	rec.WallSec = end.Sub(start).Seconds()
	if busy1, total1, ok := cpuTicks(); ok && cpuOK && total1 > total0 {
		box := (busy1 - busy0) / (total1 - total0) * float64(runtime.NumCPU()) * 100
		srv := c.ticksSince(srv0) / rec.WallSec // clock ticks of 1/100 s
		var bench float64
		if cmd.ProcessState != nil {
			bench = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / rec.WallSec * 100
		}
		rec.CPU = &cpuUse{Box: round1(box), Servers: round1(srv), Bench: round1(bench), Other: round1(math.Max(0, box-srv-bench))}
	}
	if err != nil {
		rec.Error = fmt.Sprintf("%v: %s", err, lastLines(stderr.String(), 5))
		if ctx.Err() == nil {
			d.fail("%s: %s", name, rec.Error)
		}
		d.save(rec)
		return rec
	}
	var res benchResult
	if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil {
		rec.Error = "bench output: " + jerr.Error()
		d.fail("%s: %s", name, rec.Error)
		d.save(rec)
		return rec
	}
	rec.Result = json.RawMessage(bytes.TrimSpace(stdout.Bytes()))
	rec.res = &res
	if rec.Kill != nil && !killWall.IsZero() {
		// The measurement ends just before the process prints and exits.
		rec.Kill.AtSec = round2(killWall.Sub(end).Seconds() + res.DurationSec)
	}
	d.save(rec)
	if o.preload {
		return rec
	}
	extra := ""
	if rec.Kill != nil {
		extra = fmt.Sprintf(", %s killed at t=%.1fs", rec.Kill.Node, rec.Kill.AtSec)
		if rec.Kill.Error != "" {
			extra += " (kill failed: " + rec.Kill.Error + ")"
		}
	}
	if res.Errors > 0 {
		extra += fmt.Sprintf(", %d errors %v", res.Errors, res.ErrorsByKind)
	}
	if nf := res.notFound(); nf > 0 {
		extra += fmt.Sprintf(", %d not found", nf)
	}
	cpu := ""
	if rec.CPU != nil {
		cpu = fmt.Sprintf(" [cpu%% srv %.0f bench %.0f other %.0f]", rec.CPU.Servers, rec.CPU.Bench, rec.CPU.Other)
	}
	d.logf("  %-22s %8.0f ops/s  p50 %6.2f ms  p99 %7.2f ms  (%d ops in %.1fs%s)%s",
		name, res.Throughput, res.Latency.P50, res.Latency.P99, res.Ops, res.DurationSec, extra, cpu)
	return rec
}

func (d *driver) save(rec *runRecord) {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(d.out, "runs", rec.Name+".json"), append(b, '\n'), 0o644)
	}
	if err != nil {
		d.fail("save %s: %v", rec.Name, err)
	}
}

// preload puts every key 0..keys-1 once, with many goroutines (the bench
// tool's --preload), then a token measured phase.
func (d *driver) preload(ctx context.Context, c *cluster, exp string, keys int) *runRecord {
	conc := min(d.p.preloadConc, keys)
	t0 := time.Now()
	rec := d.bench(ctx, c, exp, fmt.Sprintf("%s-preload-%s", c.name, kname(keys)), []string{"--workload", "put", "--preload",
		"--keys", strconv.Itoa(keys), "--clients", strconv.Itoa(conc), "--conns", strconv.Itoa(max(1, conc/8)),
		"--ops", strconv.Itoa(conc)}, runOpts{preload: true})
	if rec.Error != "" {
		return rec
	}
	d.logf("  preloaded %d keys in %.1fs (%.0f puts/s)", keys, time.Since(t0).Seconds(), float64(keys)/time.Since(t0).Seconds())
	return rec
}

// workload args for a timed, not preloaded run.
func (d *driver) timed(workload string, clients, keys int, t time.Duration) []string {
	return []string{"--workload", workload, "--clients", strconv.Itoa(clients), "--conns", strconv.Itoa(connsFor(clients)),
		"--keys", strconv.Itoa(keys), "--duration", dur(t), "--preload=false"}
}

// RecoverKV fig. 2: latency CDFs of puts and gets, single client, with
// 1k, 10k and 100k keys in the store. One cluster; the key space grows.
func (d *driver) fig2(ctx context.Context) error {
	c, err := d.startCluster(ctx, "fig2", 3, 3, false)
	if err != nil {
		return err
	}
	defer c.stop()
	for _, k := range d.p.fig2Keys {
		d.preload(ctx, c, "fig2", k)
		for _, op := range []string{"put", "get"} {
			d.bench(ctx, c, "fig2", fmt.Sprintf("fig2-%s-%s", op, kname(k)), d.timed(op, d.p.fig2Clients, k, d.p.point), runOpts{})
		}
	}
	return nil
}

// RecoverKV fig. 4: throughput over time without a failure and with one
// node killed (power-cut style) mid-run; puts and gets, each on its own
// fresh cluster (normal run first, then the failure run).
func (d *driver) fig4(ctx context.Context) error {
	var errs []error
	for _, op := range []string{"put", "get"} {
		err := func() error {
			c, err := d.startCluster(ctx, "fig4-"+op, 3, 3, true)
			if err != nil {
				return err
			}
			defer c.stop()
			d.preload(ctx, c, "fig4", d.p.keys)
			args := d.timed(op, d.p.fig4Clients, d.p.keys, d.p.failDur)
			d.bench(ctx, c, "fig4", "fig4-"+op+"-normal", args, runOpts{})
			victim := c.addrs[len(c.addrs)-1]
			r := d.bench(ctx, c, "fig4", "fig4-"+op+"-failure", args, runOpts{kill: victim, killAt: d.p.killAt})
			if r.Kill != nil && r.Kill.Error == "" && r.res != nil {
				d.kills[op] = r.Kill.AtSec
			} else if r.Kill != nil && r.Kill.Error != "" {
				d.fail("fig4 %s: kill %s: %s", op, victim, r.Kill.Error)
			}
			return nil
		}()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RecoverKV fig. 5: throughput vs concurrent clients, puts and gets.
func (d *driver) fig5(ctx context.Context) error {
	c, err := d.startCluster(ctx, "fig5", 3, 3, false)
	if err != nil {
		return err
	}
	defer c.stop()
	d.preload(ctx, c, "fig5", d.p.keys)
	for _, op := range []string{"put", "get"} {
		for _, n := range d.p.fig5Clients {
			d.bench(ctx, c, "fig5", fmt.Sprintf("fig5-%s-c%d", op, n), d.timed(op, n, d.p.keys, d.p.point), runOpts{})
		}
	}
	return nil
}

// GTStore fig. 3: throughput vs replication factor on a 7-node cluster,
// a 50/50 get/put mix (GTStore: a put then a get of each key, 1 client).
func (d *driver) gtstore(ctx context.Context) error {
	var errs []error
	for _, r := range d.p.gtReplicas {
		err := func() error {
			c, err := d.startCluster(ctx, fmt.Sprintf("gtstore-r%d", r), d.p.gtNodes, r, false)
			if err != nil {
				return err
			}
			defer c.stop()
			d.preload(ctx, c, "gtstore", d.p.keys)
			for _, n := range d.p.gtClients {
				d.bench(ctx, c, "gtstore", fmt.Sprintf("gtstore-r%d-c%d", r, n), d.timed("a", n, d.p.keys, d.p.point), runOpts{})
			}
			return nil
		}()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CS739 project 1: one client doing N requests vs two clients doing N/2
// each, for gets, puts and a uniform 50/50 mix.
func (d *driver) cs739(ctx context.Context) error {
	c, err := d.startCluster(ctx, "cs739", 3, 3, false)
	if err != nil {
		return err
	}
	defer c.stop()
	d.preload(ctx, c, "cs739", d.p.keys)
	for _, wl := range []string{"get", "put", "a"} {
		for _, n := range []int{1, 2} {
			d.bench(ctx, c, "cs739", fmt.Sprintf("cs739-%s-c%d", wl, n), []string{"--workload", wl, "--clients", strconv.Itoa(n),
				"--conns", strconv.Itoa(n), "--keys", strconv.Itoa(d.p.keys), "--ops", strconv.Itoa(d.p.cs739Ops), "--preload=false"}, runOpts{})
		}
	}
	return nil
}

// ECE419 milestone 3: servers x clients grid of a 50/50 get/put mix, 3
// replicas per shard (capped at the node count).
func (d *driver) ece419(ctx context.Context) error {
	var errs []error
	for _, s := range d.p.eceServers {
		err := func() error {
			c, err := d.startCluster(ctx, fmt.Sprintf("ece419-s%d", s), s, 3, false)
			if err != nil {
				return err
			}
			defer c.stop()
			d.preload(ctx, c, "ece419", d.p.keys)
			for _, n := range d.p.eceClients {
				d.bench(ctx, c, "ece419", fmt.Sprintf("ece419-s%d-c%d", s, n), d.timed("a", n, d.p.keys, d.p.point), runOpts{})
			}
			return nil
		}()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func kname(k int) string {
	switch {
	case k >= 1000000 && k%1000000 == 0:
		return fmt.Sprintf("%dm", k/1000000)
	case k >= 1000 && k%1000 == 0:
		return fmt.Sprintf("%dk", k/1000)
	}
	return strconv.Itoa(k)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// machineInfo describes the machine and the source tree for the report.
func machineInfo() (machine, commit string) {
	parts := []string{fmt.Sprintf("%d CPUs", runtime.NumCPU())}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				parts = append(parts, fmt.Sprintf("%.0f GiB RAM", kb/1024/1024))
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				parts = append(parts, strings.TrimSpace(v))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(b)))
	}
	parts = append(parts, runtime.Version())
	commit = "unknown"
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(b))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	return strings.Join(parts, ", "), commit
}

// copyToDocs copies seeds.md and img/seeds/*.svg from out to docs.
func copyToDocs(out, docs string) error {
	if err := os.MkdirAll(filepath.Join(docs, "img", "seeds"), 0o755); err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(out, "img", "seeds", "*.svg"))
	pairs := [][2]string{{filepath.Join(out, "seeds.md"), filepath.Join(docs, "seeds.md")}}
	for _, f := range files {
		pairs = append(pairs, [2]string{f, filepath.Join(docs, "img", "seeds", filepath.Base(f))})
	}
	for _, p := range pairs {
		b, err := os.ReadFile(p[0])
		if err != nil {
			return err
		}
		if err := os.WriteFile(p[1], b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
