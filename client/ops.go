package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
)

// ReadOption changes how a read is served.
type ReadOption func(*concordpb.RequestHeader)

// Stale serves a read from the local replica of the node that receives it,
// one of the endpoints the client was given (any other node if none of them
// answers): it does not wait for a quorum and may return an older value.
func Stale() ReadOption {
	return func(h *concordpb.RequestHeader) { h.Consistency = concordpb.Consistency_STALE }
}

// Available reads through one of the endpoints the client was given (as
// Stale does) in available mode: the node that serves it answers from the
// tentative write of the key it holds, if any (PutAvailable,
// DeleteAvailable: a held put is found with its value, a held delete is
// not found); otherwise the read is linearizable when the key's shard
// answers within the node's --available-timeout, and reads the node's
// replica, as Stale, when it cannot. Other nodes do not see a tentative
// write until it is reconciled.
func Available() ReadOption {
	return func(h *concordpb.RequestHeader) { h.Consistency = concordpb.Consistency_AVAILABLE }
}

func readConsistency(opts []ReadOption) concordpb.Consistency {
	h := &concordpb.RequestHeader{}
	for _, o := range opts {
		o(h)
	}
	return h.GetConsistency()
}

// Get returns the value of key and whether it exists. Reads are
// linearizable unless Stale is given.
func (c *Client) Get(ctx context.Context, key []byte, opts ...ReadOption) (value []byte, found bool, err error) {
	value, _, found, err = c.GetWithExpiry(ctx, key, opts...)
	return value, found, err
}

// GetWithExpiry is Get that also returns when the key expires (the zero
// time: never). A key whose expiry has passed, by the clock of the node that
// serves the read, does not exist.
func (c *Client) GetWithExpiry(ctx context.Context, key []byte, opts ...ReadOption) (value []byte, expireAt time.Time, found bool, err error) {
	err = c.call(ctx, key, read, readConsistency(opts), func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err := kv.Get(ctx, &concordpb.GetRequest{Header: h, Key: key})
		value, found = resp.GetValue(), resp.GetFound()
		if ms := resp.GetExpireAtUnixMs(); ms != 0 {
			expireAt = time.UnixMilli(ms)
		}
		return resp.GetHeader(), err
	})
	return value, expireAt, found, err
}

// PutOption changes what a Put stores.
type PutOption func(*concordpb.PutRequest)

// TTL makes the key expire ttl after the shard's leader applies the put
// (rounded up to a whole millisecond): from then on it does not exist, and
// the shard's sweep deletes it. Without TTL a Put removes any expiry the key
// had. A ttl that is not positive is refused (InvalidArgument).
func TTL(ttl time.Duration) PutOption {
	ms := ttl.Milliseconds()
	if ttl > time.Duration(ms)*time.Millisecond {
		ms++ // round a positive fraction up: 0 would mean "no expiry"
	}
	if ttl <= 0 {
		ms = min(ms, -1)
	}
	return func(r *concordpb.PutRequest) { r.TtlMs = ms }
}

// errBadTTL is Put's error for TTL(d) with d not positive.
var errBadTTL = status.Error(codes.InvalidArgument, "concord: TTL must be positive (leave TTL out for a key that never expires)")

// ReturnPrev makes Put return the previous value and whether one existed.
// Without it Put returns nil and false whatever was there: the shard does
// not read the key before writing it (a blind write, the cheaper put).
func ReturnPrev() PutOption {
	return func(r *concordpb.PutRequest) { r.ReturnPrev = true }
}

// Put stores value under key. With ReturnPrev it also returns the previous
// value, if one existed; without it prev is nil and existed false.
func (c *Client) Put(ctx context.Context, key, value []byte, opts ...PutOption) (prev []byte, existed bool, err error) {
	if err := checkRequestBytes(len(key) + len(value)); err != nil {
		return nil, false, err
	}
	req := &concordpb.PutRequest{Key: key, Value: value}
	for _, o := range opts {
		o(req)
	}
	if req.TtlMs < 0 {
		// TTL(d) of a d not positive: refused here, before anything is
		// sent. The node's refusal named "operation 0" and said "must not
		// be negative", which TTL(0) is not.
		return nil, false, errBadTTL
	}
	kind := blindWrite // a result of a few bytes: the windowed session
	if req.ReturnPrev {
		kind = mutate
	}
	// One request for the attempts with the same header. A sent message
	// may be read late (gRPC; a stream's sender encoding a call its caller
	// gave up on), so it is never changed: a retry with another header (a
	// windowed session's higher floor) gets a copy.
	err = c.call(ctx, key, kind, 0, func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		if req.Header != h {
			if req.Header != nil {
				req = proto.CloneOf(req)
			}
			req.Header = h
		}
		resp, err := kv.Put(ctx, req)
		prev, existed = resp.GetPrevValue(), resp.GetPrevExists()
		return resp.GetHeader(), err
	})
	return prev, existed, err
}

