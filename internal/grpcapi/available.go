package grpcapi

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/version"
)

// Available mode (docs/architecture.md, "Available mode"): a plain Put or
// Delete whose header asks for AVAILABLE goes the ordinary way, bounded by
// the node's --available-timeout; if its shard cannot commit it in that
// time (no quorum, no leader, an outcome the node cannot know), the node
// keeps it in its hint log as a tentative write and answers
// ResponseHeader.tentative. The node's reconciler (internal/node) later
// proposes it with its version through Reconcile. A Get with AVAILABLE
// reads the node's hint of the key, if it holds one, else as STALE does.

// errAvailableOp refuses AVAILABLE on a request it does not apply to.
var errAvailableOp = invalid("available mode takes a plain Put or Delete of one key (no ttl, no return_prev; not a CompareAndSwap, nor a Batch that writes)")

// available is the node's side of available mode (WithAvailable).
type available struct {
	log     *hints.Log
	timeout time.Duration
	// onHeld is told of every write held, with its shard and whether the
	// log held none before (the node's WARN); nil: nothing.
	onHeld func(shard ids.ShardID, first bool)
	// allowed, when set, reports whether this node may hold a write now
	// (HoldOnlyWhile); nil: always.
	allowed func() bool
	// holding counts the writes past their ordinary attempt, from before
	// the allowed check until their Hold returned (HoldsInProgress).
	holding atomic.Int64
}

// WithAvailable turns available mode on: AVAILABLE writes that their
// shard does not commit within timeout are held in log (bounded by it),
// and AVAILABLE reads see them. Without it an AVAILABLE write is an
// ordinary one. Call it before the service serves.
func (s *KV) WithAvailable(log *hints.Log, timeout time.Duration, onHeld func(shard ids.ShardID, first bool)) *KV {
	s.avail = &available{log: log, timeout: timeout, onHeld: onHeld}
	return s
}

// HoldOnlyWhile makes the node hold a write only while ok reports true;
// otherwise the write fails as it would without available mode. The node
// passes "not leaving the cluster": a leaving node is marked removed once a
// heartbeat of it says it holds no tentative writes, and a write it held
// after that heartbeat would be lost with it. Call it after WithAvailable,
// before the service serves.
func (s *KV) HoldOnlyWhile(ok func() bool) *KV {
	if s.avail != nil {
		s.avail.allowed = ok
	}
	return s
}

// HoldsInProgress is the number of writes on their way into the hint log:
// past the HoldOnlyWhile check (or about to make it), their Hold not yet
// returned. A node reporting what it holds adds them to the log's count,
// read after its own state: a write that passed the check before the node
// learned it is leaving is then in one or the other, however long its
// Hold waits (for the log's lock, behind other holds' fsyncs), so the
// node is not removed under it.
func (s *KV) HoldsInProgress() int64 {
	if s.avail == nil {
		return 0
	}
	return s.avail.holding.Load()
}

func isAvailable(h *concordpb.RequestHeader) bool {
	return h.GetConsistency() == concordpb.Consistency_AVAILABLE
}

// linearizableHeader is h with the default consistency: what an AVAILABLE
// write's ordinary attempt carries (and what it is forwarded as).
func linearizableHeader(h *concordpb.RequestHeader) *concordpb.RequestHeader {
	return &concordpb.RequestHeader{SessionId: h.GetSessionId(), Seq: h.GetSeq(), SessionFloor: h.GetSessionFloor(), Hops: h.GetHops()}
}

