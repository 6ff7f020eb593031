package grpcapi

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
)

// TestFitBatch: a batch stops before the item that would pass the op or
// byte limit, but always takes one, however large.
func TestFitBatch(t *testing.T) {
	sizes := [][3]int{{maxBatchOps - 1, 10, 0}, {1, 10, 0}, {1, 10, 0}}
	size := func(i int) (int, int, int) { return sizes[i][0], sizes[i][1], sizes[i][2] }
	if n := fitBatch(len(sizes), size, 100); n != 2 {
		t.Fatalf("ops limit: %d items, want 2", n)
	}
	if n := fitBatch(len(sizes), size, 15); n != 1 {
		t.Fatalf("byte limit: %d items, want 1", n)
	}
	if n := fitBatch(1, func(int) (int, int, int) { return maxBatchOps + 5, 1 << 30, 1 << 40 }, 15); n != 1 {
		t.Fatalf("an oversized item: %d, want 1 (it goes alone)", n)
	}
	sizes = [][3]int{{1, 1, kv.MaxResultBytes - 5}, {1, 1, 5}, {1, 1, 1}}
	if n := fitBatch(len(sizes), size, 100); n != 2 {
		t.Fatalf("result budget: %d items, want 2 (the budget exactly)", n)
	}
}

// TestMergeQueueBatchesInOrder: items added while a batch is in flight go
// out together as the next batch, in the order they were added, and the
// sender stops once the queue is empty.
func TestMergeQueueBatchesInOrder(t *testing.T) {
	shard := ids.ShardID(7)
	gate := make(chan struct{})
	sent := make(chan []int, 4)
	send := func(_ ids.ShardID, b []int) { <-gate; sent <- append([]int(nil), b...) }
	all := func(w []int) int { return len(w) }
	m := mergeQueue[int]{fit: all, send: send}
	m.add(shard, 1)
	waitFor(t, func() bool { return m.waiting(shard) == 0 }) // 1 taken, held at the gate
	for i := 2; i <= 4; i++ {
		m.add(shard, i)
	}
	gate <- struct{}{}
	gate <- struct{}{}
	if b := <-sent; len(b) != 1 || b[0] != 1 {
		t.Fatalf("first batch %v, want [1]", b)
	}
	if b := <-sent; len(b) != 3 || b[0] != 2 || b[1] != 3 || b[2] != 4 {
		t.Fatalf("second batch %v, want [2 3 4]", b)
	}
	waitFor(t, func() bool { return m.waiting(shard) == -1 })
}

// TestMergeQueueSenders: with two senders allowed, an item that arrives
// while one is in flight goes out at once on a second; those added while
// both are in flight wait and go out together; and every sender stops
// once the queue is empty.
func TestMergeQueueSenders(t *testing.T) {
	shard := ids.ShardID(3)
	gate := make(chan struct{})
	sent := make(chan []int, 4)
	var inFlight atomic.Int32
	send := func(_ ids.ShardID, b []int) {
		inFlight.Add(1)
		<-gate
		inFlight.Add(-1)
		sent <- append([]int(nil), b...)
	}
	all := func(w []int) int { return len(w) }
	m := mergeQueue[int]{senders: 2, fit: all, send: send}
	m.add(shard, 1)
	waitFor(t, func() bool { return inFlight.Load() == 1 })
	m.add(shard, 2)
	waitFor(t, func() bool { return inFlight.Load() == 2 }) // a second sender took it
	for i := 3; i <= 5; i++ {
		m.add(shard, i)
	}
	if n := m.waiting(shard); n != 3 {
		t.Fatalf("%d waiting behind two senders in flight, want 3 (no third sender)", n)
	}
	var got [][]int
	for range 3 {
		gate <- struct{}{}
		got = append(got, <-sent)
	}
	slices.SortFunc(got, func(a, b []int) int { return a[0] - b[0] })
	if fmt.Sprint(got) != "[[1] [2] [3 4 5]]" {
		t.Fatalf("batches %v, want [1], [2] and [3 4 5]", got)
	}
	waitFor(t, func() bool { return m.waiting(shard) == -1 })
}
