package redisapi

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// A write chain is a run of consecutive write commands of one pipeline
// whose ops all fall in one shard: they go to the shard as one
// BatchRequest, their ops in pipeline order, and each command renders its
// reply from its own slice of the results. Without chains, writes to the
// same key (redis-benchmark's SET without -r) each waited for their own
// raft commit before the next could start; a chain commits them together.
// A batch applies an op that fails (INCR of a non-number) alone, so a
// chain answers each command as if it had run by itself; it only makes the
// chain's writes visible together, which no client can tell from running
// them back to back.
const (
	maxChainCalls = 64
	maxChainOps   = 256     // well under the KV service's 1,000 ops per batch
	maxChainBytes = 1 << 20 // keys and values, well under its 8 MiB
)

// pending is the group of key commands being gathered to run concurrently
// (see conn.run). Its last call may head a write chain that later writes
// of the same shard join; others holds the keys of the group's other calls.
type pending struct {
	group  []*call
	others map[string]bool // key -> written, as addKeys
	tail   *call           // heads a chain, or nil
	shard  uint64          // the tail's shard
	keys   map[string]bool // the tail chain's keys
	ops    int             // the tail chain's ops
	bytes  int             // and their keys' and values' bytes
}

// add puts cl (planned) into the group, and returns the group that must
// run before it when cl conflicts with it (nil if none).
func (c *conn) add(g *pending, cl *call) []*call {
	shard, chainable := c.chainShard(cl.plan)
	if g.tail != nil && chainable && shard == g.shard && !conflicts(g.others, cl.plan) &&
		len(g.tail.chain) < maxChainCalls-1 && g.ops+len(cl.plan.ops) <= maxChainOps && g.bytes+opBytes(cl.plan) <= maxChainBytes {
		g.tail.chain = append(g.tail.chain, cl)
		addKeys(g.keys, cl.plan)
		g.ops += len(cl.plan.ops)
		g.bytes += opBytes(cl.plan)
		return nil
	}
	var before []*call
	if g.others != nil && (conflicts(g.others, cl.plan) || conflicts(g.keys, cl.plan)) {
		before = g.flush()
	}
	if g.others == nil {
		g.others = map[string]bool{}
	}
	for k, w := range g.keys {
		g.others[k] = g.others[k] || w
	}
	g.group = append(g.group, cl)
	g.tail, g.keys, g.ops, g.bytes = nil, nil, 0, 0
	if chainable {
		g.tail, g.shard, g.keys = cl, shard, map[string]bool{}
		addKeys(g.keys, cl.plan)
		g.ops, g.bytes = len(cl.plan.ops), opBytes(cl.plan)
	} else {
		addKeys(g.others, cl.plan)
	}
	return before
}

// flush returns the gathered group and starts an empty one.
func (g *pending) flush() []*call {
	group := g.group
	*g = pending{}
	return group
}

// chainShard returns the shard of a write plan whose ops all fall in one
// shard; false for reads, plans over several shards, and when the node does
// not know the shards yet.
func (c *conn) chainShard(p *plan) (uint64, bool) {
	if p.read || len(p.ops) == 0 {
		return 0, false
	}
	groups, order, err := c.byShard(p.ops)
	if err != nil || len(groups) != 1 {
		return 0, false
	}
	return order[0], true
}

func opBytes(p *plan) int {
	n := 0
	for _, op := range p.ops {
		n += len(op.GetKey()) + len(op.GetValue())
	}
	return n
}

// execChain runs cl and the calls chained to it as one batch. If the batch
// is refused as a whole before anything applied (bad input: one command's
// TTL, a limit), each command runs alone instead, so that only the bad one
// gets the error.
func (c *conn) execChain(cl *call) {
	calls := append([]*call{cl}, cl.chain...)
	var ops []*concordpb.Op
	for _, x := range calls {
		ops = append(ops, x.plan.ops...)
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
	defer cancel()
	r, err := c.s.b.Batch(ctx, &concordpb.BatchRequest{Header: c.header(), Ops: ops})
	if err != nil && refused(err) {
		for _, x := range calls {
			c.execPlan(x.plan, x.out)
		}
		return
	}
	if err == nil && len(r.GetResults()) != len(ops) {
		err = replyError("ERR internal error: a batch answered with the wrong number of results")
	}
	if err != nil {
		for _, x := range calls {
			x.out.Error(fromStatus(err, true).Error())
		}
		return
	}
	res := r.GetResults()
	for _, x := range calls {
		x.plan.render(x.out, res[:len(x.plan.ops)])
		res = res[len(x.plan.ops):]
	}
}

// refused reports an error the KV service returns before proposing
// anything: the batch changed nothing.
func refused(err error) bool {
	if _, ok := err.(replyError); ok {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted:
		return true
	}
	return false
}
