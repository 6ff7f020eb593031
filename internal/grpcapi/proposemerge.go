package grpcapi

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/version"
)

// Write batches without a session that this node, as the shard's leader,
// proposes are merged too (as forwarded ones are, writemerge.go): while
// proposeSenders proposals of a shard are in flight, the batches that
// arrive queue and go as the next one, one raft entry for them all. The Redis
// port sends a batch per connection's write chain, and with random keys
// most chains hold one SET: pipelined SET through the leader was one raft
// entry per command (each encoded, logged, sent, decoded and applied on
// three nodes), and the entries, not the bytes, bounded the rate
// (docs/benchmarks.md, Redis run 6). The merged entry applies atomically,
// which no client can tell from its parts applying back to back; an op
// that fails fails alone, as in any batch; parts that write the same key
// apply in the order they arrived, and a client's next command on a key
// leaves only after the answer to its last.
//
// A merged proposal refused as a whole changed nothing: by raft before it
// reached the log (a leadership change) or by the state machine (an op it
// alone checks, such as a TTL the shard's clock cannot place). Each part
// then runs the ordinary path alone, so only a bad part gets the error
// and a dropped one is routed again. Any other error (an ambiguous outcome
// included) is every part's answer, as it would have been had each gone
// alone.

// proposeSenders bounds the merged proposals of one shard in flight at
// once. With one, the batches that arrive while a proposal is in flight
// wait for its outcome and then go together as the next entry: group
// commit, as the forwarding side (writemerge.go) does. A second sender
// overlaps two entries, so each carries about half as many writes, and
// every entry costs a fixed amount on all three nodes (an fsync each, the
// appends and acks, a loop turn or two: ~1.2 ms of CPU in all on the
// 2-core box) whatever it holds. Where CPU is the limit, as on that box
// under pipelined load, fewer and larger entries win: through the leader of
// redis-benchmark's one key, SET -P 16 ran 279-346k/s with one against
// 191-284k/s with two, in each of five alternating rounds, at 3.7-4.5
// against 4.7-6.9 µs of the servers' CPU per SET and a lower p50 (~300
// against ~195 SETs per entry); random-key and unpipelined SET were level
// (docs/benchmarks.md, Redis run 20). Earlier, with dearer entries, two
// had beaten four (run 13).
var proposeSenders = 1

// proposeMerged proposes the write batch ops of shard, which this node
// leads, with the others queued for it, and returns its own part of the
// answer, or errSendAlone.
func (s *KV) proposeMerged(ctx context.Context, shard ids.ShardID, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
	q := &queuedOps{ops: ops, done: make(chan queuedResult, 1)}
	s.pmerge.add(shard, q)
	// Proposed or not, it may still apply once the wait is cut short: the
	// context's error is then ambiguous, as for a proposal of its own.
	return awaitQueued(ctx, q)
}

// proposeOneMerged proposes the writes of batch as one command and
// answers each from its slice of the results.
func (s *KV) proposeOneMerged(shard ids.ShardID, batch []*queuedOps) {
	if batch = claim(batch); len(batch) == 0 {
		return
	}
	if _, local := s.b.Leader(shard); !local {
		answerAll(batch, queuedResult{err: errSendAlone})
		return
	}
	ops := batch[0].ops
	if len(batch) > 1 {
		ops = mergedOps(batch)
	}
	// Each write shrinkMerged leaves out still gets the result it would
	// have had (expandMerged).
	kept, runs, dropped := s.shrinkMerged(ops)
	// The waiters' own deadlines end their waits; the proposal is bounded
	// as a forwarded one is at its leader.
	ctx, cancel := context.WithTimeout(context.Background(), maxForwardTimeout)
	defer cancel()
	res, err := s.b.Propose(ctx, shard, s.kvCommand(nil, kept))
	switch {
	case err != nil && refusedBeforeLog(err):
		answerAll(batch, queuedResult{err: errSendAlone})
		return
	case err != nil:
		answerAll(batch, queuedResult{err: toStatus(err)})
		return
	case codes.Code(res.GetErrorCode()) != codes.OK && (len(batch) > 1 || dropped != nil || runs != nil):
		// Refused whole, nothing applied: each part alone, as it came, so
		// that the error (which names an op by position) is its own.
		answerAll(batch, queuedResult{err: errSendAlone})
		return
	case codes.Code(res.GetErrorCode()) != codes.OK:
		answerAll(batch, queuedResult{err: status.Error(codes.Code(res.GetErrorCode()), res.GetErrorMessage())})
		return
	}
	results := s.expandMerged(res.GetResults(), kept, runs, dropped, len(ops))
	switch {
	case len(results) != len(ops):
		answerAll(batch, queuedResult{err: status.Errorf(codes.Internal, "a merged write of %d ops (%d proposed) applied with %d results",
			len(ops), len(kept), len(res.GetResults()))})
	case len(batch) == 1:
		// Alone, it is answered as a batch proposed alone always was.
		batch[0].answer(header(s.b, shard), results)
	default:
		answerParts(batch, header(s.b, shard), results)
	}
}

// shrinkMerged is what a merged write proposes or forwards of ops: less
// the writes a later blind PUT of the same key overwrites unobserved
// (kv.Absorb: the rule and why it is safe), then with each run of INCRs of
// one key as one op (kv.Coalesce), once every replica applies such an op
// as the run (the cluster's version allows it). expandMerged undoes it.
// The leader's proposal and a node's forward shrink alike, so that both
// ask the version gate in one place.
func (s *KV) shrinkMerged(ops []*concordpb.Op) (kept []*concordpb.Op, runs []uint32, dropped []bool) {
	kept, dropped = kv.Absorb(ops)
	if s.b.ClusterVersion().Allows(version.IncrRepeat) {
		kept, runs = kv.Coalesce(kept)
	}
	return kept, runs, dropped
}

// expandMerged returns the results of the n merged ops from res, those of
// the kept ops proposed, undoing what was done to them in reverse: the
// runs of INCRs first (kv.ExpandRuns gives each of a run's INCRs its
// result, so there is one per op Absorb kept), then the absorbed writes
// (kv.Expand). Nil when the counts do not match. It counts what each did.
func (s *KV) expandMerged(res []*concordpb.OpResult, kept []*concordpb.Op, runs []uint32, dropped []bool, n int) []*concordpb.OpResult {
	if runs != nil {
		if res = kv.ExpandRuns(kept, res, runs); res != nil {
			s.coalesced.Add(uint64(len(res) - len(kept)))
		}
	}
	if dropped != nil && res != nil {
		s.absorbed.Add(uint64(n - len(res)))
		res = kv.Expand(res, dropped) // nil if the counts do not match
	}
	return res
}

// WritesAbsorbed is the number of writes this node, leading their shard,
// left out of merged proposals because a later blind PUT of the same key
// in the same command overwrote them unobserved (kv.Absorb).
func (s *KV) WritesAbsorbed() uint64 { return s.absorbed.Load() }

// IncrsCoalesced is the number of INCRs this node, leading their shard or
// forwarding to its leader, sent as part of a run of INCRs of one key that
// went as one op (kv.Coalesce), less one per run: the ops the runs saved.
func (s *KV) IncrsCoalesced() uint64 { return s.coalesced.Load() }

// mergedOps is the ops of batch's items in order, in one allocation (a
// merged batch of pipelined SETs holds hundreds).
func mergedOps(batch []*queuedOps) []*concordpb.Op {
	n := 0
	for _, q := range batch {
		n += len(q.ops)
	}
	ops := make([]*concordpb.Op, 0, n)
	for _, q := range batch {
		ops = append(ops, q.ops...)
	}
	return ops
}
