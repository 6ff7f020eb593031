package redisapi

import (
	"bytes"
	"context"
	"fmt"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
)

// multiState is a connection's open transaction: the plans queued since
// MULTI, and whether a queued command was refused (EXEC then aborts).
type multiState struct {
	plans   []*plan
	aborted bool
	ops     int // of the plans queued
	bytes   int // of their ops' keys and values
}

// Bounds of a transaction's queue. EXEC sends the queue as one batch,
// which the node refuses past 1,000 ops or 8 MiB of keys and values
// (grpcapi's maxBatchOps and DefaultMaxBatchBytes): a longer queue could
// only fail, and without a bound one client could hold any amount of the
// node's memory between MULTI and EXEC. maxQueued also counts the commands
// queued without ops (UNWATCH, an argument error).
const (
	maxQueued      = 1000
	maxQueuedBytes = 8 << 20
)

// queue plans a command inside MULTI and queues it. Only key commands can
// be queued: they become one batch at EXEC. (An unknown command or a wrong
// number of arguments aborts the transaction before it gets here, as in
// Redis: dispatch.)
func (c *conn) queue(cmd *command, args [][]byte, w *resp.Writer) {
	if cmd.name == "unwatch" {
		// UNWATCH is queued and answers OK in EXEC's array, as in Redis:
		// EXEC checks the watched keys before anything queued runs, so
		// an UNWATCH inside MULTI changes nothing.
		c.enqueue(&plan{render: func(w *resp.Writer, _ []*concordpb.OpResult) { w.SimpleString("OK") }}, w)
		return
	}
	if cmd.plan == nil {
		c.multi.aborted = true
		w.Error("ERR Command not allowed inside a transaction: Concord's MULTI queues key commands only")
		return
	}
	p, err := cmd.plan(c, args)
	if err == nil {
		err = c.checkSizes(p.ops)
	}
	if err != nil {
		// Redis queues every known command of the right arity and finds
		// an argument error (syntax, a number that is not one) when EXEC
		// runs it: that command's answer in EXEC's array is the error,
		// and the others run.
		msg := err.Error()
		p = &plan{render: func(w *resp.Writer, _ []*concordpb.OpResult) { w.Error(msg) }}
	}
	if kv.AddsData(p.ops) {
		if err := c.s.b.NoSpace(); err != nil {
			// As Redis refuses a command that may use memory past
			// maxmemory (-OOM) as it is queued: EXEC then aborts.
			c.abortMulti()
			w.Error(fromStatus(err, true).Error())
			return
		}
	}
	c.enqueue(p, w)
}

// checkSizes refuses an op the node would refuse a batch for: an empty
// key, a key past --max-key-bytes, a value past --max-value-bytes, with
// the texts the KV service gives a command outside MULTI
// (grpcapi.Limits.checkOp). Inside MULTI such an op is the queued
// command's argument error: left to EXEC, it made the node refuse the
// whole batch, so EXEC answered that error alone and none of the
// transaction ran, where Redis answers a queued command's argument error
// in EXEC's array and runs the others.
func (c *conn) checkSizes(ops []*concordpb.Op) error {
	maxKey, maxValue := c.s.cfg.MaxKeyBytes, c.s.cfg.MaxValueBytes
	for _, op := range ops {
		switch k := op.GetKey(); {
		case len(k) == 0:
			return replyError("ERR key is empty")
		case len(k) > maxKey:
			return replyError(fmt.Sprintf("ERR key is %d bytes; the limit is %d (--max-key-bytes)", len(k), maxKey))
		}
		for _, v := range [][]byte{op.GetValue(), op.GetFloatDeltaText(), op.GetExpected()} {
			if len(v) > maxValue {
				return replyError(fmt.Sprintf("ERR value is %d bytes; the limit is %d (--max-value-bytes)", len(v), maxValue))
			}
		}
	}
	return nil
}

// enqueue adds p to the open transaction within its bounds. Past them the
// transaction is aborted and its queue dropped (EXEC answers EXECABORT);
// once aborted, nothing more is kept: the commands only answer QUEUED.
func (c *conn) enqueue(p *plan, w *resp.Writer) {
	m := c.multi
	if m.aborted {
		w.SimpleString("QUEUED")
		return
	}
	size := 0
	for _, op := range p.ops {
		size += len(op.GetKey()) + len(op.GetValue()) + len(op.GetExpected())
	}
	// EXEC's batch starts with a check of each watched key (its key and
	// the value WATCH read), so they take their share of the bounds: left
	// out, a queue within them could make a batch the node refuses whole
	// at EXEC. WATCH cannot run inside MULTI: the share is fixed here.
	nOps, nBytes := len(c.watch.keys)+m.ops+len(p.ops), c.watch.bytes+m.bytes+size
	if len(m.plans)+1 > maxQueued || nOps > maxQueued || nBytes > maxQueuedBytes {
		*m = multiState{aborted: true}
		c.noteMulti()
		w.Error(fmt.Sprintf("ERR MULTI queues at most %d commands and ops and %d bytes of keys and values "+
			"(one batch, which also checks each watched key); the transaction is aborted", maxQueued, maxQueuedBytes))
		return
	}
	m.plans, m.ops, m.bytes = append(m.plans, p), m.ops+len(p.ops), m.bytes+size
	c.noteMulti()
	w.SimpleString("QUEUED")
}

