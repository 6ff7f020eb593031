package grpcapi

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// KV implements the KV gRPC service. Mutations go through raft on the shard
// leader (forwarded there as a Batch if this node does not lead the shard);
// linearizable reads confirm leadership with ReadIndex; stale reads read the
// local replica.
type KV struct {
	concordpb.UnimplementedKVServer
	b      KVBackend
	limits Limits
	// methods are the stream calls' methods with the call interceptors
	// around them (WithCallInterceptors; nil: none set, and plain, built
	// on first use, serves).
	methods   *[numMethods]streamMethod
	plain     *[numMethods]streamMethod
	plainOnce sync.Once
	merge     mergeQueue[*queuedOps] // forwarded read-only batches (readmerge.go)
	wmerge    mergeQueue[*queuedOps] // forwarded write batches (writemerge.go)
	pmerge    mergeQueue[*queuedOps] // write batches proposed here (proposemerge.go)
	// absorbed counts writes left out of merged proposals (kv.Absorb).
	absorbed atomic.Uint64
	// coalesced counts the INCRs runs of them saved (kv.Coalesce).
	coalesced atomic.Uint64
	// peers are the request streams forwards take (peerwire.go); nil:
	// unary gRPC calls.
	peers *peerPool
	// maxQueuedReplyBytes, when set, replaces maxQueuedReplyBytes (tests).
	maxQueuedReplyBytes int64
	// replyBudgetSeen, when set, is shown each stream's budget of queued
	// replies as the stream starts (tests, to see who waits on it).
	replyBudgetSeen func(*byteBudget)
	// noSpace is the refusal of writes that add data while the cluster's
	// space alarm is on (SetNoSpace); nil while it is off, so that Batch
	// pays one atomic load for the check.
	noSpace atomic.Pointer[spaceRefusal]
	// avail is available mode's hint log and timeout (available.go); nil:
	// AVAILABLE writes are ordinary ones.
	avail *available
}

// spaceRefusal is the error Batch answers while the space alarm is on.
type spaceRefusal struct{ err error }

// NewKV returns the KV service of b, refusing keys and values over limits.
func NewKV(b KVBackend, limits Limits) *KV {
	s := &KV{b: b, limits: limits}
	s.merge.fit, s.merge.send = s.fitReads, s.sendOneMerged
	s.wmerge.fit, s.wmerge.send = s.fitWrites, s.sendOneWriteMerged
	s.pmerge.fit, s.pmerge.send = s.fitWrites, s.proposeOneMerged
	s.pmerge.senders = proposeSenders
	return s
}

// Get reads one key, at the leader unless the read may be stale.
func (s *KV) Get(ctx context.Context, req *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if err := s.limits.checkKey(req.GetKey()); err != nil {
		return nil, err
	}
	shard, err := shardOf(s.b, req.GetKey())
	if err != nil {
		return nil, err
	}
	if isAvailable(req.GetHeader()) {
		if resp, ok, err := s.hintedGet(req.GetKey(), shard); ok || err != nil {
			return resp, err
		}
		lin := &concordpb.GetRequest{Header: linearizableHeader(req.GetHeader()), Key: req.GetKey()}
		m, err := s.availableAttempt(ctx, func(ctx context.Context) (proto.Message, error) { return s.getRouted(ctx, lin, shard) })
		if err != nil {
			return nil, err
		}
		if resp, ok := m.(*concordpb.GetResponse); ok {
			return resp, nil
		}
		req = &concordpb.GetRequest{Header: staleHeader(req.GetHeader()), Key: req.GetKey()}
	}
	return s.getRouted(ctx, req, shard)
}

// getRouted serves a Get of shard here or where it is routed.
func (s *KV) getRouted(ctx context.Context, req *concordpb.GetRequest, shard ids.ShardID) (*concordpb.GetResponse, error) {
	if mutant.Enabled && mutant.On(mutant.FollowerRead) && s.b.HasReplica(shard) {
		req.Header = &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE} // serve here, no barrier
	}
	var resp *concordpb.GetResponse
	err := s.rerouted(ctx, shard, func() (err error) {
		resp, err = s.getOnce(ctx, req, shard)
		return err
	})
	return resp, err
}

