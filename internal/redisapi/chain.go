package redisapi

import (
	"context"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
)

// A write chain is the write commands of a pipeline's group (commands that
// run concurrently, see conn.run) whose ops all fall in one shard: they go
// to the shard as one BatchRequest, their ops in pipeline order, and each
// command renders its reply from its own slice of the results. Without
// chains, writes to the same key (redis-benchmark's SET without -r) each
// waited for their own raft commit before the next could start; a chain
// commits them together. A chain need not be consecutive: with random keys
// (-r) a pipeline's writes alternate between shards, and each was a batch
// of its own. Writes of one key stay in order: in one chain, or, when a
// write of the key cannot join the chain that holds it, in the next group.
// A batch applies an op that fails (INCR of a non-number) alone, so a
// chain answers each command as if it had run by itself; it only makes the
// chain's writes visible together, which no client can tell from running
// them back to back (the group's commands of other shards run
// concurrently with them anyway).
const (
	maxChainCalls = 64
	maxChainOps   = 256     // well under the KV service's 1,000 ops per batch
	maxChainBytes = 1 << 20 // keys and values, well under its 8 MiB
)

// A write chain's ops that return stored values (GETDEL, GETEX, SET with
// GET, the checks of MSETNX: kv.ReturnsValue) count at their worst, a
// value of --max-value-bytes each, against the result budget of a batch
// (kv.MaxResultBytes): a batch's ops past it fail at apply, and a command
// must not fail for having been chained with its neighbours (64
// pipelined GETDELs of 1 MiB values would). A command over the budget by
// itself still goes, alone.

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
// (see conn.run), with its write chains and read chains by shard. Every
// key of the group is in others (the keys of calls that head no write
// chain, true where written) or in chained (the keys a write chain writes,
// and the chain's head).
//
// A connection keeps one pending for all its pipelines: flush empties the
// maps instead of dropping them, and the chains' sizes come from sizes,
// so a group allocates nothing for its bookkeeping once the maps have
// grown (they were ~2.5 objects per pipelined SET).
type pending struct {
	group   []*call
	spare   []*call          // the group flush returned last, run by now: the next group's slice
	others  map[string]bool  // key -> written, as addKeys
	chained map[string]*call // key -> head of the write chain writing it
	writes  map[uint64]*chainSize
	reads   map[uint64]*readChain
	sizes   []chainSize // the chains' sizes; pointers into it stay valid (an append copies, the old array lives on)
}

// chainSize is a write chain of a pending group: its head, and the size
// of the head's and chained calls' ops: their number, their keys' and
// values' bytes, and the bytes of stored values they may return at worst
// (results; 0 for a read chain: reads are served without raft).
type chainSize struct {
	head                *call
	ops, bytes, results int
}

// readChain is a read chain of a pending group: its head, and the size of
// the head's and chained calls' ops.
type readChain = chainSize

// add puts cl (planned) into the group, and returns the group that must
// run before it when cl conflicts with it (nil if none).
func (c *conn) add(g *pending, cl *call) []*call {
	shard, chainable := c.chainShard(cl.plan)
	chainable = chainable && !cl.plan.avail // an available write goes alone (plan.avail)
	if cl.plan.read {
		return c.addRead(g, cl, shard, chainable)
	}
	ops, bytes, results := len(cl.plan.ops), opBytes(cl.plan), c.worstResults(cl.plan)
	if wc := g.writes[shard]; chainable && wc != nil && fits(wc, ops, bytes, results) &&
		!conflicts(g.others, cl.plan) && g.chainedOnlyBy(cl.plan, wc.head) {
		c.join(wc.head, cl)
		g.chain(cl.plan, wc.head)
		wc.ops += ops
		wc.bytes += bytes
		wc.results += results
		return nil
	}
	var before []*call
	if conflicts(g.others, cl.plan) || !g.chainedOnlyBy(cl.plan, nil) {
		before = g.flush()
	}
	g.group = append(g.group, cl)
	if !chainable {
		if g.others == nil {
			g.others = map[string]bool{}
		}
		addKeys(g.others, cl.plan)
		return before
	}
	if g.writes == nil {
		g.writes = map[uint64]*chainSize{}
	}
	// A full chain of the shard keeps its keys in chained: a later write
	// of one of them conflicts, and waits for the next group.
	g.writes[shard] = g.newSize(cl, ops, bytes, results)
	g.chain(cl.plan, cl)
	return before
}

// newSize returns a chain size for a chain headed by head, from g.sizes.
func (g *pending) newSize(head *call, ops, bytes, results int) *chainSize {
	g.sizes = append(g.sizes, chainSize{head: head, ops: ops, bytes: bytes, results: results})
	return &g.sizes[len(g.sizes)-1]
}

