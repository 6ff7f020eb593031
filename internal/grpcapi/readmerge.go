package grpcapi

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// Read-only batches that this node forwards to a shard's leader are merged:
// while one merged batch of a shard is in flight, the batches that arrive
// queue, and go out together as the next one, one request (one read
// barrier at the leader, one view) for them all. A follower's RESP port
// under pipelined GETs otherwise sent the leader one Batch per client
// pipeline, each with its own gRPC call and barrier. Each read stays
// linearizable: the batch that carries it leaves after it arrived, so the
// leader's barrier for it is confirmed after the read began. Only batches
// that arrive from clients (hops 0) at the default consistency merge; a
// stale or already forwarded one goes alone, as before.

// readMerger holds the queue of forwarded reads of each shard.
type readMerger struct {
	mu     sync.Mutex
	queues map[ids.ShardID]*readQueue
}

// readQueue is one shard's forwarded reads: sending while a merged batch
// is in flight (its goroutine runs until the queue is empty).
type readQueue struct {
	sending bool
	waiting []*queuedRead
}

type queuedRead struct {
	ops  []*concordpb.Op
	done chan queuedResult // buffered: the sender never blocks
}

type queuedResult struct {
	resp *concordpb.BatchResponse
	err  error
}

// mergeable reports whether a read-only batch not served here may join the
// shard's merged forwards.
func mergeable(h *concordpb.RequestHeader) bool {
	return h.GetConsistency() == concordpb.Consistency_LINEARIZABLE && h.GetHops() == 0
}

// forwardMerged forwards the read-only batch ops of shard with the others
// queued for the shard, and returns its own part of the answer.
func (s *KV) forwardMerged(ctx context.Context, shard ids.ShardID, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
	q := &queuedRead{ops: ops, done: make(chan queuedResult, 1)}
	m := &s.merge
	m.mu.Lock()
	if m.queues == nil {
		m.queues = map[ids.ShardID]*readQueue{}
	}
	rq := m.queues[shard]
	if rq == nil {
		rq = &readQueue{}
		m.queues[shard] = rq
	}
	rq.waiting = append(rq.waiting, q)
	start := !rq.sending
	rq.sending = true
	m.mu.Unlock()
	if start {
		go s.sendMerged(shard, rq)
	}
	select {
	case r := <-q.done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// sendMerged sends the shard's queued reads, as merged batches, until none
// is left.
func (s *KV) sendMerged(shard ids.ShardID, rq *readQueue) {
	for {
		s.merge.mu.Lock()
		batch := takeMerged(rq, s.limits)
		if len(batch) == 0 {
			rq.sending = false
			s.merge.mu.Unlock()
			return
		}
		s.merge.mu.Unlock()
		s.sendOneMerged(shard, batch)
	}
}

// takeMerged takes the queued reads that fit in one batch (at least one).
func takeMerged(rq *readQueue, l Limits) []*queuedRead {
	ops, size, n := 0, 0, 0
	limit := l.MaxBatchBytes
	if limit == 0 {
		limit = DefaultMaxBatchBytes
	}
	for _, q := range rq.waiting {
		qsize := 0
		for _, op := range q.ops {
			qsize += len(op.GetKey())
		}
		if n > 0 && (ops+len(q.ops) > maxBatchOps || size+qsize > limit) {
			break
		}
		ops, size, n = ops+len(q.ops), size+qsize, n+1
	}
	batch := rq.waiting[:n:n]
	rq.waiting = rq.waiting[n:]
	return batch
}

// sendOneMerged forwards the reads of batch as one Batch to the node the
// shard's linearizable reads go to now, and answers each from its slice of
// the results (or with the error).
func (s *KV) sendOneMerged(shard ids.ShardID, batch []*queuedRead) {
	var ops []*concordpb.Op
	for _, q := range batch {
		ops = append(ops, q.ops...)
	}
	// The waiters' own deadlines end their waits; the batch is bounded as
	// any forward is.
	ctx, cancel := context.WithTimeout(context.Background(), maxForwardTimeout)
	defer cancel()
	h := &concordpb.RequestHeader{}
	target := s.readTarget(h, shard)
	var resp *concordpb.BatchResponse
	c, err := kvClientFor(s.b, target, 0, shard)
	if err == nil {
		resp, err = forward(ctx, target, func(ctx context.Context) (*concordpb.BatchResponse, error) {
			return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(h), Ops: ops})
		})
	}
	if err == nil && len(resp.GetResults()) != len(ops) {
		err = status.Errorf(codes.Internal, "a merged read of %d keys answered with %d results", len(ops), len(resp.GetResults()))
	}
	res := resp.GetResults()
	for _, q := range batch {
		if err != nil {
			q.done <- queuedResult{err: err}
			continue
		}
		q.done <- queuedResult{resp: &concordpb.BatchResponse{Header: resp.GetHeader(), Results: res[:len(q.ops):len(q.ops)]}}
		res = res[len(q.ops):]
	}
}
