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

// A read chain is the same for reads: the read commands of a group (reads
// of keys no write of the group touches) whose keys all fall in one shard
// go as one BatchRequest of OP_GETs, which the KV service serves as one
// linearizable read: one ReadIndex barrier and one view of the shard for
// all their keys, forwarded whole when another node leads the shard
// (grpcapi.KV.Batch). Without them each GET of a pipeline was a read of its
// own, on a goroutine of its own. Reads need not be consecutive to share a
// chain: a group holds no write of a key it reads, so a read sees the same
// state wherever in the group it runs.

// pending is the group of key commands being gathered to run concurrently
// (see conn.run). Its last call may head a write chain that later writes
// of the same shard join; others holds the keys of the group's other calls.
// reads are the group's read chains, by shard.
type pending struct {
	group  []*call
	others map[string]bool // key -> written, as addKeys
	tail   *call           // heads a chain, or nil
	shard  uint64          // the tail's shard
	keys   map[string]bool // the tail chain's keys
	ops    int             // the tail chain's ops
	bytes  int             // and their keys' and values' bytes
	reads  map[uint64]*readChain
}

// readChain is a read chain of a pending group: its head, and the size of
// the head's and chained calls' ops.
type readChain struct {
	head       *call
	ops, bytes int
}

// add puts cl (planned) into the group, and returns the group that must
// run before it when cl conflicts with it (nil if none).
func (c *conn) add(g *pending, cl *call) []*call {
	shard, chainable := c.chainShard(cl.plan)
	if cl.plan.read {
		return c.addRead(g, cl, shard, chainable)
	}
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

// addRead puts the read cl into the group: into the read chain of its
// shard when it has one with room, else as a call of its own (heading the
// shard's chain if its keys fall in one shard). A read of a key the group
// writes must see that write: the group then runs first.
func (c *conn) addRead(g *pending, cl *call, shard uint64, chainable bool) []*call {
	var before []*call
	if conflicts(g.others, cl.plan) || conflicts(g.keys, cl.plan) {
		before = g.flush()
	}
	if g.others == nil {
		g.others = map[string]bool{}
	}
	addKeys(g.others, cl.plan)
	ops, bytes := len(cl.plan.ops), opBytes(cl.plan)
	if rc := g.reads[shard]; chainable && rc != nil && len(rc.head.chain) < maxChainCalls-1 &&
		rc.ops+ops <= maxChainOps && rc.bytes+bytes <= maxChainBytes {
		rc.head.chain = append(rc.head.chain, cl)
		rc.ops += ops
		rc.bytes += bytes
		return before
	}
	g.group = append(g.group, cl)
	if chainable {
		if g.reads == nil {
			g.reads = map[uint64]*readChain{}
		}
		g.reads[shard] = &readChain{head: cl, ops: ops, bytes: bytes}
	}
	return before
}

// flush returns the gathered group and starts an empty one.
func (g *pending) flush() []*call {
	group := g.group
	*g = pending{}
	return group
}

// chainShard returns the shard of a plan whose ops all fall in one shard;
// false for plans over several shards, and when the node does not know the
// shards yet.
func (c *conn) chainShard(p *plan) (uint64, bool) { return c.oneShard(p.ops) }

// oneShard returns the shard of ops when they all fall in one; false for
// ops over several shards, none, or when the node does not know the
// shards yet.
func (c *conn) oneShard(ops []*concordpb.Op) (uint64, bool) {
	if len(ops) == 0 {
		return 0, false
	}
	// Called for every planned command: no grouping, no allocation.
	shard, ok := c.s.b.ShardOf(ops[0].GetKey())
	for _, op := range ops[1:] {
		if !ok {
			break
		}
		s, known := c.s.b.ShardOf(op.GetKey())
		ok = known && s == shard
	}
	return shard, ok
}

func opBytes(p *plan) int {
	n := 0
	for _, op := range p.ops {
		n += len(op.GetKey()) + len(op.GetValue())
	}
	return n
}

// execChain runs cl and the calls chained to it as one batch (a write
// chain or a read chain). If the batch is refused as a whole before
// anything applied (bad input: one command's TTL, a limit), each command
// runs alone instead, so that only the bad one gets the error.
func (c *conn) execChain(ctx context.Context, cl *call) {
	calls := append([]*call{cl}, cl.chain...)
	var ops []*concordpb.Op
	for _, x := range calls {
		ops = append(ops, x.plan.ops...)
	}
	res, err := c.batch(ctx, ops)
	if err != nil && refused(err) {
		for _, x := range calls {
			c.execPlan(ctx, x.plan, x.out)
		}
		return
	}
	if err != nil {
		for _, x := range calls {
			x.out.Error(fromStatus(err, !cl.plan.read).Error())
		}
		return
	}
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
