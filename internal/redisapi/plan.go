package redisapi

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
)

// plan is a key command turned into Ops, and how to answer from their
// results. Planning checks the arguments and does no I/O, so a plan can be
// queued by MULTI, or run concurrently with its pipeline's neighbours.
type plan struct {
	ops []*concordpb.Op
	// read: every op is an OP_GET, so outside MULTI the plan runs as a
	// read at the connection's consistency (batches of GETs, which the KV
	// service serves without raft), and joins its shard's read chain.
	read bool
	// oneShard: the ops must fall in one shard (one batch, atomic); keys in
	// several answer CROSSSLOT and nothing runs. Otherwise each shard's ops
	// are a batch of their own.
	oneShard bool
	// render writes the reply from the results, one per op, in order.
	render func(w *resp.Writer, res []*concordpb.OpResult)
	// one, set instead of render for a one-op write (writePlan), writes the
	// reply from the op's result when the op did not fail.
	one func(w *resp.Writer, r *concordpb.OpResult)
	// avail: a plain SET or a DEL of one key under CONCORD.CONSISTENCY
	// available. Outside MULTI it runs alone as the KV service's Put or
	// Delete with AVAILABLE (execAvailable), never in a batch or a write
	// chain: the service refuses AVAILABLE on a batch that writes, and
	// only a Put or Delete may be held as a tentative write.
	avail bool
}

// answer writes p's reply from res, the results of its ops in order.
func (p *plan) answer(w *resp.Writer, res []*concordpb.OpResult) {
	if p.one == nil {
		if p.pastResultBudget(res) {
			w.Error(errResultTooLarge)
			return
		}
		p.render(w, res)
		return
	}
	if e := opError(res[0].GetError()); e != "" {
		w.Error(e)
		return
	}
	p.one(w, res[0])
}

// pastResultBudget reports whether an op of p failed past its batch's
// result budget (OP_ERROR_RESULT_TOO_LARGE): a GET's empty result must
// not read as a missing key. A CHECK failed so only did not match, which
// its command (MSETNX: a key exists) answers as it would have anyway.
func (p *plan) pastResultBudget(res []*concordpb.OpResult) bool {
	for i, r := range res {
		if r.GetError() == concordpb.OpError_OP_ERROR_RESULT_TOO_LARGE && p.ops[i].GetType() != concordpb.OpType_OP_CHECK {
			return true
		}
	}
	return false
}

// execPlan runs p outside MULTI and writes its reply. ctx bounds its
// calls: the group's (runGroup) or the command's own.
func (c *conn) execPlan(ctx context.Context, p *plan, w *resp.Writer) {
	if p.avail {
		c.execAvailable(ctx, p, w)
		return
	}
	if p.oneShard {
		groups, _, err := c.byShard(ctx, p.ops)
		if err == nil && len(groups) > 1 {
			err = errCrossSlot
		}
		if err != nil {
			w.Error(err.Error())
			return
		}
	}
	if p.read && len(p.ops) > 1 {
		ctx = c.commandBudget(ctx)
	}
	res, err := c.batches(ctx, p.ops, p.read)
	if err != nil {
		w.Error(fromStatus(err, !p.read).Error())
		return
	}
	p.answer(w, res)
}

// commandBudget returns ctx with a budget of one multi-key read (MGET)
// inside the pipeline's: a read whose own values pass the output buffer
// limit (or kv.MaxReadBytes) is refused, "ERR reply too large", at the
// value that passes it; one that fits alone but not after the pipeline's
// earlier replies closes the connection (conn.answered).
func (c *conn) commandBudget(ctx context.Context) context.Context {
	limit := int64(min(c.s.cfg.OutputBufferLimit, kv.MaxReadBytes))
	return kv.WithBudget(ctx, kv.NewBudget(limit, kv.BudgetFrom(ctx)))
}

// errBudgetSpent fails a part of a read not started once the read's
// budget is spent.
var errBudgetSpent = status.Error(codes.ResourceExhausted, "reply too large")

// maxReadParts bounds the batches of one read command that run at once:
// each may gather a value before it sees the budget spent, so 4,000
// parts of a long MGET at once could hold 4,000 values over it.
const maxReadParts = 8

