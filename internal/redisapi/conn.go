package redisapi

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
)

// maxPipeline bounds the commands one pipeline step reads before it runs
// them, and maxPipelineBytes their size on the wire.
const (
	maxPipeline      = 1024
	maxPipelineBytes = 8 << 20
)

// conn is one client connection. Its goroutine (serve) owns every field but
// those under mu, which CLIENT LIST reads from other connections.
type conn struct {
	s       *Server
	nc      net.Conn
	id      int64
	r       *resp.Reader
	bw      *bufio.Writer
	created time.Time

	proto       int
	authed      bool
	consistency concordpb.Consistency
	multi       *multiState // non-nil between MULTI and EXEC/DISCARD
	watch       watchState  // the keys WATCH read, until EXEC, DISCARD, UNWATCH or RESET
	quit        bool        // close after the replies are written
	calls       []*call     // the last pipeline's, emptied: reused by the next
	// Per-pipeline memory reused by the next pipeline once the replies are
	// written (nothing refers to a call, a group or a chain after that):
	// the call blocks readPipeline fills, the pending group's maps, and
	// the slots chains are carved from. A pipelined SET allocated ~2.5
	// objects of its own for these besides its plan.
	blocks [][]call
	pend   pending
	slots  []*call
	// onePlans is the block one-op plans (a SET's, a GET's) are carved
	// from (newOnePlan).
	onePlans []onePlan
	// held is set when a command of the current pipeline may leave its
	// memory (arguments, one-op plans) in use past its answer: it ran alone
	// (dispatch: MULTI queues its arguments, a command may keep them), or
	// a batch of it failed (a batch cut short by its context may still be
	// queued, forwarded or proposed, holding its ops). Otherwise every
	// batch was answered, and nothing refers to the pipeline's arguments
	// or plans once its replies are written: endPipeline reuses them.
	held atomic.Bool
	// The context of the last group of key commands and until when it
	// serves new groups (groupCtx).
	gctx      context.Context
	gcancel   context.CancelFunc
	gctxUntil time.Time
	// wdlSet is when the write deadline was last set (writeDeadline).
	wdlSet time.Time
	// last is the last command looked up, by the name it was sent as: a
	// pipeline repeats one name, and a map lookup of it cost 2 % of a Redis
	// node under pipelined SET.
	last struct {
		name [16]byte
		n    int
		cmd  *command
	}

	// budget bounds the values the pipeline's reads gather (its output
	// buffer limit), charged as they are read (kv.Budget); outBytes counts
	// the replies answered so far. Past either the connection is over its
	// output buffer limit (over): nothing more of the pipeline runs, and
	// the connection is closed, as Redis closes a client past
	// client-output-buffer-limit.
	budget   *kv.Budget
	outBytes int
	over     bool

	// silent is set by Server.admit while the connection has sent no
	// command: each read of its first one's bytes moves the first-command
	// deadline on (progressReader), and the command, once whole, lifts it
	// (Server.spoke). silentAt is its place among the server's silent
	// connections until then (and, with a token, until it logs in),
	// guarded by the server's mu.
	silent   bool
	silentAt *list.Element

	// tentative counts the writes of this connection the node held as
	// tentative (available mode: execAvailable), for CLIENT INFO/LIST.
	tentative atomic.Int64

	mu       sync.Mutex
	name     string // guarded by mu
	libName  string // guarded by mu: CLIENT SETINFO lib-name
	libVer   string // guarded by mu: CLIENT SETINFO lib-ver
	lastCmd  string // guarded by mu
	nWatched int    // guarded by mu: len(watch.keys), for CLIENT LIST
	nQueued  int    // guarded by mu: the commands MULTI queued, -1 outside MULTI, for CLIENT LIST
}

func newConn(s *Server, nc net.Conn, id int64) *conn {
	c := &conn{s: s, nc: nc, id: id, bw: bufio.NewWriterSize(nc, 64<<10),
		created: time.Now(), proto: 2, nQueued: -1,
		budget: kv.NewBudget(int64(s.cfg.OutputBufferLimit), nil)}
	c.r = resp.NewReader(progressReader{c}, s.limits)
	c.setAuthed(s.cfg.AuthToken == "")
	return c
}

