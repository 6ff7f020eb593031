package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
)

// Write batches that this node forwards to a shard's leader are merged as
// forwarded reads are (readmerge.go): while one merged batch of a shard is
// in flight, the batches that arrive queue and go out together as the
// next one: one gRPC call and one raft proposal for them all. A Redis port
// on a node that does not lead the key's shard otherwise sent the leader
// one Batch per connection's write chain, and pipelined SET ran at half
// the rate it runs on the leader (docs/benchmarks.md). The merged batch
// applies atomically, which no client can tell from its parts applying
// back to back; an op that fails fails alone, as in any batch. Only
// batches from clients (hops 0) without a session merge: a session's
// sequence number covers exactly its own batch.
//
// A merged batch the leader refuses as a whole (bad input it alone
// checks) changed nothing: each part is then sent alone, so only a bad
// part gets the error. Any other error (an ambiguous outcome included) is
// every part's answer, as it would have been had each gone alone; a
// ResourceExhausted, which only gRPC answers a merged batch (a reply over
// the message limit, after the leader applied it), is answered as the
// ambiguous outcome it is (mergedWriteError).

// errSendAlone tells a queued write to run the ordinary path: the merged
// batch was refused as a whole, or this node leads the shard now.
var errSendAlone = errors.New("grpcapi: send the write batch alone")

// writeMergeable reports whether a write batch forwarded from here may
// join the shard's merged forwards.
func writeMergeable(h *concordpb.RequestHeader) bool {
	return h.GetSessionId() == 0 && h.GetHops() == 0
}

// forwardWriteMerged forwards the write batch ops of shard with the others
// queued for it, and returns its own part of the answer, or errSendAlone.
func (s *KV) forwardWriteMerged(ctx context.Context, shard ids.ShardID, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
	q := &queuedOps{ops: ops, done: make(chan queuedResult, 1)}
	s.wmerge.add(shard, q)
	return awaitQueued(ctx, q) // sent or not, a write cut short may still apply: as a forward cut short
}

// fitWrites returns how many of the queued writes fit in one batch,
// counting keys, values and expected values as checkBatch does, and each
// op that returns a stored value (kv.ReturnsValue) at its worst, the
// value size limit, against the result budget: a merged batch's ops never
// fail past the budget for having been merged (pipelined GETDELs of 1 MiB
// values from many connections would, 64 to an entry), where each part
// alone would have applied whole.
func (s *KV) fitWrites(waiting []*queuedOps) int {
	return fitBatch(len(waiting), func(i int) (int, int, int) {
		n, returning := 0, 0
		for _, op := range waiting[i].ops {
			n += len(op.GetKey()) + len(op.GetValue()) + len(op.GetExpected())
			if kv.ReturnsValue(op) {
				returning++
			}
		}
		return len(waiting[i].ops), n, returning * s.limits.MaxValueBytes
	}, s.limits.MaxBatchBytes)
}

// sendOneWriteMerged forwards the writes of batch as one Batch to the
// shard's leader and answers each from its slice of the results.
func (s *KV) sendOneWriteMerged(shard ids.ShardID, batch []*queuedOps) {
	if batch = claim(batch); len(batch) == 0 {
		return
	}
	leader, local := s.b.Leader(shard)
	if local {
		answerAll(batch, queuedResult{err: errSendAlone})
		return
	}
	ops := mergedOps(batch)
	// Shrunk here already, as the leader would: fewer bytes to send, and
	// the leader finds nothing more to drop. It takes a run of INCRs as
	// one op from a node (hops 1) and answers it with one result, expanded
	// here. A leader that has not learned the cluster's version yet
	// refuses the batch whole, and its parts go alone.
	kept, runs, dropped := s.shrinkMerged(ops)
	ctx, cancel := context.WithTimeout(context.Background(), maxForwardTimeout)
	defer cancel()
	var resp *concordpb.BatchResponse
	c, err := s.kvClientFor(leader, 0, shard)
	if err == nil {
		resp, err = forward(ctx, leader, func(ctx context.Context) (*concordpb.BatchResponse, error) {
			return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(&concordpb.RequestHeader{}), Ops: kept})
		})
	}
	if err != nil && (len(batch) > 1 || dropped != nil || runs != nil) && refusedWhole(err) {
		answerAll(batch, queuedResult{err: errSendAlone})
		return
	}
	var results []*concordpb.OpResult
	if err == nil {
		results = resp.GetResults()
		if len(results) == len(kept) {
			results = s.expandMerged(results, kept, runs, dropped, len(ops)) // nil if the counts do not match
		}
		if len(results) != len(ops) {
			err = status.Errorf(codes.Internal, "a merged write of %d ops (%d sent) answered with %d results", len(ops), len(kept), len(resp.GetResults()))
		}
	}
	if err != nil {
		answerAll(batch, queuedResult{err: mergedWriteError(err)})
		return
	}
	answerParts(batch, resp.GetHeader(), results)
}

// answerParts answers each of batch with its slice of res (as many
// results as it has ops, in batch order).
func answerParts(batch []*queuedOps, h *concordpb.ResponseHeader, res []*concordpb.OpResult) {
	for _, q := range batch {
		n := len(q.ops)
		q.answer(h, res[:n:n])
		res = res[n:]
	}
}

// answer answers q with its results, in its own response.
func (q *queuedOps) answer(h *concordpb.ResponseHeader, res []*concordpb.OpResult) {
	q.resp.Header, q.resp.Results = h, res
	q.done <- queuedResult{resp: &q.resp}
}

func answerAll(batch []*queuedOps, r queuedResult) {
	for _, q := range batch {
		q.done <- r
	}
}

// refusedWhole reports an error the leader returns for a batch before
// proposing it, or the state machine for a command it refused whole: bad
// input (InvalidArgument, checkBatch and kv's checks), so nothing of it
// applied. Nothing else is: ResourceExhausted in particular is also
// gRPC's answer to a reply larger than the forward's message limit, sent
// after the leader applied the batch (the client tells its shard's
// refusal by its text, client.windowFull; a batch without a session, as
// every merged one is, has no window to be refused by), and sending the
// parts again would apply them twice.
func refusedWhole(err error) bool {
	return status.Code(err) == codes.InvalidArgument
}

// mergedWriteError is a merged write's answer for err, the forward's
// error. ResourceExhausted came from gRPC (refusedWhole): the leader may
// have applied the batch, and a part alone would have fit, so each part
// is told its outcome is unknown (Unknown, "ambiguous", as toStatus
// answers a proposal's), not that something of its own was too large.
func mergedWriteError(err error) error {
	if status.Code(err) != codes.ResourceExhausted {
		return err
	}
	return status.Errorf(codes.Unknown, "ambiguous: the merged write batch's reply was not received (%s); it may or may not have applied",
		status.Convert(err).Message())
}
