package systems

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// NativeResult is what a peer's own benchmark tool reports.
type NativeResult struct {
	OpsPerSec float64
	P50, P99  float64 // ms
}

var (
	etcdRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	// Latency distribution lines: "  50.00% in 0.0012s" (--precise) or "50% in 0.0012 secs".
	etcdPct = regexp.MustCompile(`^\s*([0-9.]+)% in ([0-9.]+)\s*s`)
)

// ParseEtcdBenchmark reads the summary etcd's `benchmark` tool prints.
func ParseEtcdBenchmark(r io.Reader) (NativeResult, error) {
	var res NativeResult
	var haveRPS, have50, have99 bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := etcdRPS.FindStringSubmatch(line); m != nil {
			res.OpsPerSec, _ = strconv.ParseFloat(m[1], 64)
			haveRPS = true
		}
		if m := etcdPct.FindStringSubmatch(line); m != nil {
			pct, _ := strconv.ParseFloat(m[1], 64)
			sec, _ := strconv.ParseFloat(m[2], 64)
			switch pct {
			case 50:
				res.P50, have50 = sec*1000, true
			case 99:
				res.P99, have99 = sec*1000, true
			}
		}
	}
	if !haveRPS || !have50 || !have99 {
		return res, fmt.Errorf("etcd benchmark output has no Requests/sec or 50%%/99%% lines")
	}
	return res, sc.Err()
}

// ParseRedisBenchmark reads `redis-benchmark --csv` output: a header
// ("test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...)
// then one row per test, keyed here by test name (SET, GET).
func ParseRedisBenchmark(r io.Reader) (map[string]NativeResult, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("redis-benchmark printed %d CSV rows", len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"test", "rps", "p50_latency_ms", "p99_latency_ms"} {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("redis-benchmark CSV has no %q column: %v", h, rows[0])
		}
	}
	out := map[string]NativeResult{}
	for _, row := range rows[1:] {
		f := func(h string) float64 { v, _ := strconv.ParseFloat(row[col[h]], 64); return v }
		out[strings.ToUpper(row[col["test"]])] = NativeResult{OpsPerSec: f("rps"), P50: f("p50_latency_ms"), P99: f("p99_latency_ms")}
	}
	return out, nil
}