// progressReader is the connection as its command reader reads it: while
// the first command arrives (silent), each read that returns bytes moves
// the first-command deadline on (Server.progressed). The deadline is for
// starting to speak, and then for progress: a large first command over a
// slow link may take longer than it in all.
type progressReader struct{ c *conn }

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.c.nc.Read(b)
	if n > 0 && p.c.silent {
		p.c.s.progressed(p.c)
	}
	return n, err
}

// unauthLimits bound the commands of a connection that has not given the
// token, as Redis bounds an unauthenticated client's (10 arguments, 16 KiB
// each): enough for AUTH and HELLO AUTH, while a client without the token
// cannot make the node buffer a large command (or a pipeline of them) only
// to answer NOAUTH.
var unauthLimits = resp.Limits{MaxBulkBytes: 16 << 10, MaxArgs: 10, MaxInlineBytes: 16 << 10, MaxCommandBytes: 10 * (16 << 10),
	Unauthenticated: true}

// setAuthed records whether the connection may run every command, and
// gives its reader the limits that go with that.
func (c *conn) setAuthed(ok bool) {
	c.authed = ok
	if ok {
		c.r.SetLimits(c.s.limits)
	} else {
		c.r.SetLimits(unauthLimits)
	}
}

// login marks c authenticated by AUTH or HELLO ... AUTH: the node's
// limits, and it is no longer pushed out for a new connection (it has
// spoken: the command that logged it in).
func (c *conn) login() {
	c.setAuthed(true)
	c.s.proven(c)
}

// clientGone says whether the client has closed the connection: a long
// command (a walk of the keyspace, a costly match) asks it now and then to
// stop early for a client that left.
func (c *conn) clientGone() bool {
	return c.nc != nil && peerClosed(c.nc)
}

// call is one command read from the stream, and its reply once run.
type call struct {
	args [][]byte
	cmd  *command
	plan *plan // set for a key command planned for concurrent running
	// chain: later writes of the pipeline that run in this call's batch
	// (chain.go).
	chain []*call
	// split: set on a part of a command split by shard (chain.go); the
	// part's reply is the command's, written by partDone.
	split *splitCall
	out   *resp.Writer // &w, or nil: no reply
	w     resp.Writer
	// reply is w's first buffer: a short reply ("+OK", ":1", an error
	// code) allocates nothing.
	reply [24]byte
}

// serve reads pipelines and answers them until the client leaves, breaks
// the protocol, or the server closes.
func (c *conn) serve() {
	defer c.nc.Close()
	defer c.endGroupCtx()
	for !c.quit && c.servePipeline() {
	}
}

// servePipeline reads one pipeline, runs it and writes its replies; false
// when the connection is to end.
func (c *conn) servePipeline() bool {
	c.slots = c.slots[:0]
	calls, readErr := c.readPipeline()
	c.calls = calls // its length sizes the one-op plans' block (newOnePlan)
	c.budget.Reset()
	c.outBytes, c.over = 0, false
	c.run(calls)
	if c.over {
		c.s.cfg.Logger.Warn("redis client over the output buffer limit; disconnecting", "client", c.id,
			"limit", c.s.cfg.OutputBufferLimit)
		return false
	}
	pe := protocolError(readErr)
	if pe != nil {
		w := resp.NewWriter(c.proto)
		w.Error("ERR " + pe.Error())
		calls = append(calls, &call{out: w})
	}
	if err := c.writeReplies(calls); err != nil {
		return false
	}
	clear(calls) // answered: let them go
	c.calls = calls[:0]
	c.endPipeline()
	if readErr != nil {
		if errors.Is(readErr, errCrossProtocol) {
			c.s.crossProtocolWarning(c)
			return false
		}
		if !errors.Is(readErr, io.EOF) && !errors.Is(readErr, net.ErrClosed) && pe == nil {
			c.s.cfg.Logger.Debug("redis connection read failed", "client", c.id, "err", readErr)
		}
		return false
	}
	return true
}

