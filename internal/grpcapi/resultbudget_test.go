package grpcapi

import (
	"fmt"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/version"
)

// TestWritesCarryTheResultBudgetAtTheVersion: a leader's KV commands
// bound the stored values their results return (KVCommand.max_result_bytes)
// only once the cluster's version allows it: a replica of an older binary
// would apply the ops past the budget, answering otherwise (and stops on
// the field it does not know).
func TestWritesCarryTheResultBudgetAtTheVersion(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s := NewKV(f, testLimits)
	ops := []*concordpb.Op{{Type: concordpb.OpType_OP_GET_DELETE, Key: []byte("k")}}
	for _, v := range []version.Level{version.Base, version.IncrRepeat, version.ExpiryOnStamps, version.OrderedJoins, version.ResultBudget} {
		f.clusterVersion.Store(uint32(v))
		got := s.kvCommand(&concordpb.RequestHeader{}, ops).GetKv().GetMaxResultBytes()
		want := int64(0)
		if v >= version.ResultBudget {
			want = kv.MaxResultBytes
		}
		if got != want {
			t.Fatalf("at cluster version %d: max_result_bytes %d, want %d", v, got, want)
		}
	}
}

// TestMergedWritesFitTheResultBudget: the batches merged into one proposal
// return, at worst (each value-returning op a value of the size limit),
// no more than the result budget, so merging never fails an op that its
// batch alone would have applied; a client's batch over the budget at
// worst still goes whole, alone, never split.
func TestMergedWritesFitTheResultBudget(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	shard := f.shardOfKey("k")
	keys := keysOfShard(f, shard, 9)
	gate := make(chan struct{})
	f.proposeGate, f.echo = gate, true
	limits := testLimits
	limits.MaxValueBytes = 8 << 20 // 7 values of 8 MiB fit the budget (63 MiB), 8 do not
	s := NewKV(f, limits)
	s.pmerge.senders = 1
	queued := func() int { return s.pmerge.waiting(shard) }
	getdel := func(k string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_GET_DELETE, Key: []byte(k)}
	}

	first := sendBatch(s, nil, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(keys[0]), Value: []byte("v")})
	waitFor(t, func() bool { return queued() == 0 }) // taken, and blocked in its proposal
	var parts []chan batchAnswer
	for i, k := range keys {
		parts = append(parts, sendBatch(s, nil, getdel(k)))
		waitFor(t, func() bool { return queued() == i+1 })
	}
	var whole []*concordpb.Op
	for _, k := range keys {
		whole = append(whole, getdel(k))
	}
	big := sendBatch(s, nil, whole...) // 72 MiB at worst: over the budget alone
	waitFor(t, func() bool { return queued() == len(keys)+1 })
	// Let every proposal through, however many the merging makes.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case gate <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	checkAnswer(t, "first", first, keys[0])
	for i, p := range parts {
		checkAnswer(t, fmt.Sprint("part ", i), p, keys[i])
	}
	checkAnswer(t, "the whole batch", big, keys...)
	f.mu.Lock()
	var sizes []int
	for _, p := range f.proposals {
		sizes = append(sizes, len(p.GetKv().GetOps()))
	}
	f.mu.Unlock()
	// The first; seven parts (56 MiB at worst); the two left, which the
	// whole batch would take past the budget; the whole batch alone.
	if fmt.Sprint(sizes) != "[1 7 2 9]" {
		t.Fatalf("proposals of %v ops, want [1 7 2 9]", sizes)
	}
}
