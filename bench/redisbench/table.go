package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// runInfo is what the table says about the run as a whole.
type runInfo struct {
	start                 time.Time
	took                  time.Duration
	loadBefore, loadAfter string
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute figures.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// baseline is the system the ratios divide by.
const baseline = "redis-everysec"

// formatTable renders the results grouped by -P and test, each group's
// systems in run order; "vs redis-everysec" divides a row's requests/s
// by redis-everysec's for the same test and -P.
func formatTable(rs []result, o options, run runInfo) string {
	base := map[string]float64{}
	for _, r := range rs {
		if r.System == baseline {
			base[key(r)] = r.RPS
		}
	}
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "\n## bench-redis, %s on %s (%d cores)\n\n", run.start.UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU())
	rflag := ""
	if o.r > 0 {
		rflag = fmt.Sprintf(" -r %d", o.r)
	}
	fmt.Fprintf(&b, "`redis-benchmark -t X -n %d -c %d -d %d -P P%s --csv`, one invocation per test and -P, against %s; load average (1, 5, 15 min) %s at the start, %s at the end; %v in all.\n\n",
		o.n, o.c, o.d, rflag, strings.Join(o.systems, ", "), run.loadBefore, run.loadAfter, run.took.Round(time.Second))
	if o.warmup {
		fmt.Fprintf(&b, "Each system first ran every test once at -P %d, unmeasured, and Concord first waited until its start-up leader balancing was done, so the rows measure warm systems.\n\n", slices.Max(o.pipelines))
	}
	b.WriteString("| system | test | -P | requests/s | p50 ms | server CPU µs/op | vs redis-everysec (rps) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, p := range o.pipelines {
		for _, t := range o.tests {
			for _, r := range rs {
				if r.Pipeline != p || !sameTest(r.Test, t) {
					continue
				}
				ratio := "—"
				if v := base[key(r)]; v > 0 {
					ratio = fmt.Sprintf("%.2f×", r.RPS/v)
				}
				fmt.Fprintf(&b, "| %s%s | %s | %d | %.0f | %.3f | %.1f | %s |\n", r.System, viaNote(r.Via), r.Test, r.Pipeline, r.RPS, r.P50, r.ServerCPU, ratio)
			}
		}
	}
	b.WriteString("\nA Concord row marked (via leader) went through the node that led the one key's shard, (forwarded) through a node that forwarded to it (without -r each one-key test runs both ways unless -both-paths=false; an unmarked Concord row went through node 1, or the leader moved during it).\n")
	b.WriteString("\nServer CPU is the user+system time of the servers' own processes (/proc/PID/stat: Concord's three nodes together, or the one redis-server) during the invocation, divided by its requests (an MSET request sets 10 keys).\n")
	for _, r := range rs {
		if r.Errors != "" {
			fmt.Fprintf(&b, "Errors: %s %s -P %d answered errors: %s.\n", r.System, r.Test, r.Pipeline, r.Errors)
		}
	}
	if g := goal(rs); g != "" {
		b.WriteString("\n" + g + "\n")
	}
	return b.String()
}

func key(r result) string { return fmt.Sprintf("%s|%d", r.Test, r.Pipeline) }

// sameTest matches redis-benchmark's row name ("SET", "MSET (10 keys)")
// with a -t name ("set", "mset").
func sameTest(row, t string) bool {
	name, _, _ := strings.Cut(row, " ")
	return strings.EqualFold(name, t)
}

// goal states whether Concord's pipelined SET reaches half of Redis
// everysec's, the target, when both were measured.
func goal(rs []result) string {
	var concord []result
	var redis float64
	p := 0
	for _, r := range rs {
		if !sameTest(r.Test, "set") || r.Pipeline <= 1 || (p != 0 && r.Pipeline != p) {
			continue
		}
		switch r.System {
		case "concord":
			concord, p = append(concord, r), r.Pipeline
		case baseline:
			redis, p = r.RPS, r.Pipeline
		}
	}
	if len(concord) == 0 || redis == 0 {
		return ""
	}
	var parts []string
	for _, c := range concord { // a row per path when both were measured
		verdict := "not met"
		if c.RPS >= redis/2 {
			verdict = "met"
		}
		parts = append(parts, fmt.Sprintf("%s%s (SET -P %d: Concord %.0f requests/s, %.1f %% of redis-everysec's %.0f)",
			verdict, viaWords(c.Via), p, c.RPS, 100*c.RPS/redis, redis))
	}
	return "Goal \"pipelined SET ≥ 50 % of Redis everysec\": " + strings.Join(parts, "; ") + "."
}

// viaWords is how the goal line names a row's path.
func viaWords(via string) string {
	switch via {
	case "leader":
		return " through the key's leader"
	case "forwarded":
		return " through a node that forwards to it"
	}
	return ""
}

// viaNote is how a row's Via reads after the system's name.
func viaNote(via string) string {
	switch via {
	case "leader":
		return " (via leader)"
	case "forwarded":
		return " (forwarded)"
	}
	return ""
}