// errCrossProtocol ends the pipeline at a command named POST or Host:
// (crossProtocol): the connection is closed without an answer to it.
var errCrossProtocol = errors.New("a command named POST or Host:")

// crossProtocol reports whether a command's name is "POST" or "Host:", in
// any case: no Redis command, but the first words of an HTTP request's
// lines. Redis closes such a connection unanswered, and logs it as a
// possible attack (securityWarningCommand, networking.c): a web page can
// make a browser POST to a Redis port with commands in the body, which
// Redis would otherwise run line by line after answering the HTTP lines
// with errors. An HTTP request sent to the port by mistake (a health
// check) is closed at once instead of left open.
func crossProtocol(name []byte) bool {
	switch len(name) {
	case 4:
		return bytes.EqualFold(name, []byte("post"))
	case 5:
		return bytes.EqualFold(name, []byte("host:"))
	}
	return false
}

// protocolError returns err as a *resp.ProtocolError, or nil. A function
// of its own, called only on an error: errors.As makes its target escape,
// an allocation per pipeline where serve declared it.
func protocolError(err error) *resp.ProtocolError {
	if err == nil {
		return nil
	}
	var pe *resp.ProtocolError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// endPipeline lets the next pipeline reuse this one's arguments and one-op
// plans when none of them can be in use (held), and leaves them to their
// holders otherwise. Called once the pipeline is answered: every group has
// ended, so every batch of it has returned. A batch that returned without
// an error was answered, and its ops were done with: the KV service
// answers a forwarded batch once the leader has answered, which it does
// after the request was read whole, and a proposed one once the entry
// (encoded from the ops when proposed) was applied.
func (c *conn) endPipeline() {
	if c.held.Swap(false) {
		c.r.DropArgs()
		c.onePlans = nil
		return
	}
	c.r.ReuseArgs()
	c.onePlans = c.onePlans[:0]
}

// readPipeline reads one command, waiting for it, then every further
// command already buffered, within maxPipeline and maxPipelineBytes. It
// returns what it read and the error that ended the stream, if any.
func (c *conn) readPipeline() ([]*call, error) {
	calls := c.calls[:0]
	var block []call // calls come 16 at a time: reused blocks first
	used := 0
	size := 0
	for len(calls) < maxPipeline && size < maxPipelineBytes {
		// Unauthenticated, one command at a time: an AUTH runs, and lifts
		// the reader's limits, before the command after it is read. And
		// only a command that has begun to arrive joins the pipeline: with
		// nothing but blank lines buffered (which ReadCommand skips), the
		// read would wait for the client's next command with this
		// pipeline's replies unwritten, and a client waiting for them
		// would wait for ever.
		if len(calls) > 0 && (!c.r.CommandBuffered() || !c.authed) {
			return calls, nil
		}
		args, n, err := c.r.ReadCommand()
		if err != nil {
			return calls, err
		}
		size += n
		if len(args) > 0 {
			if crossProtocol(args[0]) {
				return calls, errCrossProtocol // not run, not answered: the commands before it are
			}
			if c.silent {
				c.silent = false
				c.s.spoke(c)
			}
			if len(block) == cap(block) {
				block = c.callBlock(used)
				used++
			}
			block = append(block, call{args: args})
			calls = append(calls, &block[len(block)-1])
		}
	}
	return calls, nil
}

// maxReusedBlocks bounds the call blocks a connection keeps between
// pipelines (64 calls, ~9 KiB): a rare long pipeline allocates the rest.
const maxReusedBlocks = 4

// callBlock returns the i-th empty block of 16 calls of this pipeline: a
// block kept from an earlier pipeline while there are some.
func (c *conn) callBlock(i int) []call {
	if i < len(c.blocks) {
		return c.blocks[i][:0]
	}
	b := make([]call, 0, 16)
	if i < maxReusedBlocks {
		c.blocks = append(c.blocks, b)
	}
	return b
}

// run runs a pipeline: consecutive key commands whose keys do not conflict
// run concurrently, their writes to one shard as one batch (a write chain,
// chain.go); any other command runs alone, after those before it.
func (c *conn) run(calls []*call) {
	g := &c.pend
	for _, cl := range calls {
		cl.w.Init(c.proto, cl.reply[:]) // no allocation per command
		cl.out = &cl.w
		if c.quit || c.over {
			cl.out = nil // nothing after QUIT is answered; nothing past the output limit runs
			continue
		}
		if p := c.planConcurrent(cl); p != nil {
			cl.plan = p
			if parts := c.splitWrite(cl); parts != nil {
				for _, part := range parts { // cl is answered by its last part (partDone)
					c.runGroup(c.add(g, part))
				}
				continue
			}
			c.runGroup(c.add(g, cl))
			continue
		}
		c.runGroup(g.flush())
		if c.over {
			cl.out = nil
			continue
		}
		start := time.Now()
		c.dispatch(cl)
		c.observe(cl, start)
		c.answered(cl)
	}
	c.runGroup(g.flush())
}

// answered counts cl's reply, just written, toward the pipeline's output
// buffer limit: replies are bounded as they are produced, not once the
// whole pipeline has run (a pipeline of GETDELs of large values, of
// CLIENT LISTs, held them all first).
func (c *conn) answered(cl *call) {
	if cl.out != nil {
		c.outBytes += cl.out.Len()
	}
	if c.outBytes > c.s.cfg.OutputBufferLimit || c.budget.Exhausted() {
		c.over = true
	}
}

// observe reports one answered command to Config.Observe.
func (c *conn) observe(cl *call, start time.Time) {
	if c.s.cfg.Observe == nil || cl.out == nil || cl.split != nil {
		return
	}
	c.observeTook(cl, time.Since(start))
}

// observeTook reports one answered command that took d to Config.Observe
// (through ObserveOK's observer of its command, if it succeeded).
func (c *conn) observeTook(cl *call, d time.Duration) {
	if c.s.cfg.Observe == nil || cl.out == nil || cl.split != nil { // a part: its command is observed once, by partDone
		return
	}
	code := cl.out.ErrorCode()
	if code == "" && cl.cmd != nil && c.s.cfg.ObserveOK != nil {
		c.s.okObserver(cl.cmd)(d)
		return
	}
	name := "unknown"
	if cl.cmd != nil {
		name = cl.cmd.name
	}
	c.s.cfg.Observe(name, code, d)
}

// okObserver is Config.ObserveOK of cmd, asked once per command.
func (s *Server) okObserver(cmd *command) func(time.Duration) {
	if o, ok := s.okObs.Load(cmd); ok {
		return o.(func(time.Duration))
	}
	o, _ := s.okObs.LoadOrStore(cmd, s.cfg.ObserveOK(cmd.name))
	return o.(func(time.Duration))
}

// planConcurrent returns the plan of cl if it is a key command that may run
// concurrently with its neighbours: outside MULTI, after authentication,
// with valid arguments. Anything else (including a planning error, which
// dispatch then answers) returns nil.
func (c *conn) planConcurrent(cl *call) *plan {
	cl.cmd = c.lookup(cl.args[0])
	if cl.cmd == nil || cl.cmd.plan == nil || c.multi != nil || !c.authed || !cl.cmd.arityOK(len(cl.args)) {
		return nil
	}
	p, err := cl.cmd.plan(c, cl.args)
	if err != nil {
		return nil
	}
	return p
}

func conflicts(keys map[string]bool, p *plan) bool {
	for _, op := range p.ops {
		written, seen := keys[string(op.GetKey())]
		if seen && (written || !p.read) {
			return true
		}
	}
	return false
}

func addKeys(keys map[string]bool, p *plan) {
	for _, op := range p.ops {
		// A lookup of string(key) allocates nothing; an insert aliases the
		// key (keyString): only what changes is inserted.
		if written, seen := keys[string(op.GetKey())]; seen && (written || p.read) {
			continue
		}
		keys[keyString(op.GetKey())] = !p.read
	}
}

// runGroup runs planned key commands (and their chains) concurrently and
// waits for them all. They start together, so one context bounds them
// all (groupCtx).
func (c *conn) runGroup(group []*call) {
	if len(group) == 0 {
		return
	}
	defer c.answeredGroup(group)
	ctx := c.groupCtx()
	if len(group) == 1 {
		c.runCall(ctx, group[0])
		return
	}
	// The connection's goroutine runs the first call itself: one
	// goroutine fewer to start and wake per group (with random keys, a
	// pipeline's group has a chain per shard it touches).
	var wg sync.WaitGroup
	for _, cl := range group[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runCall(ctx, cl)
		}()
	}
	c.runCall(ctx, group[0])
	wg.Wait()
}

