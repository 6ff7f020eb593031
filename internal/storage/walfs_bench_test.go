package storage

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkSyncedCommit is a follower's persist of one put on a fresh engine
// (the state of a cluster's first 64 MiB of writes after every start): one
// raft entry of ~400 bytes committed with Sync, one at a time. wal=sized is
// the engine as it opens (WAL files preallocated with their size set,
// walfs.go); wal=growing is Pebble's own preallocation, whose size grows
// with each append. p50-µs and p90-µs are the commits' latencies.
//
//	go test -run '^$' -bench BenchmarkSyncedCommit -benchtime 2000x -count 4 ./internal/storage/
func BenchmarkSyncedCommit(b *testing.B) {
	for _, sized := range []bool{true, false} {
		name := map[bool]string{true: "wal=sized", false: "wal=growing"}[sized]
		b.Run(name, func(b *testing.B) {
			var tune func(*pebble.Options)
			if !sized {
				tune = func(o *pebble.Options) { o.FS = vfs.Default }
			}
			e, err := openTuned(vfs.Default, b.TempDir(), tune)
			if err != nil {
				b.Fatal(err)
			}
			defer closeQuietly(e)
			val := make([]byte, 400)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch := e.NewBatch()
				if err := batch.Set(fmt.Appendf(nil, "\x02r-%09d", i), val, nil); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := Commit(batch, true); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
		})
	}
}