// getOnce routes a Get of shard once: served here or forwarded.
func (s *KV) getOnce(ctx context.Context, req *concordpb.GetRequest, shard ids.ShardID) (*concordpb.GetResponse, error) {
	s.awaitLeader(ctx, req.GetHeader(), shard)
	if s.canReadLocally(req.GetHeader(), shard) {
		v, at, found, err := s.localGet(ctx, req.GetHeader(), shard, req.GetKey())
		if err != nil {
			return nil, err
		}
		return &concordpb.GetResponse{Header: header(s.b, shard), Found: found, Value: v, ExpireAtUnixMs: at}, nil
	}
	target := s.readTarget(req.GetHeader(), shard)
	c, err := s.kvClientFor(target, req.GetHeader().GetHops(), shard)
	if err != nil {
		return nil, err
	}
	return forward(ctx, target, func(ctx context.Context) (*concordpb.GetResponse, error) {
		return c.Get(ctx, &concordpb.GetRequest{Header: forwardedHeader(req.GetHeader()), Key: req.GetKey()})
	})
}

// Put is a one-op Batch. The previous value is read (and returned) only
// when the request asks for it. With AVAILABLE (no ttl, no return_prev)
// it may be held as a tentative write (available.go).
func (s *KV) Put(ctx context.Context, req *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	if req.GetTtlMs() < 0 {
		// Said of the Put, not of "operation 0" of the batch it becomes.
		return nil, invalid("ttl_ms %d is negative: give a positive time to live, or 0 for none", req.GetTtlMs())
	}
	op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: req.GetKey(), Value: req.GetValue(), TtlMs: req.GetTtlMs(),
		ReturnPrev: req.GetReturnPrev()}
	apply := s.apply
	if isAvailable(req.GetHeader()) {
		if req.GetTtlMs() != 0 || req.GetReturnPrev() {
			return nil, errAvailableOp
		}
		apply = s.writeAvailable
	}
	res, hdr, err := apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.PutResponse{Header: hdr, PrevExists: res.GetOk(), PrevValue: res.GetValue()}, nil
}

// Delete is a one-op Batch. With AVAILABLE it may be held as a tentative
// write (available.go), which answers existed false: the node does not
// know.
func (s *KV) Delete(ctx context.Context, req *concordpb.DeleteRequest) (*concordpb.DeleteResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: req.GetKey()}
	apply := s.apply
	if isAvailable(req.GetHeader()) {
		apply = s.writeAvailable
	}
	res, hdr, err := apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.DeleteResponse{Header: hdr, Existed: res.GetOk()}, nil
}

// CompareAndSwap is a one-op Batch.
func (s *KV) CompareAndSwap(ctx context.Context, req *concordpb.CompareAndSwapRequest) (*concordpb.CompareAndSwapResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_CAS, Key: req.GetKey(), Value: req.GetValue(),
		Expected: req.GetExpected(), ExpectAbsent: req.GetExpectAbsent(), Delete: req.GetDelete()}
	if isAvailable(req.GetHeader()) {
		return nil, errAvailableOp
	}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.CompareAndSwapResponse{Header: hdr, Succeeded: res.GetOk(),
		CurrentExists: res.GetExists(), CurrentValue: res.GetValue()}, nil
}

func (s *KV) apply(ctx context.Context, h *concordpb.RequestHeader, op *concordpb.Op) (*concordpb.OpResult, *concordpb.ResponseHeader, error) {
	resp, err := s.Batch(ctx, &concordpb.BatchRequest{Header: h, Ops: []*concordpb.Op{op}})
	if err != nil {
		return nil, nil, err
	}
	if len(resp.GetResults()) != 1 {
		return nil, nil, status.Errorf(codes.Internal, "expected one result, got %d", len(resp.GetResults()))
	}
	return resp.GetResults()[0], resp.GetHeader(), nil
}