// answeredGroup counts the replies of a group that has run, its chained
// calls' too.
func (c *conn) answeredGroup(group []*call) {
	for _, cl := range group {
		c.answered(cl)
		for _, x := range cl.chain {
			c.answered(x)
		}
	}
}

// groupCtx returns the context that bounds a group starting now: its
// deadline is at most CommandTimeout and at least CommandTimeout less
// groupCtxReuse from now. One context (a cancelCtx, a timer, a
// registration with the server's) per group was 3 % of a Redis node's CPU
// under pipelined SET, one group per pipeline; a connection now reuses its
// last group's context for the groups that start within groupCtxReuse of
// it (~20 pipelines of redis-benchmark -P 16), and cancels it when it makes
// the next or the connection ends. Groups run one after another, so no
// group still runs under a context this cancels.
func (c *conn) groupCtx() context.Context {
	now := time.Now()
	if c.gctx != nil && now.Before(c.gctxUntil) {
		return c.gctx
	}
	c.endGroupCtx()
	ctx, cancel := context.WithDeadline(c.s.ctx, now.Add(c.s.cfg.CommandTimeout))
	c.gctx, c.gcancel = kv.WithBudget(ctx, c.budget), cancel // the group's reads charge the pipeline's budget
	c.gctxUntil = now.Add(min(groupCtxReuse, c.s.cfg.CommandTimeout/100))
	return c.gctx
}

