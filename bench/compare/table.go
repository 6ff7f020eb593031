package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

func numCPU() int { return runtime.NumCPU() }

// formatTable renders the rows as a markdown table; "vs etcd" divides a
// row's throughput by etcd's for the same workload and tool (concord
// bench rows by etcd's concord bench row; native rows by etcd's own tool).
func formatTable(rows []row, o options, took time.Duration) string {
	etcd, etcdCPU := map[string]float64{}, map[string]float64{}
	for _, r := range rows {
		if r.System == "etcd" {
			etcd[r.Workload+"|"+sameTool(r.Tool)] = r.OpsPerSec
			etcdCPU[r.Workload+"|"+sameTool(r.Tool)] = r.ServerCPU
		}
	}
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "\n## bench-compare, %s on %s (%d cores), %v per run, %d keys, 16 B keys, 256 B values\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, numCPU(), o.duration, o.keys)
	b.WriteString("| system | workload | tool | ops/s | p50 ms | p99 ms | errors | vs etcd | server CPU ms/1k ops | CPU vs etcd | load-gen CPU ms/1k ops | box CPU % |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		k := r.Workload + "|" + sameTool(r.Tool)
		ratio, cpuRatio := "—", "—"
		if e := etcd[k]; e > 0 {
			ratio = fmt.Sprintf("%.2f×", r.OpsPerSec/e)
		}
		if e := etcdCPU[k]; e > 0 && r.ServerCPU > 0 {
			cpuRatio = fmt.Sprintf("%.2f×", r.ServerCPU/e)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.2f | %.2f | %d | %s | %.0f | %s | %.0f | %.0f |\n",
			r.System, r.Workload, r.Tool, r.OpsPerSec, r.P50, r.P99, r.Errors, ratio,
			r.ServerCPU, cpuRatio, r.LoadCPU, r.BoxCPU)
	}
	fmt.Fprintf(&b, "\nTotal time %v. Box CPU is the whole machine's busy time during the run, in %% of one core (max %d): load generator, servers and anything else running. Server CPU is the user+system time of the servers' own processes (/proc/PID/stat) per 1,000 operations (= µs per op); CPU vs etcd below 1 means leaner than etcd; load-gen CPU is the benchmark tool's own.\n",
		took.Round(time.Second), 100*numCPU())
	return b.String()
}

// sameTool maps a tool to its comparison class: the shared load generator,
// or a peer's own tool (compared with etcd's own tool).
func sameTool(tool string) string {
	if tool == "concord bench" {
		return tool
	}
	return "native"
}