// batches applies ops as one BatchRequest per shard, concurrently: atomic
// within each shard, not across shards. The results come back in op order.
// If a shard's batch fails, the error is returned, and the other shards'
// batches may have applied. Reads (every op an OP_GET) go the same way:
// the KV service serves a batch of GETs as one linearizable read of the
// shard (grpcapi.KV.Batch), cut into batches of at most maxChainOps keys so
// that an MGET of any length stays within the service's batch limits.
func (c *conn) batches(ctx context.Context, ops []*concordpb.Op, read bool) ([]*concordpb.OpResult, error) {
	if _, one := c.oneShard(ops); one && (!read || len(ops) <= maxChainOps) {
		// The common case (every single-key command): one batch, and none
		// of the grouping's maps and slices.
		return c.batch(ctx, ops)
	}
	groups, order, err := c.byShard(ctx, ops)
	if err != nil {
		return nil, err
	}
	var parts [][]int
	for _, shard := range order {
		idx := groups[shard]
		for read && len(idx) > maxChainOps {
			parts = append(parts, idx[:maxChainOps])
			idx = idx[maxChainOps:]
		}
		parts = append(parts, idx)
	}
	res := make([]*concordpb.OpResult, len(ops))
	errs := make([]error, len(parts))
	budget := kv.BudgetFrom(ctx)
	apply := func(pi int) {
		if budget != nil && budget.Exhausted() {
			errs[pi] = errBudgetSpent // an earlier part's error says which
			return
		}
		idx := parts[pi]
		batch := make([]*concordpb.Op, len(idx))
		for j, i := range idx {
			batch[j] = ops[i]
		}
		r, err := c.batch(ctx, batch)
		if err != nil {
			errs[pi] = err
			return
		}
		for j, i := range idx {
			res[i] = r[j]
		}
	}
	if len(parts) == 1 {
		apply(0)
	} else {
		var wg sync.WaitGroup
		at := len(parts) // writes: every shard's batch at once
		if read {
			at = maxReadParts
		}
		running := make(chan struct{}, at)
		for pi := range parts {
			running <- struct{}{}
			wg.Add(1)
			go func() { defer wg.Done(); defer func() { <-running }(); apply(pi) }()
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// batch sends ops, all of one shard, as one BatchRequest and returns
// their results, one per op.
func (c *conn) batch(ctx context.Context, ops []*concordpb.Op) ([]*concordpb.OpResult, error) {
	// The request and its header in one allocation (one batch per chain).
	req := &struct {
		r concordpb.BatchRequest
		h concordpb.RequestHeader
	}{}
	req.h.Consistency = c.consistencyOf(ops)
	req.r.Header, req.r.Ops = &req.h, ops
	r, err := c.s.b.Batch(ctx, &req.r)
	if err == nil && len(r.GetResults()) != len(ops) {
		err = errWrongResults
	}
	if err != nil {
		// Cut short, or failed where it may still be queued or in flight:
		// its ops and their arguments must outlive the pipeline.
		c.held.Store(true)
		return nil, err
	}
	return r.GetResults(), nil
}

// byShard groups op indexes by the shard of their key, keeping each
// shard's ops in order; order lists the shards in first appearance. A node
// that does not know the shards yet is waited for (shardOf).
func (c *conn) byShard(ctx context.Context, ops []*concordpb.Op) (map[uint64][]int, []uint64, error) {
	groups := map[uint64][]int{}
	var order []uint64
	for i, op := range ops {
		shard, ok := c.shardOf(ctx, op.GetKey())
		if !ok {
			return nil, nil, errNoShards
		}
		if _, seen := groups[shard]; !seen {
			order = append(order, shard)
		}
		groups[shard] = append(groups[shard], i)
	}
	return groups, order, nil
}

// header is the header of a scan: at the connection's consistency (the
// KV service reads an AVAILABLE scan as STALE: a scan does not see the
// node's tentative writes).
func (c *conn) header() *concordpb.RequestHeader {
	return &concordpb.RequestHeader{Consistency: c.consistency}
}

// txHeader is the header of a transaction's batch (WATCH's reads, EXEC)
// or a session's write: under available, as under linearizable. Only a
// plain SET, a DEL of one key and reads are available (docs/redis.md).
func (c *conn) txHeader() *concordpb.RequestHeader {
	return &concordpb.RequestHeader{Consistency: c.writeConsistency()}
}

// writeConsistency is the consistency of the connection's writes: its
// own, except that under available a write other than execAvailable's
// is an ordinary (linearizable) one: the KV service refuses a batch that
// writes with AVAILABLE.
func (c *conn) writeConsistency() concordpb.Consistency {
	if c.consistency == concordpb.Consistency_AVAILABLE {
		return concordpb.Consistency_LINEARIZABLE
	}
	return c.consistency
}

// consistencyOf is the consistency of a batch of ops: the connection's
// for reads (every op an OP_GET: an AVAILABLE read-only batch answers
// each key from the node's hint of it, if any), writeConsistency for a
// batch that writes. One comparison unless the connection is available.
func (c *conn) consistencyOf(ops []*concordpb.Op) concordpb.Consistency {
	if c.consistency != concordpb.Consistency_AVAILABLE {
		return c.consistency
	}
	for _, op := range ops {
		if op.GetType() != concordpb.OpType_OP_GET {
			return c.writeConsistency()
		}
	}
	return c.consistency
}

// available reports whether the connection is under CONCORD.CONSISTENCY
// available (nil: a plan made without a connection, in tests).
func (c *conn) available() bool {
	return c != nil && c.consistency == concordpb.Consistency_AVAILABLE
}

// execAvailable runs p, a plain SET or a DEL of one key under available
// (plan.avail), as a Put or Delete with AVAILABLE, and answers as the
// command does: +OK, or the count of keys deleted. A tentative DEL
// counts its key (:1): the node holds the delete and its AVAILABLE reads
// answer the key absent from now, while whether it existed is not known
// until the write is reconciled.
func (c *conn) execAvailable(ctx context.Context, p *plan, w *resp.Writer) {
	res, tentative, err := c.writeAvailable(ctx, p.ops[0])
	if err != nil {
		w.Error(fromStatus(err, true).Error())
		return
	}
	if tentative {
		c.tentative.Add(1)
	}
	p.answer(w, []*concordpb.OpResult{res})
}

// writeAvailable sends op (a blind PUT or a DELETE) as a Put or Delete
// with AVAILABLE and returns its result as a batch would (a DELETE's Ok:
// the key existed, or the delete is tentative) and whether the node held
// it as tentative.
func (c *conn) writeAvailable(ctx context.Context, op *concordpb.Op) (*concordpb.OpResult, bool, error) {
	h := &concordpb.RequestHeader{Consistency: concordpb.Consistency_AVAILABLE}
	var res concordpb.OpResult
	var hdr *concordpb.ResponseHeader
	var err error
	if op.GetType() == concordpb.OpType_OP_DELETE {
		var r *concordpb.DeleteResponse
		r, err = c.s.b.Delete(ctx, &concordpb.DeleteRequest{Header: h, Key: op.GetKey()})
		hdr = r.GetHeader()
		res.Ok = r.GetExisted() || hdr.GetTentative()
	} else {
		var r *concordpb.PutResponse
		r, err = c.s.b.Put(ctx, &concordpb.PutRequest{Header: h, Key: op.GetKey(), Value: op.GetValue()})
		hdr = r.GetHeader()
	}
	if err != nil || hdr.GetTentative() {
		// A failed write may still be queued or in flight, and a tentative
		// one's ordinary attempt, cut short by the available timeout, may
		// too: its key and value (the command's arguments) must outlive
		// the pipeline.
		c.held.Store(true)
	}
	if err != nil {
		return nil, false, err
	}
	return &res, hdr.GetTentative(), nil
}

// errNoShards answers a command that needs the shard table when the node
// still does not know it after Config.ShardWait.
const errNoShards = replyError("UNAVAILABLE this node does not know the shards yet")

// shardPoll is how often shardOf looks again at the node's shard table.
const shardPoll = 10 * time.Millisecond

// shardOf is Backend.ShardOf that waits while the node does not know the
// shards yet: it is starting (waiting for its peers, bootstrapping,
// joining) or has not heard its first routes. Redis clients do not retry,
// and the nodes of a cluster start a moment apart, so a command sent to
// the last node just after the first answered would otherwise fail. The
// wait is bounded by Config.ShardWait and ctx (the command's timeout; the
// server's Close ends it). It polls, since the table fills from several
// places (bootstrap, join, heartbeat answers); a node that knows its
// shards pays one lookup, as before.
func (c *conn) shardOf(ctx context.Context, key []byte) (uint64, bool) {
	if shard, ok := c.s.b.ShardOf(key); ok {
		return shard, true
	}
	if c.s.cfg.ShardWait <= 0 {
		return 0, false
	}
	deadline := time.NewTimer(c.s.cfg.ShardWait)
	defer deadline.Stop()
	tick := time.NewTicker(shardPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, false
		case <-deadline.C:
			return c.s.b.ShardOf(key)
		case <-tick.C:
		}
		if shard, ok := c.s.b.ShardOf(key); ok {
			return shard, true
		}
	}
}
