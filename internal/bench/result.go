package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latency is a latency summary in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// CDFPoint is one point of a latency CDF: Percent of operations took at
// most Ms milliseconds.
type CDFPoint struct {
	Percent float64 `json:"pct"`
	Ms      float64 `json:"ms"`
}

// OpStats summarises one operation type (or all of them).
type OpStats struct {
	Ops        int64      `json:"ops"`
	Errors     int64      `json:"errors"`
	NotFound   int64      `json:"not_found,omitempty"`
	Throughput float64    `json:"throughput_ops_per_sec"`
	Latency    Latency    `json:"latency_ms"`
	CDF        []CDFPoint `json:"latency_cdf,omitempty"`
}

// Result is the outcome of a run; its JSON form is `--output json`.
// Ops counts successful operations; throughput is Ops over the measured
// duration (start to the last operation's end).
type Result struct {
	Config       Config             `json:"config"`
	DurationSec  float64            `json:"duration_sec"`
	Ops          int64              `json:"ops"`
	Errors       int64              `json:"errors"`
	ErrorsByKind map[string]int64   `json:"errors_by_kind"`
	Throughput   float64            `json:"throughput_ops_per_sec"`
	Latency      Latency            `json:"latency_ms"`
	CDF          []CDFPoint         `json:"latency_cdf"`
	ByOp         map[string]OpStats `json:"by_op"`
	Timeline     []Sample           `json:"timeline"`
	Interrupted  bool               `json:"interrupted,omitempty"`

	// Merged histograms (all, then per op type), kept for the plot.
	all   *hdrhistogram.Histogram
	perOp [numOps]*hdrhistogram.Histogram
}

// buildResult merges the workers' histograms and counters. It runs after
// every worker has stopped, so it reads their fields without atomics.
func buildResult(cfg Config, workers []*worker, elapsed time.Duration, timeline []Sample) *Result {
	r := &Result{Config: cfg, DurationSec: elapsed.Seconds(), ErrorsByKind: map[string]int64{},
		ByOp: map[string]OpStats{}, Timeline: timeline, all: newHist()}
	var opErrs, notFound [numOps]int64
	for op := range numOps {
		r.perOp[op] = newHist()
	}
	for _, w := range workers {
		for op := range numOps {
			r.perOp[op].Merge(w.hist[op])
			opErrs[op] += w.opErrs[op]
			notFound[op] += w.notFound[op]
		}
		for k, n := range w.kinds {
			r.ErrorsByKind[k] += n
		}
	}
	for op := range numOps {
		r.all.Merge(r.perOp[op])
		st := r.stats(r.perOp[op], opErrs[op])
		st.NotFound = notFound[op]
		if st.Ops+st.Errors > 0 {
			r.ByOp[opNames[op]] = st
		}
		r.Errors += opErrs[op]
	}
	r.Ops = r.all.TotalCount()
	r.Throughput = rate(r.Ops, r.DurationSec)
	r.Latency = summarize(r.all)
	r.CDF = cdf(r.all)
	return r
}

// cdf samples h at the plot's percentiles, so that runs can be drawn
// together from their JSON (bench/seeds does).
func cdf(h *hdrhistogram.Histogram) []CDFPoint {
	if h.TotalCount() == 0 {
		return nil
	}
	var pts []CDFPoint
	for _, q := range cdfPercentiles() {
		pts = append(pts, CDFPoint{Percent: q, Ms: float64(h.ValueAtQuantile(q)) / 1000})
	}
	return pts
}

func (r *Result) stats(h *hdrhistogram.Histogram, errs int64) OpStats {
	return OpStats{Ops: h.TotalCount(), Errors: errs, Throughput: rate(h.TotalCount(), r.DurationSec),
		Latency: summarize(h), CDF: cdf(h)}
}

func rate(n int64, sec float64) float64 {
	if sec <= 0 {
		return 0
	}
	return float64(n) / sec
}

// summarize converts a microsecond histogram to a millisecond summary.
func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()), Mean: h.Mean() / 1000}
}

// WriteJSON writes the result as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the human-readable report.
func (r *Result) WriteText(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	mix, _ := c.Mix.MarshalJSON()
	fmt.Fprintf(&b, "target %s, workload %s (mix %s, %s), %s keys over %d keys, key %d B, value %d B\n",
		c.Target, c.Workload, mix, c.Consistency, c.Distribution, c.Keys, c.KeySize, c.ValueSize)
	fmt.Fprintf(&b, "%d clients on %d conns, preload %v", c.Clients, c.Conns, c.Preload)
	if r.Interrupted {
		b.WriteString(", INTERRUPTED")
	}
	fmt.Fprintf(&b, "\n\nduration %.2f s, %d ops, %d errors, throughput %.0f ops/s\n\n", r.DurationSec, r.Ops, r.Errors, r.Throughput)
	fmt.Fprintf(&b, "%-8s %10s %10s %8s %8s %8s %8s %8s %8s\n", "op", "ops", "ops/s", "p50", "p90", "p99", "p99.9", "max", "(ms)")
	row := func(name string, s OpStats) {
		l := s.Latency
		fmt.Fprintf(&b, "%-8s %10d %10.0f %8.3f %8.3f %8.3f %8.3f %8.3f\n", name, s.Ops, s.Throughput, l.P50, l.P90, l.P99, l.P999, l.Max)
	}
	row("all", OpStats{Ops: r.Ops, Throughput: r.Throughput, Latency: r.Latency})
	for _, name := range opNames {
		if s, ok := r.ByOp[name]; ok {
			row(name, s)
		}
	}
	for _, name := range opNames {
		if s, ok := r.ByOp[name]; ok && s.NotFound > 0 {
			fmt.Fprintf(&b, "\n%s operations that found no value: %d\n", name, s.NotFound)
		}
	}
	if len(r.ErrorsByKind) > 0 {
		b.WriteString("\nerrors by kind:")
		for _, k := range sortedKeys(r.ErrorsByKind) {
			fmt.Fprintf(&b, " %s=%d", k, r.ErrorsByKind[k])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