// PutAvailable stores value under key in available mode
// (docs/architecture.md, "Available mode"), through one of the endpoints
// the client was given, or, if none answers, any node of the cluster the
// client has learned of (so the node that holds it may be one the caller
// did not name: PutAvailableHeldBy says which). If the key's shard
// commits it within the node's --available-timeout, it is an ordinary put
// and tentative is false. If the shard cannot (no quorum), the node holds
// it as a tentative write, durable on that node, and tentative is true:
// the node proposes it when the shard has a quorum again, and there the
// newest version of the key wins, so it may be superseded by a later
// write, and reads through other nodes do not see it until then. A
// definite refusal (a bad key, the space alarm) is returned as for Put.
func (c *Client) PutAvailable(ctx context.Context, key, value []byte) (tentative bool, err error) {
	heldBy, err := c.PutAvailableHeldBy(ctx, key, value)
	return heldBy != 0, err
}

// PutAvailableHeldBy is PutAvailable that says which node holds the write
// when it is tentative: its id, or 0 when the shard committed it.
func (c *Client) PutAvailableHeldBy(ctx context.Context, key, value []byte) (heldBy uint64, err error) {
	if err := checkRequestBytes(len(key) + len(value)); err != nil {
		return 0, err
	}
	err = c.call(ctx, key, blindWrite, concordpb.Consistency_AVAILABLE, func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err := kv.Put(ctx, &concordpb.PutRequest{Header: h, Key: key, Value: value})
		heldBy = heldByOf(resp.GetHeader())
		return resp.GetHeader(), err
	})
	return heldBy, err
}

// DeleteAvailable deletes key in available mode, as PutAvailable stores.
// It does not say whether the key existed.
func (c *Client) DeleteAvailable(ctx context.Context, key []byte) (tentative bool, err error) {
	heldBy, err := c.DeleteAvailableHeldBy(ctx, key)
	return heldBy != 0, err
}

// DeleteAvailableHeldBy is DeleteAvailable that says which node holds the
// delete when it is tentative (0: committed).
func (c *Client) DeleteAvailableHeldBy(ctx context.Context, key []byte) (heldBy uint64, err error) {
	err = c.call(ctx, key, blindWrite, concordpb.Consistency_AVAILABLE, func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err := kv.Delete(ctx, &concordpb.DeleteRequest{Header: h, Key: key})
		heldBy = heldByOf(resp.GetHeader())
		return resp.GetHeader(), err
	})
	return heldBy, err
}

// heldByOf is the node holding a tentative write's answer (0: committed).
func heldByOf(h *concordpb.ResponseHeader) uint64 {
	if !h.GetTentative() {
		return 0
	}
	return max(h.GetServedByNodeId(), 1) // a node always names itself; never read "held" as 0
}

// maxRequestBytes is the most key and value bytes one write may carry:
// a node refuses a larger message whole (dial.MaxMsgBytes, less room for
// the rest of the request), and on a stream that breaks the stream, so
// the write would end ErrAmbiguous after retries that resend it, though
// nothing could have applied. A node's own limits (--max-value-bytes, 8
// MiB of keys and values per batch) are lower and answered by the node.
const maxRequestBytes = dial.MaxMsgBytes - 64<<10

// opOverhead bounds what an op of a batch adds to its message beyond its
// key, value and expected value: its tag, length prefixes (up to 5 bytes
// each), type, delta, TTL and flags. Counted so that a batch of many small
// ops cannot pass the message limit under the check.
const opOverhead = 64

// checkRequestBytes refuses a write of n key and value bytes past
// maxRequestBytes before anything is sent (InvalidArgument: nothing
// applied).
func checkRequestBytes(n int) error {
	if n > maxRequestBytes {
		return status.Errorf(codes.InvalidArgument, "request is %d bytes of keys and values; a node takes at most %d in one message "+
			"(and a value at most its --max-value-bytes)", n, maxRequestBytes)
	}
	return nil
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(ctx context.Context, key []byte) (existed bool, err error) {
	err = c.call(ctx, key, blindWrite, 0, func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err := kv.Delete(ctx, &concordpb.DeleteRequest{Header: h, Key: key})
		existed = resp.GetExisted()
		return resp.GetHeader(), err
	})
	return existed, err
}