// ClusterVersion is the cluster's version as this node knows it (the
// Redis port asks it which ops it may send).
func (s *KV) ClusterVersion() version.Level { return s.b.ClusterVersion() }

// Batch applies ops on keys of one shard atomically through raft.
func (s *KV) Batch(ctx context.Context, req *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	return s.batch(ctx, req, false)
}

// batch is Batch; reconcile is set for this node's reconciler's batches
// (Reconcile), whose ops carry tentative_version though no node forwarded
// them, and which are proposed alone.
func (s *KV) batch(ctx context.Context, req *concordpb.BatchRequest, reconcile bool) (*concordpb.BatchResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if isAvailable(req.GetHeader()) && !readOnly(req) {
		return nil, errAvailableOp
	}
	// A node forwarding merged INCRs sends their runs as one op each
	// (writemerge.go), once the cluster's version allows it.
	v := s.b.ClusterVersion()
	if req.GetHeader().GetHops() > 0 && !v.Allows(version.IncrFloatText) && hasFloatText(req.GetOps()) {
		v = s.awaitVersion(ctx, version.IncrFloatText)
	}
	// The node's reconciler sends tentative_version as a forwarding node
	// does (Reconcile).
	forwarded := req.GetHeader().GetHops() > 0
	gates := opGates{repeat: forwarded && v.Allows(version.IncrRepeat), floatText: v.Allows(version.IncrFloatText),
		tentative: (forwarded || reconcile) && v.Allows(version.Versions)}
	shard, err := s.limits.checkBatch(req, func(k []byte) (ids.ShardID, error) { return shardOf(s.b, k) }, gates)
	if err != nil {
		return nil, err
	}
	if err := s.refuseForSpace(req); err != nil {
		if mutant.Enabled && mutant.On(mutant.SpaceRefusalAfterPropose) {
			_, _ = s.writeBatch(ctx, req, shard) // the planted bug: applied, then refused
		}
		return nil, err
	}
	if readOnly(req) {
		if isAvailable(req.GetHeader()) {
			return s.availableReads(ctx, req, shard)
		}
		return s.readBatch(ctx, req, shard)
	}
	if reconcile || req.GetHeader().GetHops() > 0 {
		return s.writeBatch(ctx, req, shard)
	}
	prior, err := s.priorHints(req.GetOps())
	if err != nil {
		return nil, err
	}
	resp, err := s.writeBatch(ctx, req, shard)
	if err == nil && prior != nil {
		s.dropPriorHints(prior, req.GetOps(), resp.GetResults())
	}
	return resp, err
}

// writeBatch proposes a batch that may write, on shard's leader: here, or
// forwarded to it (merged with other requests when it can be).
func (s *KV) writeBatch(ctx context.Context, req *concordpb.BatchRequest, shard ids.ShardID) (*concordpb.BatchResponse, error) {
	retryUntil := time.Now().Add(leaderWait)
	// A batch reconciling tentative writes goes alone (Reconcile).
	alone := hasTentative(req.GetOps())
	for {
		s.awaitLeader(ctx, req.GetHeader(), shard)
		if leader, local := s.b.Leader(shard); !local {
			if writeMergeable(req.GetHeader()) && !alone {
				resp, err := s.forwardWriteMerged(ctx, shard, req.GetOps())
				if err != errSendAlone {
					return resp, err
				}
				alone = true // refused merged, or this node leads now: the ordinary path
				continue
			}
			c, err := s.kvClientFor(leader, req.GetHeader().GetHops(), shard)
			if err != nil {
				return nil, err
			}
			return forward(ctx, leader, func(ctx context.Context) (*concordpb.BatchResponse, error) {
				return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(req.GetHeader()), Ops: req.GetOps()})
			})
		}
		if req.GetHeader().GetSessionId() == 0 && !alone {
			resp, err := s.proposeMerged(ctx, shard, req.GetOps())
			if err != errSendAlone {
				return resp, err
			}
			alone = true // refused whole, dropped, or no longer led here: the ordinary path
			continue
		}
		res, err := s.b.Propose(ctx, shard, s.kvCommand(req.GetHeader(), req.GetOps()))
		if err != nil && refusedBeforeLog(err) && time.Now().Before(retryUntil) && pause(ctx, leaderPoll) {
			continue // raft did not take it (a leadership change under way): route it again
		}
		if err != nil {
			return nil, toStatus(err)
		}
		if c := codes.Code(res.GetErrorCode()); c != codes.OK {
			return nil, status.Error(c, res.GetErrorMessage())
		}
		return &concordpb.BatchResponse{Header: header(s.b, shard), Results: res.GetResults()}, nil
	}
}

