package multiraftest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// Options shapes a Cluster.
type Options struct {
	// Nodes is the number of nodes bootstrapped (default 3).
	Nodes int
	// Shards is the number of user shards, 1..Shards (default 1). There is
	// no meta shard: placement is fixed by the test.
	Shards int
	// Replicas per shard (default and at most Nodes), placed round-robin
	// from node s for shard s as the real bootstrap does; the first is the
	// shard's preferred leader and campaigns at start.
	Replicas int
	// Seed drives every random fault; 0 means Seed(t).
	Seed int64
	// Configure adjusts each host's config (log truncation thresholds, ...).
	Configure func(*multiraft.Config)
	// Logger receives the hosts' logs; nil discards them.
	Logger *slog.Logger
	// PowerCuts gives each node a file system that PowerCut can crash
	// (slower than the plain in-memory one).
	PowerCuts bool
}

// Cluster is N nodes, each a real multiraft.Host on its own engine, on one
// in-memory Network.
type Cluster struct {
	t     testing.TB
	opts  Options
	rng   *rand.Rand
	Net   *Network
	nodes map[ids.NodeID]*Node
	descs []*concordpb.ShardDescriptor
	table *routing.Table
	// Clock is every host's monotonic clock (Config.Clock); it moves one
	// tick interval per round of ticks, and by hand (Advance).
	Clock        *ManualClock
	tickInterval time.Duration
}

// Node is one member of a Cluster. Its fields are for reading; change it
// through the Cluster.
type Node struct {
	ID     ids.NodeID
	Host   *multiraft.Host // nil while stopped
	Engine *storage.Engine // nil while stopped
	fs     storage.FS
	dir    string
	ticks  *ManualTicks
	idBase uint64
	// image, if set, is the disk the next PowerCut leaves (CrashImage).
	image atomic.Pointer[storage.FS]
}

// New bootstraps a cluster as internal/node would and starts every node.
// It stops everything when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts = withDefaults(opts)
	if opts.Seed == 0 {
		opts.Seed = Seed(t)
	}
	rng := rand.New(rand.NewSource(opts.Seed))
	c := &Cluster{t: t, opts: opts, rng: rng, Net: newNetwork(rng.Int63()), nodes: map[ids.NodeID]*Node{},
		Clock: &ManualClock{}}
	c.Clock.Advance(time.Hour) // no host starts at time 0
	c.descs = placement(opts)
	c.table = routing.NewTable(c.descs)
	for id := ids.NodeID(1); id <= ids.NodeID(opts.Nodes); id++ {
		c.bootstrap(c.addNode(id))
	}
	for _, n := range c.Nodes() {
		c.Start(n.ID)
	}
	t.Cleanup(c.stopAll)
	return c
}

