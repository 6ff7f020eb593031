package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/concord-kv/concord/bench/internal/systems"
)

// benchmarkTool is redis-benchmark from the peers dir, else from PATH.
func benchmarkTool(peers string) string {
	p := filepath.Join(peers, "redis-benchmark")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "redis-benchmark"
}

// runTest runs one redis-benchmark test with one -P against the Redis
// address addr of s (node 1's unless a path of via.go says otherwise),
// reading the servers' CPU time just before and after it; via names the
// path in the raw output's file name.
func runTest(o options, s *systems.System, addr, via, test string, p int) (result, error) {
	args := benchArgs(o, addr, test, p)
	cmd := exec.Command(benchmarkTool(o.peers), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	srv := systems.StartServerCPU(s.PIDs())
	err := cmd.Run()
	cpu := srv.Stop()
	raw := fmt.Sprintf("# %s %s\n%s%s", cmd.Path, strings.Join(args, " "), stdout.String(), stderr.String())
	name := fmt.Sprintf("%s-%s-P%d", s.Name, test, p)
	if via != "" {
		name += "-" + via
	}
	_ = os.WriteFile(filepath.Join(o.out, name+".txt"), []byte(raw), 0o644)
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark %s: %v: %s", strings.Join(args, " "), err, lastLines(stdout.String()+stderr.String()))
	}
	csv, errs := splitErrors(stdout.String())
	rows, err := systems.ParseRedisBenchmark(strings.NewReader(csv))
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark %s: %w", strings.Join(args, " "), err)
	}
	if len(rows) != 1 {
		return result{}, fmt.Errorf("redis-benchmark -t %s printed %d rows, want 1", test, len(rows))
	}
	var r result
	for name, n := range rows {
		if !sameTest(name, test) {
			return result{}, fmt.Errorf("redis-benchmark -t %s printed a %q row", test, name)
		}
		r = result{System: s.Name, Test: strings.ToUpper(test), Pipeline: p, Requests: o.n, RPS: n.OpsPerSec, P50: n.P50, P99: n.P99,
			ServerCPU: systems.PerKOps(cpu, float64(o.n)), Errors: errs}
	}
	return r, nil
}

// splitErrors separates the error replies redis-benchmark -e prints (at
// most one a second, "Error from server: ...") from its CSV, and returns
// the first of them with how many lines there were.
func splitErrors(out string) (csv, errs string) {
	var keep []string
	var first string
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "Error from server:") {
			if n == 0 {
				first = strings.TrimSpace(strings.TrimPrefix(line, "Error from server:"))
			}
			n++
			continue
		}
		keep = append(keep, line)
	}
	if n > 0 {
		errs = fmt.Sprintf("%q (%d lines, at most one a second)", first, n)
	}
	return strings.Join(keep, "\n"), errs
}

func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}
