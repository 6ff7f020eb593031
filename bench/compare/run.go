package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/concord-kv/concord/bench/internal/systems"
	"github.com/concord-kv/concord/internal/bench"
)

// benchJSON is the part of `concord bench --output json` the table uses.
type benchJSON struct {
	Ops        int64   `json:"ops"`
	Throughput float64 `json:"throughput_ops_per_sec"`
	Latency    struct {
		P50, P99 float64
	} `json:"latency_ms"`
	Errors int64 `json:"errors"`
}

// slug turns a workload name into a file name part.
func slug(s string) string {
	return strings.NewReplacer(" ", "", ",", "-").Replace(strings.ToLower(s))
}

// concordBench runs `concord bench` against s and decodes its JSON; it
// also returns the CPU time the load generator itself used.
func concordBench(o options, s *systems.System, file string, args ...string) (benchJSON, time.Duration, error) {
	full := append([]string{"bench", "--target", s.Target, "--endpoints", strings.Join(s.Endpoints, ","),
		"--keys", strconv.Itoa(o.keys), "--key-size", "16", "--value-size", "256", "--output", "json"}, args...)
	cmd := exec.Command(o.concord, full...)
	out, err := cmd.Output()
	var res benchJSON
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return res, 0, fmt.Errorf("concord %s: %s", strings.Join(full, " "), msg)
	}
	if file != "" {
		_ = os.WriteFile(filepath.Join(o.out, file), out, 0o644)
	}
	return res, systems.ChildCPU(cmd), json.Unmarshal(out, &res)
}

// preload writes every key once with 100 clients, so that reads find
// values and every system starts from the same data.
func preload(o options, s *systems.System) error {
	logf("%s: preloading %d keys", s.Name, o.keys)
	_, _, err := concordBench(o, s, "", "--workload", "get", "--clients", "100", "--conns", "10", "--preload", "--ops", "1")
	return err
}

// runBench runs one workload through concord bench, measuring the whole
// box's CPU meanwhile.
func runBench(o options, s *systems.System, w workload) (row, error) {
	cpu, srv := startCPU(), systems.StartServerCPU(s.PIDs())
	args := append(append([]string{}, w.args...), "--duration", o.duration.String(), "--preload=false")
	res, gen, err := concordBench(o, s, s.Name+"-"+slug(w.name)+".json", args...)
	ops := float64(res.Ops + res.Errors)
	return row{System: s.Name, Workload: w.name, Tool: "concord bench", OpsPerSec: res.Throughput,
		P50: res.Latency.P50, P99: res.Latency.P99, Errors: res.Errors, BoxCPU: cpu.stop(),
		ServerCPU: systems.PerKOps(srv.Stop(), ops), LoadCPU: systems.PerKOps(gen, ops)}, err
}

// crossCheck runs the peer's own tool for the put and get rows, sized to
// take about the run duration at the rate concord bench measured.
func crossCheck(o options, s *systems.System, rates map[string]float64) ([]row, error) {
	var rows []row
	for _, w := range workloads {
		if w.kind == "" || s.Target == "concord" || !o.runs(w) {
			continue
		}
		total := max(200, int(rates[w.name]*o.duration.Seconds()))
		cpu, srv := startCPU(), systems.StartServerCPU(s.PIDs())
		var r row
		var err error
		if s.Target == "etcd" {
			r, err = etcdBenchmark(o, s, w, total)
		} else {
			r, err = redisBenchmark(o, s, w, total)
		}
		r.BoxCPU = cpu.stop()
		r.ServerCPU = systems.PerKOps(srv.Stop(), float64(total))
		if err != nil {
			return rows, err
		}
		logf("%s %s (%s): %.0f ops/s p50 %.2f p99 %.2f ms", s.Name, w.name, r.Tool, r.OpsPerSec, r.P50, r.P99)
		rows = append(rows, r)
	}
	return rows, nil
}

// etcdBenchmark runs etcd's own tool: puts over the same key space, or
// linearizable ranges of one preloaded key (the tool reads one key).
func etcdBenchmark(o options, s *systems.System, w workload, total int) (row, error) {
	args := []string{"--endpoints", strings.Join(s.Endpoints, ","), "--precise",
		"--conns", strconv.Itoa(w.conns), "--clients", strconv.Itoa(w.clients)}
	if w.kind == "put" {
		args = append(args, "put", "--key-size", "16", "--val-size", "256",
			"--key-space-size", strconv.Itoa(o.keys), "--total", strconv.Itoa(total))
	} else {
		args = append(args, "range", bench.KeyName(1, 16), "--consistency", "l", "--total", strconv.Itoa(total))
	}
	cmd := exec.Command(filepath.Join(o.peers, "benchmark"), args...)
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(o.out, s.Name+"-native-"+slug(w.name)+".txt"), out, 0o644)
	if err != nil {
		return row{}, fmt.Errorf("etcd benchmark %v: %v: %s", args, err, lastLines(out))
	}
	n, err := systems.ParseEtcdBenchmark(bytes.NewReader(out))
	return row{System: s.Name, Workload: w.name, Tool: "etcd benchmark", OpsPerSec: n.OpsPerSec, P50: n.P50, P99: n.P99,
		LoadCPU: systems.PerKOps(systems.ChildCPU(cmd), float64(total))}, err
}

// redisBenchmark runs redis-benchmark's SET or GET with the same value
// size and key space (-r picks random keys among that many).
func redisBenchmark(o options, s *systems.System, w workload, total int) (row, error) {
	host, port, _ := strings.Cut(s.Endpoints[0], ":")
	test := map[string]string{"put": "set", "get": "get"}[w.kind]
	args := []string{"-h", host, "-p", port, "--csv", "-t", test, "-n", strconv.Itoa(total),
		"-c", strconv.Itoa(w.clients), "-d", "256", "-r", strconv.Itoa(o.keys)}
	cmd := exec.Command(filepath.Join(o.peers, "redis-benchmark"), args...)
	out, err := cmd.Output()
	_ = os.WriteFile(filepath.Join(o.out, s.Name+"-native-"+slug(w.name)+".txt"), out, 0o644)
	if err != nil {
		return row{}, fmt.Errorf("redis-benchmark %v: %v: %s", args, err, lastLines(out))
	}
	m, err := systems.ParseRedisBenchmark(bytes.NewReader(out))
	if err != nil {
		return row{}, err
	}
	n, ok := m[strings.ToUpper(test)]
	if !ok {
		return row{}, fmt.Errorf("redis-benchmark printed no %s row", test)
	}
	return row{System: s.Name, Workload: w.name, Tool: "redis-benchmark", OpsPerSec: n.OpsPerSec, P50: n.P50, P99: n.P99,
		LoadCPU: systems.PerKOps(systems.ChildCPU(cmd), float64(total))}, nil
}

func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// cpuMeter measures the whole machine's busy time between start and
// stop, from /proc/stat, in % of one core: neighbours' load shows here.
type cpuMeter struct {
	busy, total uint64
	ok          bool
}

func readCPU() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}

func startCPU() *cpuMeter {
	b, t, ok := readCPU()
	return &cpuMeter{busy: b, total: t, ok: ok}
}

// stop returns the busy share since start in % of one core (the box has
// runtime.NumCPU() cores, so up to 100 × that).
func (m *cpuMeter) stop() float64 {
	b, t, ok := readCPU()
	if !ok || !m.ok || t <= m.total {
		return 0
	}
	return 100 * float64(b-m.busy) / float64(t-m.total) * float64(numCPU())
}
