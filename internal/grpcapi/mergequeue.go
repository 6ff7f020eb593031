package grpcapi

import (
	"sync"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
)

// mergeQueue is the mechanics that merged forwards of reads
// (readmerge.go) and of writes (writemerge.go) share: per shard, while
// one merged batch is in flight the items that arrive wait, and the
// sender goroutine takes them, as many as fit one batch, as its next
// batch. The sender runs only while the shard has items, so an idle shard
// costs no goroutine; it is started by the add that finds none running.
type mergeQueue[T any] struct {
	// senders bounds the senders one shard may run at once (0: one). With
	// one, a batch waits for the one before it to be answered; with more,
	// up to that many are in flight, and batches merge only beyond them.
	senders int
	// fit says how many of the waiting items (at least one) make the next
	// batch; send sends one batch of a shard. Fixed when the queue is
	// made, so that an add allocates no closures (two per add were 5 % of
	// the objects a Redis node forwarding pipelined SETs allocated).
	fit    func([]T) int
	send   func(ids.ShardID, []T)
	mu     sync.Mutex
	shards map[ids.ShardID]*shardQueue[T]
}

// shardQueue is one shard's waiting items and its running senders.
type shardQueue[T any] struct {
	sending int
	waiting []T
}

// add queues item for shard and starts a sender for the shard unless as
// many as allowed run. The sender calls m.send with each batch in turn.
func (m *mergeQueue[T]) add(shard ids.ShardID, item T) {
	m.mu.Lock()
	if m.shards == nil {
		m.shards = map[ids.ShardID]*shardQueue[T]{}
	}
	q := m.shards[shard]
	if q == nil {
		q = &shardQueue[T]{}
		m.shards[shard] = q
	}
	q.waiting = append(q.waiting, item)
	start := q.sending < max(1, m.senders)
	if start {
		q.sending++
	}
	m.mu.Unlock()
	if start {
		go m.drain(shard, q)
	}
}

// drain sends q's items, batch by batch, until none is left.
func (m *mergeQueue[T]) drain(shard ids.ShardID, q *shardQueue[T]) {
	for {
		m.mu.Lock()
		if len(q.waiting) == 0 {
			q.sending--
			m.mu.Unlock()
			return
		}
		n := max(1, min(m.fit(q.waiting), len(q.waiting)))
		batch := q.waiting[:n:n]
		q.waiting = q.waiting[n:]
		m.mu.Unlock()
		m.send(shard, batch)
	}
}

// waiting returns how many items of shard wait while a sender runs (a
// batch taken and in flight), or -1 when none runs: for
// tests that hold a batch in flight and queue others behind it.
func (m *mergeQueue[T]) waiting(shard ids.ShardID) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.shards[shard]; q != nil && q.sending > 0 {
		return len(q.waiting)
	}
	return -1
}

// fitBatch returns how many of the leading sizes (each one item's op
// count, bytes, and the bytes of stored values its results may return at
// worst) fit in one batch under maxBatchOps, limit bytes and the result
// budget (kv.MaxResultBytes); at least one, so that an item as large as a
// batch still goes (a client's batch over the budget is never split: its
// ops past the budget fail at apply, as they would alone).
func fitBatch(n int, size func(i int) (ops, bytes, results int), limit int) int {
	if limit == 0 {
		limit = DefaultMaxBatchBytes
	}
	ops, bytes, results := 0, 0, 0
	for i := 0; i < n; i++ {
		o, b, r := size(i)
		if i > 0 && (ops+o > maxBatchOps || bytes+b > limit || results+r > kv.MaxResultBytes) {
			return i
		}
		ops, bytes, results = ops+o, bytes+b, results+r
	}
	return n
}