// SetNoSpace turns the space alarm on, with reason (what the refusals
// say after kv.NoSpaceMark: which node is low and by how much), or off
// with "". The node calls it as its own measurement and the placement
// leader's answers change (internal/node/space.go).
func (s *KV) SetNoSpace(reason string) {
	if reason == "" {
		s.noSpace.Store(nil)
		return
	}
	s.noSpace.Store(&spaceRefusal{err: status.Error(codes.ResourceExhausted, kv.NoSpaceMark+reason)})
}

// NoSpace is the refusal a write that adds data gets now; nil while the
// space alarm is off. The Redis front end asks it as MULTI queues a
// command, to abort the transaction as Redis does for OOM.
func (s *KV) NoSpace() error {
	if r := s.noSpace.Load(); r != nil {
		return r.err
	}
	return nil
}

// refuseForSpace refuses req (ResourceExhausted, kv.NoSpaceMark) while the
// space alarm is on if it may add data (kv.AddsData): before anything is
// proposed or forwarded, so nothing applied and the client may know it.
// Reads and batches that only delete go on: they are how space is freed.
// Only the node that took the request from its client decides (hops 0):
// a node forwarding to the leader already did, and a forwarded merged
// batch carries several clients' ops, which one refusal would fail
// together, a client's delete with another's put.
func (s *KV) refuseForSpace(req *concordpb.BatchRequest) error {
	r := s.noSpace.Load()
	if r == nil || req.GetHeader().GetHops() > 0 || !kv.AddsData(req.GetOps()) {
		return nil
	}
	return r.err
}

// kvCommand is the command of a write: stamped with this leader's clock
// (the state machine turns TTLs into absolute times from it, once for
// every replica: at the highest stamp the shard has seen once the
// cluster's version allows it, on the shard's clock before), with the
// result budget (kv.MaxResultBytes) once the version allows it, in one
// allocation rather than three (Propose only marshals it).
func (s *KV) kvCommand(h *concordpb.RequestHeader, ops []*concordpb.Op) *storepb.Command {
	c := &struct {
		cmd  storepb.Command
		kind storepb.Command_Kv
		kv   storepb.KVCommand
	}{}
	c.kv.SessionId, c.kv.Seq, c.kv.SessionFloor = h.GetSessionId(), h.GetSeq(), h.GetSessionFloor()
	c.kv.Ops, c.kv.MaxValueBytes = ops, int64(s.limits.MaxValueBytes)
	v := s.b.ClusterVersion()
	c.kv.ExpiryOnStamps = v.Allows(version.ExpiryOnStamps)
	// Writes carry versions (package kv), which available mode's
	// reconciled tentative writes are compared with.
	c.kv.Versioned = v.Allows(version.Versions)
	if v.Allows(version.ResultBudget) {
		// A replica of a binary below the level would apply the ops past
		// the budget (and stops on the field it does not know).
		c.kv.MaxResultBytes = kv.MaxResultBytes
	}
	c.kind.Kv = &c.kv
	c.cmd.UnixNanos, c.cmd.Kind = time.Now().UnixNano(), &c.kind
	return &c.cmd
}

