package storage

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"

	"github.com/concord-kv/concord/internal/keys"
)

// turnMix builds batches like one turn of the host loop under puts: for
// each of `replicas` shards (in random order, as the loop's map gives
// them) its new log entries and hard state (Persist), then applying as many
// committed puts: a random user value each, a session record each (the
// client pool gives every request its own session), the shard clock and
// the applied state once (Apply).
type turnMix struct {
	shards, replicas, perReady, userKeys int
	logs                                 []*RaftLog
	next                                 []uint64
	rng                                  *rand.Rand
	val, entry, sess                     []byte
}

func newTurnMix(b *testing.B, e *Engine, shards, replicas, perReady int) *turnMix {
	m := &turnMix{shards: shards, replicas: replicas, perReady: perReady, userKeys: 10_000,
		next: make([]uint64, shards), rng: rand.New(rand.NewPCG(3, 4)),
		val: make([]byte, 260), entry: make([]byte, 330), sess: make([]byte, 24)}
	for s := range shards {
		l, err := LoadRaftLog(e.db, uint64ToShard(s))
		if err != nil {
			b.Fatal(err)
		}
		m.logs = append(m.logs, l)
		m.next[s] = 1
	}
	return m
}

// turn writes one turn into an indexed batch, as handleReady does.
func (m *turnMix) turn(b *testing.B, e *Engine) *pebble.Batch {
	batch := e.NewIndexedBatch()
	for _, s := range m.rng.Perm(m.shards)[:m.replicas] {
		shard := uint64(s + 1)
		ents := make([]*pb.Entry, m.perReady)
		for i := range ents {
			ents[i] = &pb.Entry{Term: new(uint64(1)), Index: new(m.next[s]), Data: m.entry}
			m.next[s]++
		}
		if err := m.logs[s].Append(batch, ents); err != nil {
			b.Fatal(err)
		}
		_ = SetProto(batch, keys.HardState(shard), &pb.HardState{Term: new(uint64(1)), Commit: new(m.next[s] - 1)})
		for range m.perReady {
			k := m.rng.IntN(m.userKeys)
			_ = batch.Set(keys.User(shard, fmt.Appendf(nil, "key-%012d", k)), m.val, nil)
			_ = batch.Set(keys.Session(shard, m.rng.Uint64()%1000), m.sess, nil)
		}
		_ = batch.Set(keys.Clock(shard), make([]byte, 16), nil)
		_ = batch.Set(keys.Applied(shard), make([]byte, 12), nil)
	}
	return batch
}

// BenchmarkTurnCommit is the engine commit of one loop turn's batch (8
// replicas of 16 shards, 3 puts each: 96 records) into a memtable that
// already holds the writes of `prefill` bytes of such turns. Turns alternate
// between a commit in batch order (as the host does), in key order
// (commitSorted) and copied into a fresh batch in batch order (the copy's
// own cost), into the same memtable, so that all see the same memtable and
// the same load on the box; each is timed (thread CPU time) on its own and
// reported per record.
func BenchmarkTurnCommit(b *testing.B) {
	for _, cfg := range []struct {
		name     string
		memtable uint64
		prefill  int
	}{
		// prefill: Pebble's memtables grow from 256 KiB to full size, so
		// about one full size is written before the first full-size one;
		// the rest fills it half way (64 MiB: ~140,000 records).
		{"memtable=16MiB", 16 << 20, 24 << 20},
		{"memtable=32MiB", 32 << 20, 48 << 20},
		{"memtable=64MiB", 64 << 20, 96 << 20},    // the engine's
		{"memtable=256MiB", 256 << 20, 460 << 20}, // ~900,000 records
	} {
		b.Run(cfg.name, func(b *testing.B) {
			e, err := openTuned(NewMemFS(), "/data", tune(cfg.memtable, 0))
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			m := newTurnMix(b, e, 16, 8, 3)
			for written := 0; written < cfg.prefill; {
				batch := m.turn(b, e)
				written += len(batch.Repr())
				if err := Commit(batch, false); err != nil {
					b.Fatal(err)
				}
				batch.Close()
			}
			waitQuiet(b, e)
			var spent, records [3]int64
			// Pebble applies a NoSync batch to the memtable (and copies it
			// into the WAL buffer) on the committing goroutine: its thread's
			// CPU time is the commit's cost without the waits for a CPU that
			// a shared box adds to wall time.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				batch := m.turn(b, e)
				mode := i % 3
				start := threadCPU(b)
				switch mode {
				case 0:
					err = Commit(batch, false)
				case 1:
					err = commitSorted(e, batch, false)
				case 2:
					err = commitCopy(e, batch)
				}
				if err != nil {
					b.Fatal(err)
				}
				spent[mode] += threadCPU(b) - start
				records[mode] += int64(batch.Count())
				batch.Close()
			}
			for mode, name := range []string{"batch-order", "key-order", "copied-batch-order"} {
				b.ReportMetric(float64(spent[mode])/float64(max(records[mode], 1)), name+"-cpu-ns/record")
			}
			b.ReportMetric(float64(e.db.Metrics().MemTable.Count), "memtables")
		})
	}
}

// commitCopy is commitSorted's copy without the sort: what the copy alone
// costs, so that the effect of the order shows apart from it.
func commitCopy(e *Engine, b *pebble.Batch) error {
	sb := e.db.NewBatchWithSize(len(b.Repr()))
	defer sb.Close()
	for r := b.Reader(); ; {
		kind, key, value, ok, err := r.Next()
		if err != nil || !ok {
			if err == nil {
				err = Commit(sb, false)
			}
			return err
		}
		if kind == pebble.InternalKeyKindSet {
			err = sb.Set(key, value, nil)
		} else {
			err = sb.Delete(key, nil)
		}
		if err != nil {
			return err
		}
	}
}

// threadCPU is the calling thread's CPU time in ns.
func threadCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}
