package kv

import (
	"fmt"
	"math/rand"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// Apply benchmark shape: what a put load at 100 clients looks like to one
// shard's state machine. benchKeys keys are stored first (16-byte keys,
// 256-byte values, as bench-compare's put rows); each command is one PUT
// of a random key by one of benchSessions sessions, its seq one more than
// that session's last; a batch of commands shares an indexed batch (one
// loop turn's apply), which is then flushed and committed without sync.
const (
	benchKeys     = 10_000
	benchSessions = 100
	benchValue    = 256
)

// benchBatches are the batch sizes BenchmarkApply runs: one command per
// loop turn (a lone client) up to the turns of a loaded shard. 32 is the
// size the earlier figures in docs/benchmarks.md were taken at.
var benchBatches = []int{1, 8, 32, 128}

// quiet drops Pebble's informational log lines, which would interleave
// with the benchmark's output.
type quiet struct{}

func (quiet) Infof(string, ...any)      {}
func (quiet) Errorf(f string, a ...any) { fmt.Printf(f+"\n", a...) }
func (quiet) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func benchKey(i int) []byte { return []byte(fmt.Sprintf("k%015d", i)) }

// benchDB returns an in-memory Pebble holding benchKeys keys of shard, put
// through the state machine itself.
func benchDB(b *testing.B) *pebble.DB {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	sm := New(shard)
	value := make([]byte, benchValue)
	for i := 0; i < benchKeys; i += 1000 {
		batch := db.NewIndexedBatch()
		for j := i; j < min(i+1000, benchKeys); j++ {
			if _, err := sm.Apply(batch, wholeRange, kvCmd(0, 0, 1, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: benchKey(j), Value: value})); err != nil {
				b.Fatal(err)
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
	return db
}

// benchApply applies b.N PUT commands built by op, perBatch per batch, and
// reports the time and allocations per command.
func benchApply(b *testing.B, perBatch int, op func(key, value []byte) *concordpb.Op) {
	benchApplyCmds(b, perBatch, false, op)
}

// benchApplyCmds is benchApply with versioned commands (KVCommand.versioned)
// when versioned.
func benchApplyCmds(b *testing.B, perBatch int, versioned bool, op func(key, value []byte) *concordpb.Op) {
	db := benchDB(b)
	sm := New(shard)
	rng := rand.New(rand.NewSource(1))
	value := make([]byte, benchValue)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	seqs := make([]uint64, benchSessions)
	cmds := make([]*storepb.Command, b.N) // built outside the timed loop
	stamp := int64(time.Hour)
	for i := range cmds {
		s := rng.Intn(benchSessions)
		seqs[s]++
		stamp += int64(10 * time.Microsecond)
		cmds[i] = kvCmd(uint64(s+1), seqs[s], stamp, op(benchKey(rng.Intn(benchKeys)), value))
		cmds[i].GetKv().Versioned = versioned
	}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	batch := db.NewIndexedBatch()
	writes := 0 // records committed: each one a memtable skiplist node
	for i, cmd := range cmds {
		res, err := sm.Apply(batch, wholeRange, cmd)
		if err != nil || res.GetErrorCode() != 0 {
			b.Fatalf("apply: %v %v", res, err)
		}
		if (i+1)%perBatch == 0 || i == len(cmds)-1 {
			if err := flushApplied(sm, batch); err != nil {
				b.Fatal(err)
			}
			writes += int(batch.Count())
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			batch = db.NewIndexedBatch()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	batch.Close()
}

// cpuTime is the CPU time the process has used (user and system, every
// thread: GC included). On a shared, busy machine the wall time per op
// also counts waiting for a core; cpu-ns/op does not.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkApply measures the state machine's apply of PUT commands with
// sessions, as the raft loop runs it: the cost issue 14's lean write path
// cuts (point reads of the session record, the shard clock and the previous
// value; the session and clock records written once per batch, so larger
// batches cost less per command).
func BenchmarkApply(b *testing.B) {
	for _, n := range benchBatches { // a blind PUT: what Put sends by default
		b.Run(fmt.Sprintf("put/batch=%d", n), func(b *testing.B) {
			benchApply(b, n, func(key, value []byte) *concordpb.Op {
				return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: key, Value: value}
			})
		})
	}
	b.Run("put-versioned/batch=32", func(b *testing.B) { // a blind PUT whose value carries a version
		benchApplyCmds(b, 32, true, func(key, value []byte) *concordpb.Op {
			return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: key, Value: value}
		})
	})
	b.Run("delete-versioned/batch=32", func(b *testing.B) { // a DELETE: its bucket record too
		benchApplyCmds(b, 32, true, func(key, _ []byte) *concordpb.Op {
			return &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: key}
		})
	})
	b.Run("delete/batch=32", func(b *testing.B) {
		benchApplyCmds(b, 32, false, func(key, _ []byte) *concordpb.Op {
			return &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: key}
		})
	})
	b.Run("put-prev/batch=32", func(b *testing.B) { // a PUT that returns the previous value
		benchApply(b, 32, func(key, value []byte) *concordpb.Op {
			return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: key, Value: value, ReturnPrev: true}
		})
	})
}