// readOnly reports whether a batch only reads (every op an OP_GET) and
// carries no session (whose sequence number only raft records). Such a
// batch changes nothing, so it is served as a read, as Get is: at the
// consistency its header asks, a linearizable one through ONE ReadIndex
// barrier and one view of the shard for all its keys, not through raft (a
// log entry, an fsync on a quorum). It stays atomic as a raft entry is:
// every key is read at the same applied index. This is how the Redis
// protocol sends a pipeline's GETs of one shard (internal/redisapi).
func readOnly(req *concordpb.BatchRequest) bool {
	if req.GetHeader().GetSessionId() != 0 {
		return false
	}
	for _, op := range req.GetOps() {
		if op.GetType() != concordpb.OpType_OP_GET {
			return false
		}
	}
	return true
}

// readBatch serves a read-only batch of shard (validated) here, or
// forwards it whole to the node that can serve it, as Get does one key.
func (s *KV) readBatch(ctx context.Context, req *concordpb.BatchRequest, shard ids.ShardID) (*concordpb.BatchResponse, error) {
	if mutant.Enabled && mutant.On(mutant.FollowerRead) && s.b.HasReplica(shard) {
		// As in Get: serve here, no barrier.
		req = &concordpb.BatchRequest{Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}, Ops: req.GetOps()}
	}
	var resp *concordpb.BatchResponse
	err := s.rerouted(ctx, shard, func() (err error) {
		resp, err = s.readBatchOnce(ctx, req, shard)
		return err
	})
	return resp, err
}

func (s *KV) readBatchOnce(ctx context.Context, req *concordpb.BatchRequest, shard ids.ShardID) (*concordpb.BatchResponse, error) {
	h := req.GetHeader()
	s.awaitLeader(ctx, h, shard)
	if s.canReadLocally(h, shard) {
		res, err := s.localGets(ctx, h, shard, req.GetOps())
		if err != nil {
			return nil, err
		}
		return &concordpb.BatchResponse{Header: header(s.b, shard), Results: res}, nil
	}
	resp, err := s.forwardReads(ctx, h, shard, req.GetOps())
	if err != nil {
		return nil, err
	}
	if err := chargeResults(ctx, resp.GetResults()); err != nil {
		return nil, err
	}
	return resp, nil
}

// forwardReads sends a read-only batch to the node that can serve it
// (which bounds it by its own MaxReadBytes).
func (s *KV) forwardReads(ctx context.Context, h *concordpb.RequestHeader, shard ids.ShardID, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
	if mergeable(h) {
		return s.forwardMerged(ctx, shard, ops)
	}
	target := s.readTarget(h, shard)
	c, err := s.kvClientFor(target, h.GetHops(), shard)
	if err != nil {
		return nil, err
	}
	return forward(ctx, target, func(ctx context.Context) (*concordpb.BatchResponse, error) {
		return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(h), Ops: ops})
	})
}

// chargeResults charges the values of a forwarded read's results to the
// caller's budget, if ctx carries one: the node that served it bounded
// the read alone, not what the caller already holds.
func chargeResults(ctx context.Context, res []*concordpb.OpResult) error {
	b := kv.BudgetFrom(ctx)
	if b == nil {
		return nil
	}
	n := 0
	for _, r := range res {
		n += len(r.GetValue())
	}
	return toStatus(b.Take(n))
}

// localGets reads the keys of ops (OP_GETs) from the local replica of
// shard, all at one instant: a stale batch from the current state, a
// linearizable one from the view its barrier returns.
func (s *KV) localGets(ctx context.Context, h *concordpb.RequestHeader, shard ids.ShardID, ops []*concordpb.Op) ([]*concordpb.OpResult, error) {
	keys := make([][]byte, len(ops))
	for i, op := range ops {
		keys[i] = op.GetKey()
	}
	budget := readBudget(ctx)
	if err := budget.Spent(); err != nil {
		return nil, toStatus(err)
	}
	if h.GetConsistency() == concordpb.Consistency_STALE {
		res, err := s.b.LocalGetMany(shard, keys, budget)
		return res, toStatus(err)
	}
	view, err := s.readBarrier(ctx, shard)
	if err != nil {
		return nil, err
	}
	defer view.Close()
	res, err := view.GetMany(keys, budget)
	return res, toStatus(err)
}

