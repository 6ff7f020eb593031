package grpcapi

import (
	"context"
	"sync/atomic"

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

// queuedOps is a batch waiting in a merge queue: its ops, and where its
// part of the merged answer goes.
type queuedOps struct {
	ops  []*concordpb.Op
	done chan queuedResult // buffered: the sender never blocks
	// state is queued, taken (by a write sender: it will be proposed or
	// forwarded) or abandoned (its waiter gave up first: it never will
	// be). Waiter and sender claim it with a compare-and-swap (claim,
	// awaitQueued), so a write whose waiter returned before it was taken is
	// never proposed later, behind writes made after that answer: an
	// available write held as tentative then (available.go) must not also
	// apply after them. Reads never take it: a late read changes nothing.
	state atomic.Uint32
	// resp is the item's answer when it succeeds (answerParts): part of
	// the item's allocation, not one more per item. The item is never
	// reused, so the waiter may keep it.
	resp concordpb.BatchResponse
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
	q := &queuedOps{ops: ops, done: make(chan queuedResult, 1)}
	s.merge.add(shard, q)
	return awaitQueued(ctx, q)
}

// awaitQueued waits for q's answer, or for ctx to end. A write cut short,
// sent or not, may still apply: its context error is ambiguous.
func awaitQueued(ctx context.Context, q *queuedOps) (*concordpb.BatchResponse, error) {
	select {
	case r := <-q.done:
		return r.resp, r.err
	case <-ctx.Done():
		if q.state.CompareAndSwap(queued, abandoned) {
			return nil, errAbandoned(ctx)
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// The states of a queued write (queuedOps.state).
const (
	queued uint32 = iota
	taken
	abandoned
)

// claim returns the items of batch a write sender may send: those it takes
// before their waiters abandon them. The others are neither sent nor
// answered.
// The batch is compacted in place (the queue no longer holds its items),
// so a batch taken whole, the common case, allocates nothing.
func claim(batch []*queuedOps) []*queuedOps {
	n := 0
	for _, q := range batch {
		if q.state.CompareAndSwap(queued, taken) {
			batch[n] = q
			n++
		}
	}
	return batch[:n]
}

// errAbandoned is the error of a queued write whose waiter gave up before
// a sender took it: it was never sent, so its outcome is known, whatever
// the context's error says; the message tells a reader so.
func errAbandoned(ctx context.Context) error {
	st := status.FromContextError(ctx.Err())
	return status.Errorf(st.Code(), "%s before the write was proposed: not applied", st.Message())
}

// fitReads returns how many of the queued reads fit in one batch.
func (s *KV) fitReads(waiting []*queuedOps) int {
	return fitBatch(len(waiting), func(i int) (int, int, int) {
		n := 0
		for _, op := range waiting[i].ops {
			n += len(op.GetKey())
		}
		// Reads are served without raft: no result budget applies.
		return len(waiting[i].ops), n, 0
	}, s.limits.MaxBatchBytes)
}

// sendOneMerged forwards the reads of batch as one Batch to the node the
// shard's linearizable reads go to now, and answers each from its slice of
// the results (or with the error).
func (s *KV) sendOneMerged(shard ids.ShardID, batch []*queuedOps) {
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
	c, err := s.kvClientFor(target, 0, shard)
	if err == nil {
		resp, err = forward(ctx, target, func(ctx context.Context) (*concordpb.BatchResponse, error) {
			return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(h), Ops: ops})
		})
	}
	if err == nil && len(resp.GetResults()) != len(ops) {
		err = status.Errorf(codes.Internal, "a merged read of %d keys answered with %d results", len(ops), len(resp.GetResults()))
	}
	if err != nil {
		answerAll(batch, queuedResult{err: err})
		return
	}
	answerParts(batch, resp.GetHeader(), resp.GetResults())
}