func withDefaults(o Options) Options {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Shards == 0 {
		o.Shards = 1
	}
	if o.Replicas == 0 || o.Replicas > o.Nodes {
		o.Replicas = o.Nodes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// placement is internal/node's initial placement of user shards 1..S:
// shard s's replicas go round-robin from node s, each replica id being its
// node's id.
func placement(o Options) []*concordpb.ShardDescriptor {
	starts, ends := routing.Ranges(o.Shards)
	var out []*concordpb.ShardDescriptor
	for i := range starts {
		d := &concordpb.ShardDescriptor{ShardId: uint64(i + 1), StartHash: starts[i], EndHash: ends[i], Epoch: 1,
			NextReplicaId: uint64(o.Nodes + 1)}
		for j := range o.Replicas {
			node := uint64((i+j)%o.Nodes + 1)
			d.Replicas = append(d.Replicas, &concordpb.ReplicaDescriptor{ReplicaId: node, NodeId: node})
		}
		out = append(out, d)
	}
	return out
}

func (c *Cluster) addNode(id ids.NodeID) *Node {
	n := &Node{ID: id, fs: storage.NewMemFS(), dir: fmt.Sprintf("/node%d", id), idBase: c.rng.Uint64() | 1}
	if c.opts.PowerCuts {
		n.fs = storage.NewCrashableMemFS()
	}
	c.nodes[id] = n
	return n
}

// bootstrap writes n's replicas of the initial placement, as
// internal/node's bootstrap does (storage.BootstrapReplica).
func (c *Cluster) bootstrap(n *Node) {
	eng := c.open(n)
	defer eng.Close()
	b := eng.NewBatch()
	defer b.Close()
	for _, d := range c.descs {
		if slices.ContainsFunc(d.GetReplicas(), func(r *concordpb.ReplicaDescriptor) bool { return ids.NodeID(r.GetNodeId()) == n.ID }) {
			c.check(storage.BootstrapReplica(b, d, ids.ReplicaID(n.ID))) // replica id = node id in the initial placement
		}
	}
	c.check(storage.Commit(b, true))
}

func (c *Cluster) open(n *Node) *storage.Engine {
	eng, err := storage.OpenFS(n.fs, n.dir)
	c.check(err)
	return eng
}

func (c *Cluster) check(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// AddNode adds an empty node (no replicas: it receives them by conf change
// and snapshot, as a joining node does), starts it, and returns its id.
func (c *Cluster) AddNode() ids.NodeID {
	n := c.addNode(ids.NodeID(len(c.nodes) + 1))
	c.Start(n.ID)
	return n.ID
}

// Start opens node id's engine and starts its host.
func (c *Cluster) Start(id ids.NodeID) {
	c.t.Helper()
	n := c.nodes[id]
	if n.Host != nil {
		c.t.Fatalf("node %d is already running", id)
	}
	n.Engine = c.open(n)
	n.ticks = NewManualTicks()
	cfg := multiraft.DefaultConfig(id)
	cfg.Ticks = n.ticks
	cfg.IDBase = n.idBase
	cfg.Logger = c.opts.Logger.With("node", id)
	cfg.Fatal = func(err error) { c.t.Errorf("node %d: fatal storage error: %v", id, err) }
	// The network delivers under its lock, so Deliver must never wait for
	// the receiving loop, which may itself be waiting for that lock to send.
	cfg.MaxInboxBytes = -1
	cfg.Clock = c.Clock.Now
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	c.tickInterval = cfg.TickInterval
	n.Host = multiraft.New(cfg, n.Engine, &endpoint{net: c.Net, node: id},
		func(shard ids.ShardID) replica.StateMachine { return kv.New(uint64(shard)) })
	c.Net.setUp(id, &peer{host: n.Host, eng: n.Engine})
	c.check(n.Host.Start())
}

// Stop stops node id's host and closes its engine, as a clean shutdown
// does; Start brings it back from what it synced.
func (c *Cluster) Stop(id ids.NodeID) {
	n := c.nodes[id]
	if n.Host == nil {
		return
	}
	c.Net.setUp(id, nil)
	n.Host.Stop()
	c.Net.waitStreams(id)
	c.check(n.Engine.Close())
	n.Host, n.Engine = nil, nil
}

// CrashImage records what node id's disk (Options.PowerCuts) would hold
// after a power cut right now; the next PowerCut of the node leaves that
// disk, not the one it has by then. Safe from any goroutine, a hook on the
// node's own loop included (OnFlush runs there, after the turn's batch
// committed): a test crashes a node at an exact point in its loop this way.
func (c *Cluster) CrashImage(id ids.NodeID) {
	crashed, err := storage.CrashClone(c.nodes[id].fs)
	if err != nil {
		c.t.Errorf("node %d: crash image: %v", id, err) // maybe not the test's goroutine
		return
	}
	c.nodes[id].image.Store(&crashed)
}

// PowerCut stops node id as a power cut would: its disk keeps only what was
// synced (Options.PowerCuts), or what CrashImage recorded; Start brings it
// back from that.
func (c *Cluster) PowerCut(id ids.NodeID) {
	n := c.nodes[id]
	if n.Host == nil {
		return
	}
	var crashed storage.FS
	if img := n.image.Swap(nil); img != nil {
		crashed = *img
	} else {
		var err error
		crashed, err = storage.CrashClone(n.fs)
		c.check(err)
	}
	c.Net.setUp(id, nil)
	n.Host.Stop()
	c.Net.waitStreams(id)
	_ = n.Engine.Close() // on the old disk, which is thrown away
	n.fs, n.Host, n.Engine = crashed, nil, nil
}

func (c *Cluster) stopAll() {
	for _, n := range c.Nodes() {
		c.Stop(n.ID)
	}
}

// Nodes returns the nodes in id order.
func (c *Cluster) Nodes() []*Node {
	var out []*Node
	for id := ids.NodeID(1); id <= ids.NodeID(len(c.nodes)); id++ {
		out = append(out, c.nodes[id])
	}
	return out
}

// Node returns node id.
func (c *Cluster) Node(id ids.NodeID) *Node { return c.nodes[id] }

// ShardOf is the user shard that owns key.
func (c *Cluster) ShardOf(key string) ids.ShardID {
	return ids.ShardID(c.table.Lookup([]byte(key)).GetShardId())
}

// Cut isolates node in both directions until Heal.
func (c *Cluster) Cut(node ids.NodeID) { c.Net.Cut(node) }

// Heal reconnects node.
func (c *Cluster) Heal(node ids.NodeID) { c.Net.Heal(node) }

// Tick advances every running host n ticks, letting the cluster settle
// after each.
func (c *Cluster) Tick(n int) {
	for range n {
		c.Net.advance()
		c.Clock.Advance(c.tickInterval)
		for _, node := range c.Nodes() {
			if node.Host != nil {
				node.ticks.Tick()
			}
		}
		c.settle()
	}
}

// TickOnly advances only the given running nodes n ticks, letting the
// cluster settle after each: the others keep handling messages but their
// timers stand still, so a test decides which node's election timeout fires.
func (c *Cluster) TickOnly(n int, nodes ...ids.NodeID) {
	for range n {
		c.Net.advance()
		c.Clock.Advance(c.tickInterval)
		for _, id := range nodes {
			if node := c.nodes[id]; node.Host != nil {
				node.ticks.Tick()
			}
		}
		c.settle()
	}
}

// settle runs barriers on every host until a full round of them saw no
// message delivered and no snapshot stream start or end: then every host has
// processed everything it was sent. It gives up after a bound (a cluster
// may never be quiet, e.g. while a snapshot keeps failing), which is fine:
// tests wait for conditions, not for quiet.
func (c *Cluster) settle() {
	for range 50 {
		before := c.Net.activityCount()
		for _, n := range c.Nodes() {
			c.barrier(n)
		}
		if c.Net.activityCount() == before {
			return
		}
	}
}

// barrier returns once n's loop has finished an iteration that started after
// the call: the first Do runs in a drain after everything queued before it,
// the second after that iteration's Ready handling.
func (c *Cluster) barrier(n *Node) {
	if n.Host == nil {
		return
	}
	for range 2 {
		if err := n.Host.Do(context.Background(), func() {}); err != nil {
			return
		}
	}
}

// RunUntil ticks until cond holds, failing the test after maxTicks.
func (c *Cluster) RunUntil(what string, maxTicks int, cond func() bool) {
	c.t.Helper()
	for range maxTicks {
		c.settle()
		if cond() {
			return
		}
		c.Tick(1)
	}
	if !cond() {
		c.t.Fatalf("gave up after %d ticks waiting for %s", maxTicks, what)
	}
}

// Leader returns the node whose replica of shard leads it in the highest
// term seen among running nodes, 0 if none does.
func (c *Cluster) Leader(shard ids.ShardID) ids.NodeID {
	var leader ids.NodeID
	var term uint64
	for _, n := range c.Nodes() {
		if n.Host == nil {
			continue
		}
		if i, ok := n.Host.Info(shard); ok && i.IsLeader && i.Term >= term {
			leader, term = n.ID, i.Term
		}
	}
	return leader
}

// WaitLeader ticks until shard has a leader that every running, connected
// replica of it that the leader counts as a member follows, and returns
// its node.
func (c *Cluster) WaitLeader(shard ids.ShardID) ids.NodeID {
	c.t.Helper()
	var leader ids.NodeID
	c.RunUntil(fmt.Sprintf("a leader of shard %d", shard), 500, func() bool {
		leader = c.Leader(shard)
		return leader != 0 && c.followers(shard, leader)
	})
	return leader
}

// followers reports whether every running, connected replica of shard
// that leader's descriptor lists knows leader as its leader. A replica
// removed while it was cut off never hears of it (a leader contacts only
// members): it is nobody's follower, and may have lost its leader for good
// if its election timeout ran out while cut off.
func (c *Cluster) followers(shard ids.ShardID, leader ids.NodeID) bool {
	li, ok := c.nodes[leader].Host.Info(shard)
	if !ok {
		return false
	}
	for _, n := range c.Nodes() {
		if n.Host == nil || c.Net.isCut(n.ID) || !lists(li.Desc, n.ID) {
			continue
		}
		if i, ok := n.Host.Info(shard); ok && i.LeaderNode != leader {
			return false
		}
	}
	return true
}

// lists reports whether d has a replica on node.
func lists(d *concordpb.ShardDescriptor, node ids.NodeID) bool {
	for _, r := range d.GetReplicas() {
		if ids.NodeID(r.GetNodeId()) == node {
			return true
		}
	}
	return false
}

// Call is a proposal in flight.
type Call struct {
	done   <-chan struct{}
	Result *storepb.CommandResult
	Err    error
}

// Ended is closed once the call has its outcome.
func (c *Call) Ended() <-chan struct{} { return c.done }

// Done reports whether the call has its outcome.
func (c *Call) Done() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Propose proposes ops to shard on node and returns at once; the cluster
// must be ticked (RunUntil) for the outcome if it needs elections or
// timeouts.
func (c *Cluster) Propose(node ids.NodeID, shard ids.ShardID, ops ...*concordpb.Op) *Call {
	return c.ProposeAt(node, shard, 0, ops...)
}

// ProposeAt is Propose with the command stamped unixNanos, as a leader's
// front door stamps it (0: unstamped). The stamp moves the shard's clock,
// from which TTLs are placed.
func (c *Cluster) ProposeAt(node ids.NodeID, shard ids.ShardID, unixNanos int64, ops ...*concordpb.Op) *Call {
	return c.ProposeCommand(node, shard, &storepb.Command{UnixNanos: unixNanos, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops}}})
}

// ProposeCommand is Propose of a whole command (a session and sequence
// number, say). It returns once the proposal is in the host's inbox (or
// refused): see Begin.
func (c *Cluster) ProposeCommand(node ids.NodeID, shard ids.ShardID, cmd *storepb.Command) *Call {
	call := &Call{}
	h := c.nodes[node].Host
	call.done = Begin(func(ctx context.Context) { call.Result, call.Err = h.Propose(ctx, shard, cmd) })
	return call
}

// Begin runs call on a goroutine of its own and returns once the Host call
// that call makes with ctx has queued its work for the host's loop, or call
// returned; the channel it returns is closed when call returns. Ticks and
// settling synchronise with the loops, not with other goroutines: a test
// that started a Host call with a bare go statement and then ticked
// (RunUntil) could spend its whole budget of ticks before the call reached
// the host, as Go's scheduler may keep a runnable goroutine off the CPU for
// about 10 ms while the test's and the loops' goroutines hand it to each
// other, hundreds of ticks. Tick then until the loops show the call's
// effect, and wait for its goroutine (which needs no tick to end) only
// after that.
//
// call must pass ctx itself to the Host call: a Host call asks ctx for Done
// only once its work is queued, whereas a context derived from ctx
// (context.WithTimeout) asks at once.
func Begin(call func(ctx context.Context)) (ended <-chan struct{}) {
	return BeginWith(context.Background(), call)
}

// BeginWith is Begin with the ctx that call gets derived from parent, so
// that the test can end the call by cancelling parent (a promotion still
// waiting for its learner, say).
func BeginWith(parent context.Context, call func(ctx context.Context)) (ended <-chan struct{}) {
	done := make(chan struct{})
	ctx := &enqueuedCtx{Context: parent, enqueued: make(chan struct{})}
	go func() {
		defer close(done)
		call(ctx)
	}()
	select {
	case <-ctx.enqueued:
	case <-done:
	}
	return done
}

// enqueuedCtx tells when a Host call is queued: the call asks for Done
// only once it has put its work in the inbox and waits for the outcome.
type enqueuedCtx struct {
	context.Context
	once     sync.Once
	enqueued chan struct{}
}

func (c *enqueuedCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.enqueued) })
	return c.Context.Done()
}