// chainSlots is how many calls a chain's first slots (carved from the
// connection's per-pipeline slots) hold before its list grows by append.
const chainSlots = 16

// join appends x to the chain of head. A chain's list starts in the
// connection's slots, which the next pipeline reuses (conn.serve), so a
// chain of up to chainSlots calls allocates nothing; the slots are
// capped, so a longer chain grows into memory of its own.
func (c *conn) join(head, x *call) {
	if head.chain == nil {
		if cap(c.slots) == 0 {
			c.slots = make([]*call, 0, 32*chainSlots)
		}
		if n := len(c.slots); cap(c.slots)-n >= chainSlots {
			c.slots = c.slots[:n+chainSlots]
			head.chain = c.slots[n : n : n+chainSlots]
		}
	}
	head.chain = append(head.chain, x)
}

// fits reports whether a call of ops ops, bytes bytes and results bytes
// of stored values at worst may join chain x.
func fits(x *chainSize, ops, bytes, results int) bool {
	return len(x.head.chain) < maxChainCalls-1 && x.ops+ops <= maxChainOps && x.bytes+bytes <= maxChainBytes &&
		x.results+results <= kv.MaxResultBytes
}

// worstResults is the bytes of stored values the ops of p may return at
// worst: a value of the size limit for each op that returns one.
func (c *conn) worstResults(p *plan) int {
	n := 0
	for _, op := range p.ops {
		if kv.ReturnsValue(op) {
			n += c.s.cfg.MaxValueBytes
		}
	}
	return n
}

// chainedOnlyBy reports whether every key of p that a write chain of the
// group writes is written by the chain of head (none at all for nil).
func (g *pending) chainedOnlyBy(p *plan, head *call) bool {
	for _, op := range p.ops {
		if h, ok := g.chained[string(op.GetKey())]; ok && h != head {
			return false
		}
	}
	return true
}

// chain records the keys of p (a write) as written by the chain of head.
func (g *pending) chain(p *plan, head *call) {
	if g.chained == nil {
		g.chained = map[string]*call{}
	}
	for _, op := range p.ops {
		if _, seen := g.chained[string(op.GetKey())]; !seen {
			g.chained[keyString(op.GetKey())] = head
		}
	}
}

// addRead puts the read cl into the group: into the read chain of its
// shard when it has one with room, else as a call of its own (heading the
// shard's chain if its keys fall in one shard). A read of a key the group
// writes must see that write: the group then runs first.
func (c *conn) addRead(g *pending, cl *call, shard uint64, chainable bool) []*call {
	var before []*call
	if conflicts(g.others, cl.plan) || !g.chainedOnlyBy(cl.plan, nil) {
		before = g.flush()
	}
	if g.others == nil {
		g.others = map[string]bool{}
	}
	addKeys(g.others, cl.plan)
	ops, bytes := len(cl.plan.ops), opBytes(cl.plan)
	if rc := g.reads[shard]; chainable && rc != nil && fits(rc, ops, bytes, 0) {
		c.join(rc.head, cl)
		rc.ops += ops
		rc.bytes += bytes
		return before
	}
	g.group = append(g.group, cl)
	if chainable {
		if g.reads == nil {
			g.reads = map[uint64]*readChain{}
		}
		g.reads[shard] = g.newSize(cl, ops, bytes, 0)
	}
	return before
}

// flush returns the gathered group and starts an empty one. The group's
// slice is its own until the next flush (the caller runs it while the next
// one starts gathering: add appends to the next group before its caller
// runs the one flushed; the caller has run it by the next flush, so its
// slice then serves again); the maps and sizes are emptied for reuse.
func (g *pending) flush() []*call {
	group := g.group
	clear(g.spare) // drop the calls it pointed to
	g.group, g.spare = g.spare[:0], group
	clear(g.others)
	clear(g.chained)
	clear(g.writes)
	clear(g.reads)
	clear(g.sizes) // drop the calls they point to
	g.sizes = g.sizes[:0]
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
	n := len(cl.plan.ops)
	for _, x := range cl.chain {
		n += len(x.plan.ops)
	}
	// The ops are the batch's: a forward or proposal cut short by ctx may
	// still hold them after this returns, so they are never reused.
	ops := append(make([]*concordpb.Op, 0, n), cl.plan.ops...)
	for _, x := range cl.chain {
		ops = append(ops, x.plan.ops...)
	}
	res, err := c.batch(ctx, ops)
	switch {
	case err != nil && refused(err, cl.plan.read) && !c.budget.Exhausted():
		c.execPlan(ctx, cl.plan, cl.out)
		for _, x := range cl.chain {
			c.execPlan(ctx, x.plan, x.out)
		}
	case err != nil:
		msg := fromStatus(err, !cl.plan.read).Error()
		cl.out.Error(msg)
		for _, x := range cl.chain {
			x.out.Error(msg)
		}
	default:
		res = answerFrom(cl, res)
		for _, x := range cl.chain {
			res = answerFrom(x, res)
		}
	}
}