// refusedBeforeLog reports whether err says a proposal never reached the
// raft log (this replica is not the leader, or raft dropped it during a
// leadership change): it certainly did not apply, so it may be sent again.
func refusedBeforeLog(err error) bool {
	var nl *replica.NotLeaderError
	return errors.Is(err, replica.ErrDropped) || errors.As(err, &nl)
}

// pause waits d, or less if ctx ends first: then it returns false.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Scan merges the per-shard scans of every user shard, or scans one shard
// when a forwarding node asks for it. A page is bounded by keys (limit)
// and by bytes (max_bytes, at most kv.MaxReadBytes): 10,000 pairs of 1 MiB
// values were a 10 GiB page.
func (s *KV) Scan(ctx context.Context, req *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if len(req.GetEnd()) > 0 && bytes.Compare(req.GetStart(), req.GetEnd()) >= 0 {
		return nil, invalid("scan start %q is not before end %q", req.GetStart(), req.GetEnd())
	}
	if isAvailable(req.GetHeader()) {
		// A scan does not merge the node's hints: it reads as STALE.
		req = proto.CloneOf(req)
		req.Header = staleHeader(req.GetHeader())
	}
	page := scanPage(req)
	if shard := ids.ShardID(req.GetOnlyShard()); shard != 0 {
		if _, ok := s.b.Descriptors()[shard]; !ok || shard == routing.MetaShard {
			return nil, status.Errorf(codes.NotFound, "shard %d does not exist", shard)
		}
		kvs, more, err := s.scanShard(ctx, req, shard, page)
		if err != nil {
			return nil, err
		}
		return &concordpb.ScanResponse{Header: header(s.b, shard), Kvs: kvs, More: more}, nil
	}
	return s.scanAll(ctx, req, page)
}

// scanPage is the page a request asks for, within the server's bounds.
func scanPage(req *concordpb.ScanRequest) kv.Page {
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultScanLimit
	}
	maxBytes := int(req.GetMaxBytes())
	if maxBytes == 0 || maxBytes > kv.MaxReadBytes {
		maxBytes = kv.MaxReadBytes
	}
	return kv.Page{Limit: min(limit, maxScanLimit), MaxBytes: maxBytes, KeysOnly: req.GetKeysOnly()}
}

// shardPage is one shard's part of a merged scan page.
type shardPage struct {
	kvs  []*concordpb.KeyValue
	more bool
}

// scanAll scans every shard in parallel and merges. Each shard's page is
// a prefix of its keys of at most the page's limit, and of its byte bound
// shared out between the shards, so the merged page stays within about
// the bound; mergedScan then keeps only what is certainly the first keys
// of the whole range.
func (s *KV) scanAll(ctx context.Context, req *concordpb.ScanRequest, page kv.Page) (*concordpb.ScanResponse, error) {
	shards := s.b.Table().Shards()
	if len(shards) == 0 {
		return nil, status.Error(codes.Unavailable, "this node does not know the shards yet")
	}
	each := page
	each.MaxBytes = max(1, page.MaxBytes/len(shards))
	pages := make([]shardPage, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, d := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pages[i].kvs, pages[i].more, errs[i] = s.scanShard(ctx, req, ids.ShardID(d.GetShardId()), each)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return mergedScan(s.b.ID(), pages, page.Limit), nil
}

// mergedScan merges the shards' pages into the first keys of the whole
// range and says where the next page starts: just after the last key
// returned. A shard's page that ended at a bound (more) holds its keys
// only up to its last one, so the merge may not pass the smallest such
// last key: a key of another shard past it could come before keys of that
// shard the page has not read. The merge is then cut to limit keys.
func mergedScan(servedBy ids.NodeID, pages []shardPage, limit int) *concordpb.ScanResponse {
	var all []*concordpb.KeyValue
	var cut []byte // the smallest last key of a page that ended at a bound
	more := false
	for _, p := range pages {
		all = append(all, p.kvs...)
		if p.more && len(p.kvs) > 0 {
			last := p.kvs[len(p.kvs)-1].GetKey()
			if cut == nil || bytes.Compare(last, cut) < 0 {
				cut = last
			}
		}
		more = more || p.more
	}
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].GetKey(), all[j].GetKey()) < 0 })
	if cut != nil {
		n := sort.Search(len(all), func(i int) bool { return bytes.Compare(all[i].GetKey(), cut) > 0 })
		all = all[:n]
	}
	if len(all) > limit {
		all, more = all[:limit], true
	}
	resp := &concordpb.ScanResponse{Header: &concordpb.ResponseHeader{ServedByNodeId: uint64(servedBy)}, Kvs: all, More: more}
	if more && len(all) > 0 {
		resp.NextStart = append(append([]byte(nil), all[len(all)-1].GetKey()...), 0)
	}
	return resp
}