// CAS describes a compare-and-swap: the swap happens when the key is absent
// (ExpectAbsent) or holds exactly Expected; it then stores Value, or deletes
// the key if Delete is set. A swap that stores Value clears the key's
// expiry, as a Put without TTL does.
type CAS struct {
	Expected     []byte
	ExpectAbsent bool
	Value        []byte
	Delete       bool
}

// CASResult is the outcome of a compare-and-swap.
type CASResult struct {
	Swapped bool
	// The key's state before the operation.
	CurrentExists bool
	CurrentValue  []byte
}

// CompareAndSwap applies cas to key atomically.
func (c *Client) CompareAndSwap(ctx context.Context, key []byte, cas CAS) (res CASResult, err error) {
	if err := checkRequestBytes(len(key) + len(cas.Expected) + len(cas.Value)); err != nil {
		return CASResult{}, err
	}
	err = c.call(ctx, key, mutate, 0, func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err := kv.CompareAndSwap(ctx, &concordpb.CompareAndSwapRequest{Header: h, Key: key,
			Expected: cas.Expected, ExpectAbsent: cas.ExpectAbsent, Value: cas.Value, Delete: cas.Delete})
		res = CASResult{Swapped: resp.GetSucceeded(), CurrentExists: resp.GetCurrentExists(), CurrentValue: resp.GetCurrentValue()}
		return resp.GetHeader(), err
	})
	return res, err
}

// Batch applies ops (whose keys must all belong to one shard) atomically.
// A batch of GETs alone is a read: sent without a session (a node serves it
// from one linearizable view of the shard) and never ErrAmbiguous. An op
// may fail alone while the others apply: OpErr says why (a GET whose
// value would take the batch's results past the 63 MiB one batch returns
// has no value, and ErrResultTooLarge, not a missing key).
func (c *Client) Batch(ctx context.Context, ops []*concordpb.Op) (results []*concordpb.OpResult, err error) {
	n := 0
	for _, op := range ops {
		n += opOverhead + len(op.GetKey()) + len(op.GetValue()) + len(op.GetExpected())
	}
	if err := checkRequestBytes(n); err != nil {
		return nil, err
	}
	var key []byte
	if len(ops) > 0 {
		key = ops[0].GetKey()
	}
	kind := read
	for _, op := range ops {
		if op.GetType() != concordpb.OpType_OP_GET {
			kind = mutate
			break
		}
	}
	if len(ops) == 0 {
		kind = mutate // refused by the node either way
	}
	err = c.call(ctx, key, kind, 0, func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err := kv.Batch(ctx, &concordpb.BatchRequest{Header: h, Ops: ops})
		results = resp.GetResults()
		return resp.GetHeader(), err
	})
	return results, err
}

// KeyValue is one pair returned by Scan.
type KeyValue struct {
	Key, Value []byte
}

// Scan returns up to limit pairs with keys in [start, end) in key order
// across all shards (an empty end means no bound; limit 0 means no limit),
// fetching pages as needed. A negative limit is refused (InvalidArgument).
func (c *Client) Scan(ctx context.Context, start, end []byte, limit int, opts ...ReadOption) ([]KeyValue, error) {
	if limit < 0 {
		// Refused here: as a page size it would wrap to a huge one, read
		// as no limit at all.
		return nil, status.Errorf(codes.InvalidArgument, "scan limit %d is negative (0 means no limit)", limit)
	}
	var out []KeyValue
	for {
		page := uint32(1000)
		if limit > 0 {
			page = uint32(min(limit-len(out), 1000))
		}
		resp, err := c.ScanPage(ctx, start, end, page, opts...)
		if err != nil {
			return out, err
		}
		for _, kv := range resp.GetKvs() {
			out = append(out, KeyValue{Key: kv.GetKey(), Value: kv.GetValue()})
		}
		if !resp.GetMore() || (limit > 0 && len(out) >= limit) || len(resp.GetNextStart()) == 0 {
			return out, nil
		}
		if bytes.Compare(resp.GetNextStart(), start) <= 0 {
			return out, nil // defensive: never loop on a page that does not advance
		}
		start = resp.GetNextStart()
	}
}

// ScanPage returns one page of a scan, as the server sends it.
func (c *Client) ScanPage(ctx context.Context, start, end []byte, limit uint32, opts ...ReadOption) (resp *concordpb.ScanResponse, err error) {
	err = c.call(ctx, start, read, readConsistency(opts), func(ctx context.Context, kv concordpb.KVClient, h *concordpb.RequestHeader) (*concordpb.ResponseHeader, error) {
		resp, err = kv.Scan(ctx, &concordpb.ScanRequest{Header: h, Start: start, End: end, Limit: limit})
		return nil, err
	})
	return resp, err
}