// Await ticks until call has its outcome. The ticks may run out before
// the call's goroutine, which Go's scheduler can keep off the CPU for
// longer than 1000 ticks take, has taken an outcome the loop already sent
// it: then, the loops having had their ticks, it waits for the goroutine,
// which needs no more, for up to 30 s (a guard against a hang, not a
// timing).
func (c *Cluster) Await(call *Call) *Call {
	c.t.Helper()
	for range 1000 {
		c.settle()
		if call.Done() {
			return call
		}
		c.Tick(1)
	}
	select {
	case <-call.Ended():
	case <-time.After(30 * time.Second):
		c.t.Fatalf("no outcome for a proposal after 1000 ticks and 30 s")
	}
	return call
}

// Put writes key=value through the current leader of key's shard, retrying
// (with the same effect: a put is idempotent) until a proposal succeeds.
func (c *Cluster) Put(key, value string) {
	c.t.Helper()
	shard := c.ShardOf(key)
	for range 20 {
		call := c.Await(c.Propose(c.WaitLeader(shard), shard, PutOp(key, value)))
		if call.Err == nil {
			return
		}
		c.t.Logf("put %q: %v; retrying", key, call.Err)
	}
	c.t.Fatalf("put %q never succeeded", key)
}

// Get reads key from node's local state.
func (c *Cluster) Get(node ids.NodeID, key string) (string, bool) {
	c.t.Helper()
	var v []byte
	var found bool
	err := c.nodes[node].Engine.Read(func(r storage.Reader) (err error) {
		v, _, found, err = kv.Get(r, uint64(c.ShardOf(key)), []byte(key), time.Now().UnixMilli())
		return err
	})
	c.check(err)
	return string(v), found
}

// WaitValue ticks until every node in nodes holds key=value locally.
func (c *Cluster) WaitValue(key, value string, nodes ...ids.NodeID) {
	c.t.Helper()
	c.RunUntil(fmt.Sprintf("%q=%q on nodes %v", key, value, nodes), 1000, func() bool {
		for _, n := range nodes {
			if v, ok := c.Get(n, key); !ok || v != value {
				return false
			}
		}
		return true
	})
}

// PutOp is a put of key=value.
func PutOp(key, value string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(key), Value: []byte(value)}
}

// StagedFiles counts the snapshot files staged on node's engine.
func (c *Cluster) StagedFiles(node ids.NodeID) int {
	n := c.nodes[node]
	names, err := n.fs.List(filepath.Join(n.dir, "aux"))
	c.check(err)
	return len(names)
}
