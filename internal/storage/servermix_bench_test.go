package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
)

// serverMix writes what a node's engine receives under a put load (the
// census of a live node's WAL, docs/benchmarks.md): per put a raft log
// entry (~350 B), the user value (256 B), the client's session record and
// the shard clock; per batch of 15 puts the hard state and applied state of
// the shard; logs truncated as the host does (keep 5,000, drop 5,000 more).
type serverMix struct {
	shards      int
	logs        []*RaftLog
	next        []uint64
	rng         *rand.Rand
	userKeys    int
	val, entry  []byte
	keep, trunc uint64
	// logEng, when set, takes the raft log and hard state (a separate raft
	// engine); else they share the data engine.
	logEng *Engine
	// walOnly: the log entries and hard state go to the WAL alone
	// (serverMixConfigs' logWALOnly).
	walOnly bool
}

func newServerMix(b *testing.B, e, logEng *Engine, shards, userKeys int) *serverMix {
	if logEng == nil {
		logEng = e
	}
	m := &serverMix{logEng: logEng, shards: shards, next: make([]uint64, shards), rng: rand.New(rand.NewPCG(1, 2)),
		userKeys: userKeys, val: make([]byte, 260), entry: make([]byte, 330), keep: 5000, trunc: 5000}
	for s := range shards {
		l, err := LoadRaftLog(logEng.db, uint64ToShard(s))
		if err != nil {
			b.Fatal(err)
		}
		m.logs = append(m.logs, l)
		m.next[s] = 1
	}
	// Every user key once, as the benchmark's preload does.
	batch := e.db.NewBatch()
	for k := range userKeys {
		_ = batch.Set(m.userKey(k), m.val, nil)
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.Fatal(err)
	}
	return m
}

func uint64ToShard(s int) ids.ShardID { return ids.ShardID(s + 1) }

func vfsDefault() vfs.FS { return vfs.Default }

func (m *serverMix) userKey(k int) []byte {
	return keys.User(uint64(k%m.shards+1), fmt.Appendf(nil, "key-%012d", k))
}

// puts writes n puts of one shard as one batch, as one Ready of the host.
func (m *serverMix) puts(b *testing.B, e *Engine, n int) {
	s := m.rng.IntN(m.shards)
	l := m.logs[s]
	batch, lb := e.db.NewBatch(), e.db.NewBatch()
	if m.logEng != e {
		lb = m.logEng.db.NewBatch()
	}
	ents := make([]*pb.Entry, n)
	for i := range ents {
		ents[i] = &pb.Entry{Term: new(uint64(1)), Index: new(m.next[s]), Data: m.entry}
		m.next[s]++
		k := m.rng.IntN(m.userKeys)
		_ = batch.Set(m.userKey(k), m.val, nil)
		_ = batch.Set(keys.Session(uint64(s+1), uint64(m.rng.IntN(100))), make([]byte, 20), nil)
		_ = batch.Set(keys.Clock(uint64(s+1)), make([]byte, 16), nil)
	}
	hs := &pb.HardState{Term: new(uint64(1)), Commit: new(m.next[s] - 1)}
	_ = batch.Set(keys.Applied(uint64(s+1)), make([]byte, 12), nil)
	if m.walOnly {
		for _, ent := range ents {
			_ = lb.LogData(mustMarshal(b, ent), nil)
		}
		_ = lb.LogData(mustMarshal(b, hs), nil)
	} else if err := l.Append(lb, ents); err != nil {
		b.Fatal(err)
	} else {
		_ = SetProto(lb, keys.HardState(uint64(s+1)), hs)
	}
	if first, _ := l.FirstIndex(); !m.walOnly && m.next[s]-first > m.keep+m.trunc {
		if err := l.Truncate(lb, m.next[s]-1-m.keep); err != nil {
			b.Fatal(err)
		}
	}
	if m.logEng != e {
		if err := lb.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
	} else if err := batch.Apply(lb, nil); err != nil {
		b.Fatal(err)
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.Fatal(err)
	}
}

// openServerMix opens the engine cfg describes (and a log engine of its
// own, if cfg asks), both closed when b ends, and a mix of 16 shards and
// 10,000 user keys over them.
func openServerMix(b *testing.B, cfg serverMixConfig) (*Engine, *serverMix) {
	b.Helper()
	e, err := openTuned(vfsDefault(), b.TempDir(), cfg.tune)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	if cfg.pebbleFlush {
		stopFlusher(e)
	}
	var logEng *Engine
	if cfg.logApart {
		if logEng, err = openTuned(vfsDefault(), b.TempDir(), nil); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { logEng.Close() })
	}
	m := newServerMix(b, e, logEng, 16, 10_000)
	if cfg.logKeep > 0 {
		m.keep, m.trunc = cfg.logKeep, cfg.logKeep
	}
	return e, m
}