// RoutingTable returns the cluster's nodes and shards as a node reports them.
func (c *Client) RoutingTable(ctx context.Context) (rt *concordpb.RoutingTableResponse, err error) {
	err = c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		rt, err = concordpb.NewClusterClient(conn).RoutingTable(ctx, &concordpb.RoutingTableRequest{})
		return err
	})
	return rt, err
}

// Status returns the cluster's status as the placement leader sees it,
// once it has confirmed that it leads (linearizable, as etcd's member list
// is).
func (c *Client) Status(ctx context.Context) (*concordpb.StatusResponse, error) {
	return c.status(ctx, &concordpb.StatusRequest{})
}

// StaleStatus is Status without the placement leader's confirmation, and
// with the answering node's own view if it cannot reach the placement
// leader: a deposed leader's, or a cut-off node's, may be old. It answers
// where Status cannot: without a quorum of the meta shard.
func (c *Client) StaleStatus(ctx context.Context) (*concordpb.StatusResponse, error) {
	return c.status(ctx, &concordpb.StatusRequest{Stale: true})
}

// status asks the nodes in turn, and asks them all again, with backoff,
// while every one answers Unavailable, until ctx's deadline (DefaultTimeout
// if none). A linearizable status needs a placement leader that can
// confirm it leads: for the election after the leader's node died, every
// node answers Unavailable, and a caller that asked then (`concord status`
// right after a crash) wants the answer once the election is over, as a
// KV call does.
func (c *Client) status(ctx context.Context, req *concordpb.StatusRequest) (st *concordpb.StatusResponse, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	for attempt := 0; ; attempt++ {
		err = c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			st, err = concordpb.NewClusterClient(conn).Status(ctx, req)
			return err
		})
		if err == nil || ctx.Err() != nil || status.Code(err) != codes.Unavailable {
			return st, err
		}
		if werr := sleep(ctx, backoff(attempt), deadline); werr != nil {
			return nil, expired(werr, err)
		}
	}
}

// anyNode calls f on each known node in turn until one call succeeds, each
// call bounded by the attempt timeout so that a stalled node does not take
// the others' turn.
func (c *Client) anyNode(ctx context.Context, f func(context.Context, *grpc.ClientConn) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	per := c.attemptTimeout(time.Until(deadline))
	var lastErr error // nil: a context done before the first node is asked ends the call with its error alone
	for _, addr := range c.candidates() {
		if ctx.Err() != nil {
			return expired(ctx.Err(), lastErr)
		}
		conn, err := c.conn(addr)
		if err == nil {
			actx, cancel := attemptContext(ctx, per)
			err = f(actx, conn)
			cancel()
			var final finalError
			if errors.As(err, &final) {
				return finalError{ended(ctx, final.err)}
			}
			if err == nil {
				return nil
			}
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("concord: no node known")
	}
	// The last node's attempt may have run into the call's deadline: a
	// gRPC DeadlineExceeded, which errors.Is does not take for the
	// context's.
	return ended(ctx, lastErr)
}

// TransferLeader asks the cluster to hand shard's leadership to its voter
// on node, and returns once it moved. Any node takes the request and
// forwards it to the shard's leader; only a node that could not take it at
// all (Unavailable) makes the client try the next.
func (c *Client) TransferLeader(ctx context.Context, shard, node uint64) (resp *concordpb.TransferLeaderResponse, err error) {
	err = c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		resp, err = concordpb.NewClusterClient(conn).TransferLeader(ctx, &concordpb.TransferLeaderRequest{ShardId: shard, NodeId: node})
		return stopUnlessUnavailable(err)
	})
	return resp, unwrapFinal(err)
}

// ChangeReplicas makes one membership change (see the Cluster service),
// forwarded to the shard's leader like TransferLeader. Only a node that
// refused the request, or was never reached, makes the client try the
// next. A request that was sent and got no answer (the connection to the
// node, or the node's forward to the leader, broke; an attempt timed out)
// may have been made: the call stops with an error wrapping ErrAmbiguous,
// for the caller to read the shard's descriptor before asking again. Set
// req's planned_epoch too: a repeat is then refused (Aborted) instead of
// made twice.
func (c *Client) ChangeReplicas(ctx context.Context, req *concordpb.ChangeReplicasRequest) (resp *concordpb.ChangeReplicasResponse, err error) {
	err = c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var tr metadata.MD
		resp, err = concordpb.NewClusterClient(conn).ChangeReplicas(ctx, req, grpc.Trailer(&tr))
		if sentUnanswered(err, tr) {
			return finalError{fmt.Errorf("%w: %w", ErrAmbiguous, err)}
		}
		return stopUnlessUnavailable(err)
	})
	return resp, unwrapFinal(err)
}