// answerFrom answers x from the first of res (as many as x has ops) and
// returns the rest.
func answerFrom(x *call, res []*concordpb.OpResult) []*concordpb.OpResult {
	x.plan.answer(x.out, res[:len(x.plan.ops)])
	return res[len(x.plan.ops):]
}

// refused reports an error the KV service returns before proposing
// anything, so that the batch changed nothing: bad input
// (InvalidArgument), or the space alarm's refusal of a batch that adds
// data (then each command runs alone: a DEL chained with a SET still
// frees its key). Any other ResourceExhausted says so only for a read
// chain (a read budget passed; a read changes nothing anyway): for writes
// it is also gRPC's answer to a reply too large, after the leader applied
// the batch, and running each command again would apply it twice.
func refused(err error, read bool) bool {
	if _, ok := err.(replyError); ok {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument:
		return true
	case codes.ResourceExhausted:
		_, noSpace := noSpaceReason(status.Convert(err))
		return read || noSpace
	}
	return false
}

// A write over keys of several shards (MSET, DEL or UNLINK of several
// keys) is atomic per shard only (docs/redis.md). Run as a call of its
// own, it sent one batch per shard on goroutines of its own: a pipeline of
// 16 MSETs of 10 random keys made about 130 batches, where 160 SETs made
// at most 16 (one per shard's chain). So it is split into one part per
// shard, each a write of its own that joins its shard's write chain as a
// command would (the same conflict rules, so the pipeline's order per key
// holds), and the command is answered once its last part is: with the
// first failed part's error in the order its shards first appear (as
// batches reported it), else from all the parts' results.

// splitCall is a command split into parts, one per shard.
type splitCall struct {
	parent *call
	parts  []*call
	res    []*concordpb.OpResult // the parent's results, in its op order
	left   atomic.Int32          // parts not yet answered
	start  time.Time
}

// splitWrite returns the parts of cl when it is a write over several
// shards that may be split (nil otherwise).
func (c *conn) splitWrite(cl *call) []*call {
	p := cl.plan
	if p.read || p.oneShard || p.one != nil || len(p.ops) < 2 {
		return nil
	}
	if _, one := c.oneShard(p.ops); one {
		return nil
	}
	// The connection's reader must not wait for a starting node's shard
	// table: while it is unknown, the command takes the unsplit path,
	// which waits (shardOf). Once known it stays known, so byShard below
	// finds every key's shard at once.
	if _, known := c.s.b.ShardOf(p.ops[0].GetKey()); !known {
		return nil
	}
	groups, order, err := c.byShard(context.Background(), p.ops)
	if err != nil || len(order) < 2 {
		return nil
	}
	sp := &splitCall{parent: cl, res: make([]*concordpb.OpResult, len(p.ops)), start: time.Now()}
	sp.left.Store(int32(len(order)))
	parts := make([]call, len(order))
	for i, shard := range order {
		idx := groups[shard]
		ops := make([]*concordpb.Op, len(idx))
		for j, k := range idx {
			ops[j] = p.ops[k]
		}
		part := &parts[i]
		part.cmd, part.split = cl.cmd, sp
		part.plan = &plan{ops: ops, render: func(_ *resp.Writer, res []*concordpb.OpResult) {
			for j, k := range idx {
				sp.res[k] = res[j]
			}
		}}
		part.w.Init(c.proto, part.reply[:])
		part.out = &part.w
		sp.parts = append(sp.parts, part)
	}
	return sp.parts
}

// partDone notes that part x of a split command was answered (its
// results copied, or an error written to its own writer); the last part
// answers the command.
func (c *conn) partDone(x *call) {
	sp := x.split
	if sp.left.Add(-1) != 0 {
		return
	}
	cl := sp.parent
	for _, part := range sp.parts {
		if part.w.Len() > 0 { // a part writes nothing but an error
			cl.out.Raw(part.w.Bytes())
			c.observe(cl, sp.start)
			return
		}
	}
	cl.plan.answer(cl.out, sp.res)
	c.observe(cl, sp.start)
}

// keyString is key as a map key of a pending group without a copy (an
// insert of string(key) allocated one per group under pipelined SET). The
// bytes are a command's argument, never changed, and they outlive the map's
// entry: flush clears the maps at the group's end, and the arguments are
// reused (resp.Reader.ReuseArgs) only after the pipeline is answered.
func keyString(key []byte) string { return unsafe.String(unsafe.SliceData(key), len(key)) }