func (s *KV) scanShard(ctx context.Context, req *concordpb.ScanRequest, shard ids.ShardID, page kv.Page) (kvs []*concordpb.KeyValue, more bool, err error) {
	err = s.rerouted(ctx, shard, func() (err error) {
		kvs, more, err = s.scanShardOnce(ctx, req, shard, page)
		return err
	})
	return kvs, more, err
}

// scanShardOnce routes a scan of shard once: served here or forwarded.
func (s *KV) scanShardOnce(ctx context.Context, req *concordpb.ScanRequest, shard ids.ShardID, page kv.Page) ([]*concordpb.KeyValue, bool, error) {
	s.awaitLeader(ctx, req.GetHeader(), shard)
	if s.canReadLocally(req.GetHeader(), shard) {
		if req.GetHeader().GetConsistency() == concordpb.Consistency_STALE {
			kvs, more, err := s.b.LocalScan(shard, req.GetStart(), req.GetEnd(), page)
			return kvs, more, toStatus(err)
		}
		view, err := s.readBarrier(ctx, shard)
		if err != nil {
			return nil, false, err
		}
		defer view.Close()
		kvs, more, err := view.Scan(req.GetStart(), req.GetEnd(), page)
		return kvs, more, toStatus(err)
	}
	target := s.readTarget(req.GetHeader(), shard)
	c, err := s.kvClientFor(target, req.GetHeader().GetHops(), shard)
	if err != nil {
		return nil, false, err
	}
	resp, err := forward(ctx, target, func(ctx context.Context) (*concordpb.ScanResponse, error) {
		return c.Scan(ctx, &concordpb.ScanRequest{Header: forwardedHeader(req.GetHeader()),
			Start: req.GetStart(), End: req.GetEnd(), Limit: uint32(page.Limit), OnlyShard: uint64(shard),
			KeysOnly: page.KeysOnly, MaxBytes: uint32(page.MaxBytes)})
	})
	return resp.GetKvs(), resp.GetMore(), err
}

// canReadLocally: a stale read needs any local replica; a linearizable one
// needs the local replica to lead.
func (s *KV) canReadLocally(h *concordpb.RequestHeader, shard ids.ShardID) bool {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return s.b.HasReplica(shard)
	}
	_, local := s.b.Leader(shard)
	return local
}

// leaderWait bounds how long a request waits for a shard that has no known
// leader (an election in progress, or a node just started that has not
// heard from one) before the usual Unavailable: nothing was sent anywhere
// yet, so waiting is safe for writes too, and an election usually ends
// well within it. A client that sees Unavailable at once, as a Redis client
// does, has no retry of its own.
const leaderWait = 2 * time.Second

// leaderPoll is how often a waiting request looks for a leader again.
const leaderPoll = 20 * time.Millisecond