// setMulti opens (m) or ends (nil) the connection's transaction.
func (c *conn) setMulti(m *multiState) {
	c.multi = m
	c.noteMulti()
}

// noteMulti records for CLIENT LIST whether the connection is inside MULTI
// and how many commands it queued (Redis's flag x and multi=).
func (c *conn) noteMulti() {
	n := -1
	if c.multi != nil {
		n = len(c.multi.plans)
	}
	c.mu.Lock()
	c.nQueued = n
	c.mu.Unlock()
}

// abortMulti marks an open transaction as failed (a bad command was sent).
func (c *conn) abortMulti() {
	if c.multi != nil {
		c.multi.aborted = true
	}
}

func cmdMulti(c *conn, _ [][]byte, w *resp.Writer) {
	if c.multi != nil {
		w.Error("ERR MULTI calls can not be nested")
		return
	}
	c.setMulti(&multiState{})
	w.SimpleString("OK")
}

func cmdDiscard(c *conn, _ [][]byte, w *resp.Writer) {
	if c.multi == nil {
		w.Error("ERR DISCARD without MULTI")
		return
	}
	c.setMulti(nil)
	c.unwatch()
	w.SimpleString("OK")
}

// WATCH is optimistic locking by value. WATCH reads each key's current
// state (its value, or that it is absent) and keeps it; EXEC then starts
// its batch with an OP_CHECK of each watched key against that state, whose
// skip covers every op after it, so in the one raft entry of the EXEC
// either every watched key still holds what WATCH read and the transaction
// applies, or nothing does and EXEC answers null, as Redis answers a
// transaction whose watched key was touched. A key that expired meanwhile
// reads as absent, so its expiry aborts the transaction, as in Redis
// since 6.0.9. What a value comparison cannot see is a key written with
// the value it had (or changed and changed back) or given a new expiry
// only: Redis aborts then, Concord runs the transaction, which is still
// correct for the read-modify-write WATCH exists for (the transaction
// applies to exactly the values the client read). A stored key carries
// no version to compare instead (docs/redis.md).
//
// Like MULTI, WATCH stays within one shard: its keys, and the
// transaction's, must all be in the shard of the first watched key
// (CROSSSLOT otherwise, as Redis Cluster answers).

// watchState is the connection's watched keys, each with what WATCH read.
type watchState struct {
	keys  []watchedKey
	shard uint64 // of every watched key, when keys is not empty
	bytes int    // of the keys and values kept
}

type watchedKey struct {
	key, value []byte
	exists     bool
}

// Bounds of a connection's watched keys: EXEC's batch carries a check of
// each (the node refuses a batch of more than 1,000 ops or 8 MiB).
const (
	maxWatchedKeys  = 256
	maxWatchedBytes = 4 << 20
)

func cmdWatch(c *conn, args [][]byte, w *resp.Writer) {
	if c.multi != nil {
		w.Error("ERR WATCH inside MULTI is not allowed")
		return
	}
	var ops []*concordpb.Op
	for _, k := range args[1:] {
		if !c.watching(k) && !hasKey(ops, k) { // Redis keeps a key's first watch
			ops = append(ops, &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: k})
		}
	}
	if len(ops) == 0 {
		w.SimpleString("OK")
		return
	}
	if len(c.watch.keys)+len(ops) > maxWatchedKeys {
		w.Error(fmt.Sprintf("ERR WATCH: at most %d keys may be watched at once", maxWatchedKeys))
		return
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	shard, err := c.shardOfAll(ctx, ops)
	if err == nil && len(c.watch.keys) > 0 && shard != c.watch.shard {
		err = errCrossSlot
	}
	var results []*concordpb.OpResult
	if err == nil {
		results, err = c.runBatch(ctx, ops, false)
	}
	if err != nil {
		w.Error(err.Error())
		return
	}
	add := make([]watchedKey, len(ops))
	size := c.watch.bytes
	for i, res := range results {
		// Copies: the arguments and the reply's buffers are reused.
		add[i] = watchedKey{key: bytes.Clone(ops[i].GetKey()), exists: res.GetOk(), value: bytes.Clone(res.GetValue())}
		size += len(add[i].key) + len(add[i].value)
	}
	if size > maxWatchedBytes {
		w.Error(fmt.Sprintf("ERR WATCH: the watched keys and their values would hold %d bytes; at most %d", size, maxWatchedBytes))
		return
	}
	c.watch.keys, c.watch.shard, c.watch.bytes = append(c.watch.keys, add...), shard, size
	c.noteWatched()
	w.SimpleString("OK")
}