// groupCtxReuse bounds how long a group context serves later groups (and
// CommandTimeout/100: what a group may lose of its timeout).
const groupCtxReuse = 100 * time.Millisecond

// endGroupCtx cancels the connection's group context, if any.
func (c *conn) endGroupCtx() {
	if c.gcancel != nil {
		c.gcancel()
		c.gctx, c.gcancel = nil, nil
	}
}

// runCall runs one planned call, and its chain as one batch, and reports
// each command (a chained one with the batch's time).
func (c *conn) runCall(ctx context.Context, cl *call) {
	start := time.Now()
	if len(cl.chain) == 0 {
		c.noteCommand(cl.cmd)
		c.execPlan(ctx, cl.plan, cl.out)
		c.observe(cl, start)
		if cl.split != nil {
			c.partDone(cl)
		}
		return
	}
	c.noteCommand(cl.chain[len(cl.chain)-1].cmd) // the chain's last: once, not per command
	c.execChain(ctx, cl)
	d := time.Since(start) // the chain's commands took the batch's time
	c.observeTook(cl, d)
	for _, x := range cl.chain {
		c.observeTook(x, d)
	}
	if cl.split != nil {
		c.partDone(cl)
	}
	for _, x := range cl.chain {
		if x.split != nil {
			c.partDone(x)
		}
	}
}