// versionWait bounds how long a forwarded request that uses a feature of
// a version this node has not learned yet waits for it: the forwarding
// node learned it, so it is the cluster's, and this node learns it from
// its next heartbeat answer (one a second by default). Refusing at once
// would fail a Redis client's command in the moment after every node of
// a rolling upgrade runs the new binary.
const versionWait = 3 * time.Second

// awaitVersion waits until this node's cluster version allows feature,
// versionWait passes or ctx ends, and returns the version it knows then.
func (s *KV) awaitVersion(ctx context.Context, feature version.Level) version.Level {
	deadline := time.Now().Add(versionWait)
	v := s.b.ClusterVersion()
	for !v.Allows(feature) && time.Now().Before(deadline) && pause(ctx, leaderPoll) {
		v = s.b.ClusterVersion()
	}
	return v
}

// hasFloatText reports whether an op carries float_delta_text.
func hasFloatText(ops []*concordpb.Op) bool {
	for _, op := range ops {
		if len(op.GetFloatDeltaText()) > 0 {
			return true
		}
	}
	return false
}

// awaitLeader waits, for a request that needs shard's leader (a write or a
// linearizable read), until a leader is known, leaderWait passes or half
// of ctx's time is spent.
func (s *KV) awaitLeader(ctx context.Context, h *concordpb.RequestHeader, shard ids.ShardID) {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return
	}
	if leader, local := s.b.Leader(shard); leader != 0 || local {
		return
	}
	d := leaderWait
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	poll := time.NewTicker(leaderPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		case <-poll.C:
			if leader, local := s.b.Leader(shard); leader != 0 || local {
				return
			}
		}
	}
}

// readTarget is the node to forward a read to.
func (s *KV) readTarget(h *concordpb.RequestHeader, shard ids.ShardID) ids.NodeID {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return anyReplicaNode(s.b, shard)
	}
	leader, _ := s.b.Leader(shard)
	return leader
}

// localGet reads key from the local replica of shard: a stale read reads its
// current state, a linearizable one the view its barrier returns.
func (s *KV) localGet(ctx context.Context, h *concordpb.RequestHeader, shard ids.ShardID, key []byte) ([]byte, int64, bool, error) {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		v, at, found, err := s.b.LocalGet(shard, key)
		return v, at, found, toStatus(err)
	}
	view, err := s.readBarrier(ctx, shard)
	if err != nil {
		return nil, 0, false, err
	}
	defer view.Close()
	v, at, found, err := view.Get(key)
	return v, at, found, toStatus(err)
}

// readBarrier makes a linearizable read wait until the local replica has
// applied everything committed before the read arrived, and returns the
// view of the shard the read must read (never the live engine: the replica
// may be removed, its data destroyed, before the read runs).
func (s *KV) readBarrier(ctx context.Context, shard ids.ShardID) (ShardView, error) {
	view, err := s.b.ReadIndex(ctx, shard)
	if refusedBeforeLog(err) {
		return nil, errLeaderMoved
	}
	if err != nil {
		return nil, readStatus(err)
	}
	return view, nil
}

// errLeaderMoved says this node lost a shard's leadership (to a transfer or
// an election) while a read waited for its barrier: the read is routed
// again (rerouted), to wherever the leader is now.
var errLeaderMoved = errors.New("grpcapi: the shard's leadership moved during the read")

// rerouted runs route, which serves or forwards one read of shard, again
// while it reports errLeaderMoved, for up to leaderWait. A read has no
// effect, so running it again is always safe.
func (s *KV) rerouted(ctx context.Context, shard ids.ShardID, route func() error) error {
	until := time.Now().Add(leaderWait)
	for {
		err := route()
		if !errors.Is(err, errLeaderMoved) {
			return err
		}
		if !time.Now().Before(until) || !pause(ctx, leaderPoll) {
			return status.Errorf(codes.Unavailable, "shard %d: its leadership moved during the read; try again", shard)
		}
	}
}