func cmdUnwatch(c *conn, _ [][]byte, w *resp.Writer) {
	c.unwatch()
	w.SimpleString("OK")
}

// watching reports whether key is watched already.
func (c *conn) watching(key []byte) bool {
	for _, k := range c.watch.keys {
		if bytes.Equal(k.key, key) {
			return true
		}
	}
	return false
}

func hasKey(ops []*concordpb.Op, key []byte) bool {
	for _, op := range ops {
		if bytes.Equal(op.GetKey(), key) {
			return true
		}
	}
	return false
}

// unwatch forgets every watched key.
func (c *conn) unwatch() {
	c.watch = watchState{}
	c.noteWatched()
}

func (c *conn) noteWatched() {
	c.mu.Lock()
	c.nWatched = len(c.watch.keys)
	c.mu.Unlock()
}

// checks returns an OP_CHECK of each watched key against what WATCH read,
// each skipping every op after it (the other checks and the n ops of the
// transaction) when it does not match.
func (ws watchState) checks(n int) []*concordpb.Op {
	ops := make([]*concordpb.Op, len(ws.keys))
	for i, k := range ws.keys {
		ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_CHECK, Key: k.key, Expected: k.value, ExpectAbsent: !k.exists,
			Skip: uint32(len(ws.keys) - i - 1 + n)}
	}
	return ops
}

// cmdExec sends every queued op as one BatchRequest: atomic, through one
// raft entry, after the checks of the watched keys. The keys must all
// belong to one shard. EXEC forgets the watched keys, whatever its outcome.
func cmdExec(c *conn, _ [][]byte, w *resp.Writer) {
	m := c.multi
	if m == nil {
		w.Error("ERR EXEC without MULTI")
		return
	}
	c.setMulti(nil)
	watched := c.watch
	c.unwatch()
	if m.aborted {
		w.Error(string(errExecAbort))
		return
	}
	n := 0
	for _, p := range m.plans {
		n += len(p.ops)
	}
	ops := watched.checks(n)
	for _, p := range m.plans {
		ops = append(ops, p.ops...)
	}
	if len(ops) == 0 { // nothing queued, or only UNWATCHes
		w.Array(len(m.plans))
		for _, p := range m.plans {
			p.answer(w, nil)
		}
		return
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	_, err := c.shardOfAll(ctx, ops)
	var res []*concordpb.OpResult
	if err == nil {
		res, err = c.runBatch(ctx, ops, true)
	}
	if err != nil {
		w.Error(err.Error())
		return
	}
	for _, check := range res[:len(watched.keys)] {
		if !check.GetOk() || check.GetSkipped() {
			w.NullArray() // a watched key changed: nothing applied
			return
		}
	}
	res = res[len(watched.keys):]
	w.Array(len(m.plans))
	for _, p := range m.plans {
		p.answer(w, res[:len(p.ops)])
		res = res[len(p.ops):]
	}
}

// shardOfAll returns the one shard of ops' keys: CROSSSLOT when they span
// several, as a transaction must stay in one.
func (c *conn) shardOfAll(ctx context.Context, ops []*concordpb.Op) (uint64, error) {
	groups, order, err := c.byShard(ctx, ops)
	switch {
	case err != nil:
		return 0, err
	case len(groups) > 1:
		return 0, errCrossSlot
	}
	return order[0], nil
}

// runBatch runs ops as one batch and returns one result per op; a failure
// is a Redis error reply (write: an outcome that may be unknown is
// AMBIGUOUS, fromStatus).
func (c *conn) runBatch(ctx context.Context, ops []*concordpb.Op, write bool) ([]*concordpb.OpResult, error) {
	r, err := c.s.b.Batch(ctx, &concordpb.BatchRequest{Header: c.txHeader(), Ops: ops})
	if err == nil && len(r.GetResults()) != len(ops) {
		err = errWrongResults
	}
	if err != nil {
		return nil, fromStatus(err, write)
	}
	return r.GetResults(), nil
}