// writeAvailable applies op, a PUT (no ttl, no return_prev) or a DELETE
// of one key, as an AVAILABLE write: committed if its shard does so
// within the available timeout (and the caller's deadline), else held.
func (s *KV) writeAvailable(ctx context.Context, h *concordpb.RequestHeader, op *concordpb.Op) (*concordpb.OpResult, *concordpb.ResponseHeader, error) {
	h = linearizableHeader(h)
	if s.avail == nil {
		return s.apply(ctx, h, op)
	}
	actx, cancel := context.WithTimeout(ctx, s.attemptTimeout(ctx))
	defer cancel()
	res, hdr, err := s.apply(actx, h, op) // committed, it drops an older hint of the key (priorHints)
	if err == nil || !s.mayHold(ctx, err) {
		return res, hdr, err
	}
	s.avail.holding.Add(1) // before the check: see HoldsInProgress
	defer s.avail.holding.Add(-1)
	if s.avail.allowed != nil && !s.avail.allowed() {
		return res, hdr, err
	}
	shard, serr := shardOf(s.b, op.GetKey())
	if serr != nil {
		return nil, nil, err
	}
	kind := hints.Put
	if op.GetType() == concordpb.OpType_OP_DELETE {
		kind = hints.Delete
	}
	// A full log (or one that cannot write) holds nothing: the client
	// gets what the commit attempt got, as without available mode.
	_, first, herr := s.avail.log.Hold(op.GetKey(), kind, op.GetValue())
	if herr != nil {
		return nil, nil, err
	}
	if s.avail.onHeld != nil {
		s.avail.onHeld(shard, first)
	}
	return &concordpb.OpResult{}, &concordpb.ResponseHeader{ShardId: uint64(shard), ServedByNodeId: uint64(s.b.ID()), Tentative: true}, nil
}

// priorHints are the hints this node holds of the keys ops write, read
// before a client's write batch goes: once it commits it is newer than
// each, so each goes (dropPriorHints), else this node's AVAILABLE reads
// would answer the older write, and its version, from a clock ahead,
// could still win over the committed one. Nothing is read while the log
// is empty: the hot path pays one atomic load.
func (s *KV) priorHints(ops []*concordpb.Op) ([]hints.Hint, error) {
	if s.avail == nil || s.avail.log.Count() == 0 {
		return nil, nil
	}
	var prior []hints.Hint
	for _, op := range ops {
		if op.GetType() == concordpb.OpType_OP_GET || op.GetType() == concordpb.OpType_OP_CHECK {
			continue
		}
		h, found, err := s.avail.log.Get(op.GetKey())
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reading the hint log: %v", err)
		}
		if found {
			prior = append(prior, h)
		}
	}
	return prior, nil
}

// dropPriorHints removes each of prior whose key an op of ops wrote
// (results: their answers), if no newer hint replaced it. An op that did
// not write (a condition not met, a CAS that did not match, an op error,
// an op skipped) leaves the hint: the tentative write is still to be
// reconciled.
func (s *KV) dropPriorHints(prior []hints.Hint, ops []*concordpb.Op, results []*concordpb.OpResult) {
	for _, h := range prior {
		for i, op := range ops {
			if i < len(results) && bytes.Equal(op.GetKey(), h.Key) && wrote(op, results[i]) {
				_, _ = s.avail.log.Remove(h.Key, h.Version)
				break
			}
		}
	}
}

// wrote reports whether op, answered res, wrote its key: a write without
// a condition that did not fail, or one whose condition held.
func wrote(op *concordpb.Op, res *concordpb.OpResult) bool {
	if res.GetError() != concordpb.OpError_OP_ERROR_NONE || res.GetSkipped() {
		return false
	}
	switch op.GetType() {
	case concordpb.OpType_OP_GET, concordpb.OpType_OP_CHECK, concordpb.OpType_OP_EXPIRE, concordpb.OpType_OP_DELETE_EXPIRED:
		return false
	case concordpb.OpType_OP_CAS:
		return res.GetOk()
	case concordpb.OpType_OP_PUT:
		return op.GetCondition() == concordpb.Condition_CONDITION_NONE || res.GetOk()
	}
	return true
}

// attemptTimeout bounds an AVAILABLE request's ordinary attempt: the
// node's --available-timeout, or three quarters of what is left of the
// caller's deadline if that is less, so that the node can still hold the
// write and answer before the caller gives up (the Go client's attempts
// are a third of the call's deadline: 1 s at 3 s).
func (s *KV) attemptTimeout(ctx context.Context) time.Duration {
	d := s.avail.timeout
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)*3/4)
	}
	return d
}