// BenchmarkServerMixRead is a linearizable get's Pebble read on a node
// that has served puts: a random user key through a read view, after
// `puts` puts filled the memtable(s) with the mix above. Random keys make
// the memtable search cold, as on a live server. At 200,000 puts the
// memtables are full size and a second full-size one waits for reuse:
// Pebble reserves both in the block cache (see memtableReservation).
func BenchmarkServerMixRead(b *testing.B) {
	for _, cfg := range serverMixConfigs {
		for _, puts := range []int{0, 30_000, 100_000, 200_000} {
			b.Run(fmt.Sprintf("%s/puts=%d", cfg.name, puts), func(b *testing.B) {
				e, m := openServerMix(b, cfg)
				for range puts / 15 {
					m.puts(b, e, 15)
				}
				waitQuiet(b, e)
				var sink int
				get := func(r Reader) error {
					v, closer, err := r.Get(m.userKey(m.rng.IntN(m.userKeys)))
					if err != nil {
						return err
					}
					sink += len(v)
					return closer.Close()
				}
				before := e.db.Metrics().BlockCache
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					v, err := e.NewReadView(1)
					if err != nil {
						b.Fatal(err)
					}
					if err := v.Read(get); err != nil {
						b.Fatal(err)
					}
					v.Release()
				}
				met := e.db.Metrics()
				b.ReportMetric(float64(met.BlockCache.Misses-before.Misses)/float64(b.N), "misses/read")
				b.ReportMetric(float64(met.BlockCache.Hits-before.Hits)/float64(b.N), "hits/read")
				b.ReportMetric(float64(met.MemTable.Count), "memtables")
				b.ReportMetric(float64(met.MemTable.Size>>20), "memtable-MiB")
				b.ReportMetric(float64(met.Levels[0].TablesCount), "L0-tables")
			})
		}
	}
}

// waitQuiet waits for the engine's flushes and compactions to end, so that
// a read benchmark does not time them.
func waitQuiet(b *testing.B, e *Engine) {
	for {
		m := e.db.Metrics()
		if m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling a condition; nothing to wait on
	}
}

// BenchmarkServerMixWrite is the engine's share of a put: one op is a batch
// of 15 puts (a Ready's worth) of the mix above, committed without sync;
// process-cpu-ns/op adds the background work it caused.
func BenchmarkServerMixWrite(b *testing.B) {
	for _, cfg := range serverMixConfigs {
		b.Run(cfg.name, func(b *testing.B) {
			e, m := openServerMix(b, cfg)
			m.walOnly = cfg.logWALOnly
			waitQuiet(b, e)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			for b.Loop() {
				m.puts(b, e, 15)
			}
			// The process's CPU time, the flushes and compactions the puts
			// caused included (waited for): what a memtable setting costs
			// a node in all.
			waitQuiet(b, e)
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "process-cpu-ns/op")
		})
	}
}

// serverMixConfig is one engine set-up the server-mix benchmarks compare.
type serverMixConfig struct {
	name     string
	tune     func(*pebble.Options)
	logApart bool
	// pebbleFlush leaves flushing to Pebble alone (the engine before its
	// flusher of queued memtables).
	pebbleFlush bool
	// logKeep, when set, replaces the host's log retention (keep 5,000
	// applied entries, truncate once 5,000 more piled up) with logKeep
	// for both.
	logKeep uint64
	// logWALOnly writes the raft log entries and hard state into the WAL
	// alone (Batch.LogData: synced as before, never in a memtable, never
	// flushed or compacted): the bound on what a raft log of its own, as
	// etcd's WAL keeps it, could save a put in the data engine.
	logWALOnly bool
}

var serverMixConfigs = []serverMixConfig{
	{"engine", nil, false, false, 0, false},
	// The engine before issue 14's storage work: Pebble's default cache,
	// 8 MiB shared with the memtables' reservations.
	{"cache=8MiB+pebble-flush", sharedCache(8 << 20), false, true, 0, false},
	// The engine before its cache made room for the memtables: 128 MiB
	// shared with them.
	{"cache=128MiB-shared", sharedCache(128 << 20), false, false, 0, false},
	{"cache=128MiB+pebble-flush", tune(64<<20, 128<<20), false, true, 0, false},
	{"memtable=32MiB", tune(32<<20, 0), false, false, 0, false},
	{"memtable=16MiB", tune(16<<20, 0), false, false, 0, false},
	{"memtable=8MiB", tune(8<<20, 0), false, false, 0, false},
	// L0 compacted later (Pebble's default: at 4 sublevels): more of the
	// raft log entries a flush wrote meet their truncation in one compaction.
	{"l0-threshold=8", func(o *pebble.Options) { o.L0CompactionThreshold = 8 }, false, false, 0, false},
	// L0 tables uncompressed: most of what is flushed (log entries) is
	// deleted again soon after.
	{"l0-uncompressed", func(o *pebble.Options) {
		o.Levels[0].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		for i := 1; i < len(o.Levels); i++ { // they would inherit L0's
			o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
		}
	}, false, false, 0, false},
	// Raft log entries truncated while most are still in the memtable:
	// the flush drops what a range deletion in the same memtable covers.
	{"raft-log-keep=1000", nil, false, false, 1000, false},
	{"memtable=4MiB", tune(4<<20, 0), false, false, 0, false},
	{"engine+log-apart", nil, true, false, 0, false},
	{"cache=8MiB+pebble-flush+log-apart", sharedCache(8 << 20), true, true, 0, false},
	{"engine+log-wal-only", nil, false, false, 0, true},
}

// stopFlusher stops e's flusher of queued memtables, for a benchmark of
// Pebble's own flushing.
func stopFlusher(e *Engine) {
	close(e.stopFlusher)
	<-e.flusherDone
	e.stopFlusher = make(chan struct{}) // for Close
}

// tune sets the memtable size and, if cache > 0, the blocks' share of the
// block cache (the engine adds the memtables' reservations to it).
func tune(memtable uint64, cache int64) func(*pebble.Options) {
	return func(o *pebble.Options) {
		o.MemTableSize = memtable
		if cache > 0 {
			o.CacheSize = cache
		}
	}
}

func mustMarshal(b *testing.B, m proto.Message) []byte {
	v, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// processCPU is the process's user and system CPU time in ns.
func processCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// sharedCache gives the engine a block cache of size bytes in all, which
// Pebble's memtable reservations share with the blocks.
func sharedCache(size int64) func(*pebble.Options) {
	return func(o *pebble.Options) {
		o.Cache = pebble.NewCache(size) // leaked: a benchmark's engine
	}
}
