package redisapi

import (
	"context"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/resp"
)

// multiState is a connection's open transaction: the plans queued since
// MULTI, and whether a queued command was refused (EXEC then aborts).
type multiState struct {
	plans   []*plan
	aborted bool
}

// queue plans a command inside MULTI and queues it. Only key commands can
// be queued: they become one batch at EXEC.
func (c *conn) queue(cmd *command, args [][]byte, w *resp.Writer) {
	if cmd.plan == nil {
		c.multi.aborted = true
		w.Error("ERR Command not allowed inside a transaction: Concord's MULTI queues key commands only")
		return
	}
	p, err := cmd.plan(c, args)
	if err != nil {
		c.multi.aborted = true
		w.Error(err.Error())
		return
	}
	c.multi.plans = append(c.multi.plans, p)
	w.SimpleString("QUEUED")
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
	c.multi = &multiState{}
	w.SimpleString("OK")
}

func cmdDiscard(c *conn, _ [][]byte, w *resp.Writer) {
	if c.multi == nil {
		w.Error("ERR DISCARD without MULTI")
		return
	}
	c.multi = nil
	w.SimpleString("OK")
}

// cmdWatch refuses WATCH: optimistic locking needs to know at EXEC whether
// a key changed since WATCH, and a stored key has no version or revision to
// compare (kv's value envelope holds the value and expiry only). Comparing
// values instead would miss a change and change back.
func cmdWatch(c *conn, _ [][]byte, w *resp.Writer) {
	if c.multi != nil {
		w.Error("ERR WATCH inside MULTI is not allowed")
		return
	}
	w.Error("ERR WATCH is not supported by Concord: keys carry no version to watch; MULTI/EXEC over keys of one shard is atomic without it")
}

func cmdUnwatch(_ *conn, _ [][]byte, w *resp.Writer) { w.SimpleString("OK") }

// cmdExec sends every queued op as one BatchRequest: atomic, through one
// raft entry. The keys must all belong to one shard.
func cmdExec(c *conn, _ [][]byte, w *resp.Writer) {
	m := c.multi
	if m == nil {
		w.Error("ERR EXEC without MULTI")
		return
	}
	c.multi = nil
	if m.aborted {
		w.Error(string(errExecAbort))
		return
	}
	var ops []*concordpb.Op
	for _, p := range m.plans {
		ops = append(ops, p.ops...)
	}
	if len(ops) == 0 {
		w.Array(0)
		return
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	groups, _, err := c.byShard(ctx, ops)
	if err != nil {
		w.Error(err.Error())
		return
	}
	if len(groups) > 1 {
		w.Error(string(errCrossSlot))
		return
	}
	r, err := c.s.b.Batch(ctx, &concordpb.BatchRequest{Header: c.header(), Ops: ops})
	if err == nil && len(r.GetResults()) != len(ops) {
		err = replyError("ERR internal error: a batch answered with the wrong number of results")
	}
	if err != nil {
		w.Error(fromStatus(err, true).Error())
		return
	}
	res := r.GetResults()
	w.Array(len(m.plans))
	for _, p := range m.plans {
		p.answer(w, res[:len(p.ops)])
		res = res[len(p.ops):]
	}
}