// mayHold reports whether a write that failed with err may be held as
// tentative: its shard could not take it (Unavailable), the available
// timeout passed (DeadlineExceeded while the caller's own context is
// live: the caller's deadline is the caller's answer), or its outcome is
// unknown (an "ambiguous" Unknown, or Canceled). A definite refusal
// (InvalidArgument, ResourceExhausted, FailedPrecondition, ...) is not:
// the write could never commit as it is. Nor is anything before the
// cluster's version allows versions: no replica could reconcile it.
func (s *KV) mayHold(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !s.b.ClusterVersion().Allows(version.Versions) {
		return false
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.Unknown, codes.Canceled:
		return strings.HasPrefix(st.Message(), "ambiguous")
	}
	return false
}

// hintedGet answers an AVAILABLE Get from this node's hint of the key, if
// it holds one: a put hint is found with its value (no expiry), a delete
// hint is not found. ok is false when there is no hint.
func (s *KV) hintedGet(key []byte, shard ids.ShardID) (resp *concordpb.GetResponse, ok bool, err error) {
	if s.avail == nil {
		return nil, false, nil
	}
	h, found, err := s.avail.log.Get(key)
	if err != nil {
		return nil, false, status.Errorf(codes.Unavailable, "reading the hint log: %v", err)
	}
	if !found {
		return nil, false, nil
	}
	return &concordpb.GetResponse{Header: &concordpb.ResponseHeader{ShardId: uint64(shard), ServedByNodeId: uint64(s.b.ID())},
		Found: h.Kind == hints.Put, Value: h.Value}, true, nil
}

// staleHeader is h asking for STALE: how an AVAILABLE read of a key this
// node holds no hint of is served (and forwarded).
func staleHeader(h *concordpb.RequestHeader) *concordpb.RequestHeader {
	c := proto.CloneOf(h)
	if c == nil {
		c = &concordpb.RequestHeader{}
	}
	c.Consistency = concordpb.Consistency_STALE
	return c
}

// availableAttempt runs read, a linearizable read, bounded by the
// available timeout: an AVAILABLE read is linearizable whenever its shard
// answers in that time, so a healthy cluster reads its own writes through
// any node. It returns read's answer, or nil and nil when the read may
// fall back to STALE instead: the shard could not answer (Unavailable, the
// timeout while the caller's own context is live, an ambiguous outcome).
// Without available mode on the node, nil and nil: the read is STALE.
func (s *KV) availableAttempt(ctx context.Context, read func(context.Context) (proto.Message, error)) (proto.Message, error) {
	if s.avail == nil {
		return nil, nil
	}
	actx, cancel := context.WithTimeout(ctx, s.attemptTimeout(ctx))
	defer cancel()
	resp, err := read(actx)
	if err == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	switch st := status.Convert(err); st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return nil, nil
	case codes.Unknown, codes.Canceled:
		if strings.HasPrefix(st.Message(), "ambiguous") {
			return nil, nil
		}
	}
	return nil, err
}

// availableReads serves a read-only batch with AVAILABLE: each key this
// node holds a hint of from the hint, as Get does; the others in one
// read, linearizable if their shard answers within the available timeout,
// else as STALE. A batch whose every key is hinted reads nothing (so a
// node cut off, with no replica of the shard, still answers it). Hint
// values count against the result budget (kv.MaxResultBytes) after the
// values read: one past it fails with OP_ERROR_RESULT_TOO_LARGE, as a read
// past it does.
func (s *KV) availableReads(ctx context.Context, req *concordpb.BatchRequest, shard ids.ShardID) (*concordpb.BatchResponse, error) {
	ops := req.GetOps()
	held := make([]*hints.Hint, len(ops))
	var rest []*concordpb.Op
	var restAt []int
	for i, op := range ops {
		if s.avail != nil {
			h, found, err := s.avail.log.Get(op.GetKey())
			if err != nil {
				return nil, status.Errorf(codes.Unavailable, "reading the hint log: %v", err)
			}
			if found {
				held[i] = &h
				continue
			}
		}
		rest, restAt = append(rest, op), append(restAt, i)
	}
	out := &concordpb.BatchResponse{Header: &concordpb.ResponseHeader{ShardId: uint64(shard), ServedByNodeId: uint64(s.b.ID())},
		Results: make([]*concordpb.OpResult, len(ops))}
	used := 0
	if len(rest) > 0 {
		resp, err := s.availableRead(ctx, req.GetHeader(), rest, shard)
		if err != nil {
			return nil, err
		}
		if len(resp.GetResults()) != len(rest) {
			return nil, status.Errorf(codes.Internal, "a read of %d keys answered %d results", len(rest), len(resp.GetResults()))
		}
		out.Header = resp.GetHeader()
		for j, r := range resp.GetResults() {
			out.Results[restAt[j]] = r
			used += len(r.GetValue())
		}
	}
	for i, h := range held {
		switch {
		case h == nil:
		case used+len(h.Value) > kv.MaxResultBytes:
			out.Results[i] = &concordpb.OpResult{Error: concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE}
		default:
			used += len(h.Value)
			out.Results[i] = &concordpb.OpResult{Ok: h.Kind == hints.Put, Value: h.Value}
		}
	}
	return out, nil
}