// answeredKey is the trailer a node sets on every error it answers
// (grpcapi.MarkAnswered).
const answeredKey = "concord-answered"

// sentUnanswered reports whether a Cluster call that failed with err (and
// trailer tr) may have been carried out: it timed out, or it is an
// Unavailable that is neither a node's refusal (marked answered, and not
// a forward that says it was sent) nor a connection never made. A node of
// a binary before the mark answers unmarked: its refusals read as
// unanswered, which stops a call that could have gone on, never the other
// way round.
func sentUnanswered(err error, tr metadata.MD) bool {
	st := status.Convert(err)
	switch st.Code() {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	case codes.Unavailable:
	default:
		return false
	}
	for _, m := range []string{"after the request was sent", "may have received the request"} {
		if strings.Contains(st.Message(), m) {
			return true // a forward that broke or stalled after sending
		}
	}
	return len(tr.Get(answeredKey)) == 0 && !notSent(err)
}

// finalError is an answer anyNode must not retry elsewhere.
type finalError struct{ err error }

func (f finalError) Error() string { return f.err.Error() }
func (f finalError) Unwrap() error { return f.err }

func stopUnlessUnavailable(err error) error {
	if err == nil || status.Code(err) == codes.Unavailable {
		return err
	}
	return finalError{err}
}

func unwrapFinal(err error) error {
	var f finalError
	if errors.As(err, &f) {
		return f.err
	}
	return err
}

// RemoveNode starts draining node id out of the cluster (`concord node
// remove`): the placement service marks it LEAVING, moves its replicas away
// and marks it REMOVED once it holds nothing. It returns the node's
// descriptor after the change. Asking again is harmless (a LEAVING node
// marked LEAVING again is success), so a request sent and not answered is
// asked of the next node. A refusal (the node is unknown, already
// removed, or too few nodes would remain) is returned as it is, without
// asking other nodes; after a request that was sent and not answered it
// wraps ErrAmbiguous: the first request may have marked the node, which
// may since have drained and become REMOVED.
func (c *Client) RemoveNode(ctx context.Context, id uint64) (d *concordpb.NodeDescriptor, err error) {
	var refused error
	uncertain := false // an earlier request may have marked the node
	err = c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var tr metadata.MD
		resp, err := concordpb.NewClusterClient(conn).RemoveNode(ctx, &concordpb.RemoveNodeRequest{NodeId: id}, grpc.Trailer(&tr))
		switch status.Code(err) {
		case codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound:
			refused = err
			return nil
		}
		uncertain = uncertain || sentUnanswered(err, tr)
		d = resp.GetNode()
		return err
	})
	switch {
	case refused != nil && uncertain:
		return nil, fmt.Errorf("%w: %w", ErrAmbiguous, refused)
	case refused != nil:
		return nil, refused
	}
	return d, err
}

// ErrResultTooLarge is OpErr's error for an op of a write batch whose
// stored value would take the batch's results past the most bytes of
// values one batch returns (63 MiB, docs/architecture.md): the op was not
// applied and changed nothing. Send it in a batch of its own, or with
// fewer ops that return values.
var ErrResultTooLarge = errors.New("concord: the op's value would take the batch's results past the 63 MiB one batch may return; " +
	"it was not applied: send it in a smaller batch")

// OpErr returns the error of one op's result from Batch, nil if the op did
// not fail. A failed op changed nothing (an INCR with repeat aside:
// OpResult.repeat_applied).
func OpErr(r *concordpb.OpResult) error {
	switch e := r.GetError(); e {
	case concordpb.OpError_OP_ERROR_NONE:
		return nil
	case concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE:
		return ErrResultTooLarge
	case concordpb.OpError_OP_ERROR_NOT_INTEGER:
		return errors.New("concord: the value is not an integer")
	case concordpb.OpError_OP_ERROR_OVERFLOW:
		return errors.New("concord: the increment would overflow")
	case concordpb.OpError_OP_ERROR_NOT_FLOAT:
		return errors.New("concord: the value is not a valid float, or the result would not be one")
	case concordpb.OpError_OP_ERROR_NAN_OR_INFINITY:
		return errors.New("concord: the increment would produce NaN or Infinity")
	case concordpb.OpError_OP_ERROR_TOO_LARGE:
		return errors.New("concord: the result would exceed the value size limit (--max-value-bytes)")
	default:
		return fmt.Errorf("concord: the op failed: %v", e)
	}
}
