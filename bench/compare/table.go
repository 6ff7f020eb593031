package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
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

// roundOrder is the systems' order in a round: as given in odd rounds,
// reversed in even ones, so that a machine getting slower or faster over
// the run favours no system across a pair of rounds.
func roundOrder(systems []string, round int) []string {
	if round%2 == 1 {
		return systems
	}
	out := make([]string, len(systems))
	for i, s := range systems {
		out[len(systems)-1-i] = s
	}
	return out
}

// inSystemOrder sorts a round's rows by the systems' given order, keeping
// each system's rows in the order they ran.
func inSystemOrder(rows []row, systems []string) []row {
	rank := map[string]int{}
	for i, s := range systems {
		rank[s] = i
	}
	sort.SliceStable(rows, func(i, j int) bool { return rank[rows[i].System] < rank[rows[j].System] })
	return rows
}

// formatMedians renders one line per system, workload and tool with the
// median over the rounds of its throughput, p50, server CPU per op, and
// of its ratios to etcd: each round's ratio is taken between rows of that
// round, the closest in time, and the median of those is shown.
func formatMedians(rows []row, rounds int) string {
	type key struct{ system, workload, tool string }
	etcd := map[string]row{} // round|workload|tool class
	for _, r := range rows {
		if r.System == "etcd" {
			etcd[fmt.Sprint(r.Round, "|", r.Workload, "|", sameTool(r.Tool))] = r
		}
	}
	var order []key
	vals := map[key]*[5][]float64{} // ops, p50, cpu, ratio, cpu ratio
	for _, r := range rows {
		k := key{r.System, r.Workload, r.Tool}
		v, ok := vals[k]
		if !ok {
			v = &[5][]float64{}
			vals[k] = v
			order = append(order, k)
		}
		v[0] = append(v[0], r.OpsPerSec)
		v[1] = append(v[1], r.P50)
		v[2] = append(v[2], r.ServerCPU)
		if e, ok := etcd[fmt.Sprint(r.Round, "|", r.Workload, "|", sameTool(r.Tool))]; ok && e.OpsPerSec > 0 {
			v[3] = append(v[3], r.OpsPerSec/e.OpsPerSec)
			if e.ServerCPU > 0 && r.ServerCPU > 0 {
				v[4] = append(v[4], r.ServerCPU/e.ServerCPU)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Medians of %d rounds\n\n", rounds)
	b.WriteString("| system | workload | tool | rounds | ops/s | p50 ms | server CPU ms/1k ops | vs etcd | CPU vs etcd | vs etcd, each round |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, k := range order {
		v := vals[k]
		each := make([]string, len(v[3]))
		for i, x := range v[3] {
			each[i] = fmt.Sprintf("%.2f×", x)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.0f | %.2f | %.0f | %s | %s | %s |\n", k.system, k.workload, k.tool,
			len(v[0]), median(v[0]), median(v[1]), median(v[2]), ratioText(v[3]), ratioText(v[4]), strings.Join(each, " "))
	}
	return b.String()
}

func ratioText(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", median(xs))
}

// median of xs (not empty); the mean of the middle two for an even count.
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