// dispatch runs one command alone: checks its name, arity and the
// connection's authentication, queues it inside MULTI, or runs it.
func (c *conn) dispatch(cl *call) {
	c.held.Store(true) // a command alone may keep its arguments (MULTI queues them)
	w := cl.out
	if cl.cmd == nil {
		cl.cmd = c.lookup(cl.args[0])
	}
	cmd := cl.cmd
	switch {
	case cmd == nil:
		c.abortMulti()
		w.Error(unknownCommand(cl.args))
		return
	case !cmd.arityOK(len(cl.args)) && cmd.name == "exec":
		// Redis aborts: it discards the transaction, if any, and its
		// watched keys, and says so.
		c.setMulti(nil)
		c.unwatch()
		w.Error("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command")
		return
	case !cmd.arityOK(len(cl.args)):
		c.abortMulti()
		w.Error("ERR wrong number of arguments for '" + cmd.name + "' command")
		return
	case !c.authed && !cmd.noAuth:
		w.Error(string(errNoAuth))
		return
	}
	c.noteCommand(cmd)
	if c.multi != nil && !cmd.inMulti {
		c.queue(cmd, cl.args, w)
		return
	}
	if cmd.plan != nil {
		p, err := cmd.plan(c, cl.args)
		if err != nil {
			w.Error(err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.CommandTimeout)
		defer cancel()
		c.execPlan(kv.WithBudget(ctx, c.budget), p, w)
		return
	}
	cmd.run(c, cl.args, w)
}

// lookup is lookup with the connection's one-entry cache: the same name,
// byte for byte, is the same command.
func (c *conn) lookup(name []byte) *command {
	l := &c.last
	if l.cmd != nil && len(name) == l.n && string(name) == string(l.name[:l.n]) {
		return l.cmd
	}
	cmd := lookup(name)
	if cmd != nil && len(name) <= len(l.name) {
		l.n = copy(l.name[:], name)
		l.cmd = cmd
	}
	return cmd
}

func (c *conn) noteCommand(cmd *command) {
	c.mu.Lock()
	c.lastCmd = cmd.name
	c.mu.Unlock()
}

// unknownCommand is Redis's text for a command it does not know: the
// name, then the arguments quoted while the list is under 128 bytes, each
// cut to what is left of the 128.
func unknownCommand(args [][]byte) string {
	var list strings.Builder
	for _, a := range args[1:] {
		if list.Len() >= 128 {
			break
		}
		list.WriteString("'" + cString(a, 128-list.Len()) + "' ")
	}
	return "ERR unknown command '" + cString(args[0], 128) + "', with args beginning with: " + list.String()
}

// cString is s as Redis's "%.*s" prints an argument into an error text:
// up to its first zero byte, at most max bytes (resp.Writer.Error turns
// CR and LF into spaces, as Redis does).
func cString(s []byte, max int) string {
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s[:min(len(s), max)])
}

// writeDeadline gives the replies about to be written at least
// WriteTimeout less its hundredth: the deadline set last is moved only
// once that much of it has passed. Setting it for every pipeline (a lock
// and a runtime timer moved, one per pipeline) was 1 % of a Redis node
// under pipelined SET.
func (c *conn) writeDeadline() {
	now := time.Now()
	if now.Sub(c.wdlSet) < c.s.cfg.WriteTimeout/100 {
		return
	}
	_ = c.nc.SetWriteDeadline(now.Add(c.s.cfg.WriteTimeout))
	c.wdlSet = now
}

// writeReplies writes the replies in request order and flushes. A client
// whose replies exceed the output buffer limit, or that does not read them
// within WriteTimeout, is disconnected.
func (c *conn) writeReplies(calls []*call) error {
	total := 0
	for _, cl := range calls {
		if cl.out != nil {
			total += cl.out.Len()
		}
	}
	if total > c.s.cfg.OutputBufferLimit {
		c.s.cfg.Logger.Warn("redis client over the output buffer limit; disconnecting", "client", c.id,
			"bytes", total, "limit", c.s.cfg.OutputBufferLimit)
		return errors.New("output buffer limit")
	}
	if total == 0 {
		return nil // nothing to write (the stream ended; the bufio.Writer is always flushed)
	}
	c.writeDeadline()
	for _, cl := range calls {
		if cl.out == nil {
			continue
		}
		if _, err := c.bw.Write(cl.out.Bytes()); err != nil {
			return err
		}
	}
	return c.bw.Flush()
}