// availableRead reads ops, read-only, linearizable if their shard answers
// within the available timeout, else as STALE.
func (s *KV) availableRead(ctx context.Context, h *concordpb.RequestHeader, ops []*concordpb.Op, shard ids.ShardID) (*concordpb.BatchResponse, error) {
	lin := &concordpb.BatchRequest{Header: linearizableHeader(h), Ops: ops}
	m, err := s.availableAttempt(ctx, func(ctx context.Context) (proto.Message, error) { return s.readBatch(ctx, lin, shard) })
	if err != nil {
		return nil, err
	}
	if resp, ok := m.(*concordpb.BatchResponse); ok {
		return resp, nil
	}
	return s.readBatch(ctx, &concordpb.BatchRequest{Header: staleHeader(h), Ops: ops}, shard)
}

// Reconcile proposes ops, the tentative writes of one shard this node
// holds (each a PUT or DELETE with tentative_version), as one batch
// through the path a client's write takes (to the shard's leader), alone:
// never merged with other requests, whose blind PUTs a tentative op that
// may not apply must not absorb. Only the node's reconciler calls it: it
// is the one caller whose ops may carry tentative_version at hops 0.
func (s *KV) Reconcile(ctx context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
	return s.batch(ctx, &concordpb.BatchRequest{Ops: ops}, true)
}

// hasTentative reports whether an op carries tentative_version: such a
// batch is proposed alone (Reconcile).
func hasTentative(ops []*concordpb.Op) bool {
	for _, op := range ops {
		if op.GetTentativeVersion() != 0 {
			return true
		}
	}
	return false
}

// RefusedForGood reports whether err, the refusal of a batch Reconcile
// sent with one op, says the op can never apply as it is, so that the
// reconciler may drop its hint (node/reconcile.go, which drops it only if
// this node's own limits agree): InvalidArgument (its key or value over
// the limits, lowered since the write was held), but for the refusals in
// reconcileTransient, which say that the node that checked it was behind.
// Everything else may pass: Unavailable, DeadlineExceeded, an ambiguous
// outcome, the space alarm's ResourceExhausted (it clears), and
// FailedPrecondition, which no check of a reconciling batch returns.
//
// The refusals are told apart by their text. A mark of their kind (an
// errdetails.ErrorInfo, as transport's snapshot refusals carry) would not
// reach the reconciler: the shard's leader answers a forwarded batch over
// the peer request stream, whose StreamReply carries a code and a message
// only, and the state machine's refusal (storepb.CommandResult) a code and
// a message too; and a leader of an older binary in a rolling upgrade
// would answer unmarked all the same. So these texts are a contract
// between nodes: TestReconcileRefusals produces each refusal a
// reconciling op can get and checks its verdict, and fails when a
// rewording would change it.
func RefusedForGood(err error) bool {
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		return false
	}
	for _, t := range reconcileTransient {
		if strings.Contains(st.Message(), t) {
			return false
		}
	}
	return true
}

// reconcileTransient are texts of InvalidArgument refusals of a
// reconciling op that do not say the op is bad, but that the node which
// checked it was behind: its routing, after a split moved the key (the
// state machine's "key ... does not belong to shard N", checkBatch's
// "batch keys span shards"), or its cluster version or binary during an
// upgrade (checkOp's tentative_version gate, "once the cluster version
// allows it", and "a field this server does not know").
var reconcileTransient = []string{"does not belong to shard", "span shards", "cluster version", "does not know"}
