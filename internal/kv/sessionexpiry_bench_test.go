package kv

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// benchSessionRecords is how many session records BenchmarkExpireSessions
// keeps: one new session per request piles them up to rate x TTL.
const benchSessionRecords = 100_000

// sessionsDB returns an in-memory Pebble holding n session records of
// shard, each left by a GET of a benchValue-byte value (so each record
// keeps a result of that size), all active at stamp 1 s.
func sessionsDB(b *testing.B, n int) (*pebble.DB, *StateMachine) {
	db := benchDB(b)
	sm := New(shard)
	for i := 0; i < n; i += 1000 {
		batch := db.NewIndexedBatch()
		for j := i; j < min(i+1000, n); j++ {
			cmd := kvCmd(uint64(j+1), 1, int64(time.Second), &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: benchKey(j % benchKeys)})
			if res, err := sm.Apply(batch, wholeRange, cmd); err != nil || res.GetErrorCode() != 0 {
				b.Fatalf("apply: %v %v", res, err)
			}
		}
		if err := flushApplied(sm, batch); err != nil {
			b.Fatal(err)
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	return db, sm
}

// BenchmarkExpireSessions measures one ExpireSessions apply over
// benchSessionRecords records, none of them idle (the common case: the
// loop runs every minute, the TTL is an hour): the work is the scan.
// "all" is the command below cluster version 6, which reads every record;
// "bounded" the one a leader proposes from then on, which reads
// MaxSessionsPerExpiry. The batch is dropped, not committed, so every
// iteration reads the same; ns/record is per record read.
func BenchmarkExpireSessions(b *testing.B) {
	db, sm := sessionsDB(b, benchSessionRecords)
	for _, bc := range []struct {
		name  string
		limit uint32
	}{{"all", 0}, {"bounded", MaxSessionsPerExpiry}} {
		b.Run(bc.name, func(b *testing.B) {
			stamp := int64(2 * time.Second)
			cmd := &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_ExpireSessions{
				ExpireSessions: &storepb.ExpireSessions{IdleBeforeUnixNanos: stamp - int64(time.Hour), MaxRecords: bc.limit}}}
			read := benchSessionRecords
			if bc.limit != 0 {
				read = int(bc.limit)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch := db.NewIndexedBatch()
				if res, err := sm.Apply(batch, wholeRange, cmd); err != nil || res.GetErrorCode() != 0 {
					b.Fatalf("apply: %v %v", res, err)
				}
				if err := flushApplied(sm, batch); err != nil {
					b.Fatal(err)
				}
				batch.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(read), "ns/record")
		})
	}
}
