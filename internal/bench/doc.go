// Package bench is Concord's load generator, behind `concord bench`.
//
// A run drives a target (today only a Concord cluster, through the Go
// client) from --clients goroutines that share --conns client instances
// round-robin. Each goroutine draws a key from the configured distribution
// (uniform, zipfian or hotkey), picks a read or an update by the read ratio
// (YCSB workloads A, B and C, or put-only and get-only), times the request,
// and records the latency in its own HDR histogram; histograms are merged
// only after the run, so the hot path takes no lock. A sampler goroutine
// reads per-goroutine atomic counters twice a second to draw the live
// progress line and the throughput-over-time series.
//
// Keys are deterministic ("k" followed by the zero-padded key index, padded
// to --key-size) so a preload pass and later runs address the same records.
// Values are random printable bytes sliced from one pre-generated buffer:
// generating them per request would spend the load generator's CPU, which
// on a small machine is shared with the servers being measured.
//
// The package separates the pure parts (Config, key naming, choosers,
// Result rendering, the SVG plot) from Run, which needs a Target; tests use
// a fake Target, and BenchmarkPut3Nodes runs a real in-process cluster for
// CPU profiling.
package bench
