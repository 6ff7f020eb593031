package multiraftest

import (
	"context"
	"math/rand"
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/storage"
)

// Network connects the nodes of a Cluster in memory. A cut applies to raft
// messages and snapshots alike; drops and delays apply to raft messages
// only (a snapshot stream either completes or is cut).
type Network struct {
	mu   sync.Mutex
	cond *sync.Cond // signalled when a snapshot stream ends
	rng  *rand.Rand // guarded by mu
	// up holds each running node's host and engine; a stopped node is absent.
	up map[ids.NodeID]*peer
	// cut holds nodes whose traffic is dropped in both directions.
	cut map[ids.NodeID]bool
	// dropRate is the probability that a message is lost.
	dropRate float64
	// delayTicks holds messages back this many ticks.
	delayTicks uint64
	now        uint64
	delayed    []delayed
	// activity counts deliveries and snapshot streams started or ended; a
	// cluster has settled when a full round of barriers leaves it unchanged.
	activity uint64
	// streams counts the snapshot streams touching each node's engine, which
	// must not close while one reads or writes it.
	streams map[ids.NodeID]int
	// onFlush, if set, sees what each Flush sends (see OnFlush).
	onFlush func(from, to ids.NodeID, envs []*concordpb.RaftEnvelope)
	// tap, if set, sees every message delivered (Tap).
	tap func(from, to ids.NodeID, env *concordpb.RaftEnvelope)
	// onStream, if set, runs as each snapshot stream starts (see
	// OnSnapshotStream).
	onStream func(from, to ids.NodeID, shard ids.ShardID)
	// intercept, if set, may take a message off the wire (Intercept).
	intercept func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool
}

type peer struct {
	host *multiraft.Host
	eng  *storage.Engine
}

type delayed struct {
	due      uint64
	from, to ids.NodeID
	env      *concordpb.RaftEnvelope
}

func newNetwork(seed int64) *Network {
	n := &Network{rng: rand.New(rand.NewSource(seed)), up: map[ids.NodeID]*peer{}, cut: map[ids.NodeID]bool{}, streams: map[ids.NodeID]int{}}
	n.cond = sync.NewCond(&n.mu)
	return n
}

// endpoint is one node's multiraft.Transport. Send and Flush run on that
// node's loop goroutine only, so queued needs no lock.
type endpoint struct {
	net    *Network
	node   ids.NodeID
	queued []queued
}

type queued struct {
	to  ids.NodeID
	env *concordpb.RaftEnvelope
}

var _ multiraft.Transport = (*endpoint)(nil)

// Send implements multiraft.Transport. The message is marshalled now, on the
// loop, as the real transport does: raft may reuse what it handed out.
func (e *endpoint) Send(toNode ids.NodeID, shard ids.ShardID, m *pb.Message) {
	data, err := proto.Marshal(m)
	if err != nil {
		panic(err) // a raft message always marshals
	}
	e.queued = append(e.queued, queued{to: toNode, env: &concordpb.RaftEnvelope{ShardId: uint64(shard), Message: data}})
}

// Flush implements multiraft.Transport: the queued messages reach their
// nodes now, unless a fault drops or delays them.
func (e *endpoint) Flush() {
	msgs := e.queued
	e.queued = nil
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	if e.net.onFlush != nil {
		byTo := map[ids.NodeID][]*concordpb.RaftEnvelope{}
		for _, q := range msgs {
			byTo[q.to] = append(byTo[q.to], q.env)
		}
		for to, envs := range byTo {
			e.net.onFlush(e.node, to, envs)
		}
	}
	for _, q := range msgs {
		e.net.routeLocked(e.node, q.to, q.env)
	}
}

func (n *Network) routeLocked(from, to ids.NodeID, env *concordpb.RaftEnvelope) {
	if n.cut[from] || n.cut[to] {
		return
	}
	if n.intercept != nil && n.intercept(from, to, env) {
		return
	}
	if n.dropRate > 0 && n.rng.Float64() < n.dropRate {
		return
	}
	if n.delayTicks > 0 {
		n.delayed = append(n.delayed, delayed{due: n.now + n.delayTicks, from: from, to: to, env: env})
		return
	}
	n.deliverLocked(from, to, env)
}

// deliverLocked hands env to node to's host, which only queues it.
func (n *Network) deliverLocked(from, to ids.NodeID, env *concordpb.RaftEnvelope) {
	p := n.up[to]
	if p == nil {
		return
	}
	n.activity++
	if n.tap != nil {
		n.tap(from, to, env)
	}
	_ = p.host.Deliver(context.Background(), from, []*concordpb.RaftEnvelope{env}) // fails only once the host stopped
}

// advance moves the network one tick on, delivering delayed messages now due.
func (n *Network) advance() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.now++
	var later []delayed
	for _, d := range n.delayed {
		if d.due > n.now {
			later = append(later, d)
			continue
		}
		if !n.cut[d.from] && !n.cut[d.to] {
			n.deliverLocked(d.from, d.to, d.env)
		}
	}
	n.delayed = later
}

// SendSnapshot implements multiraft.Transport: it streams the shard's state
// span from snap into a staged snapshot on the receiver, in a goroutine of
// its own as the real transport does (the receiver's loop must not wait on
// the sender's, or two loops sending each other snapshots would deadlock).
func (e *endpoint) SendSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.Snapshot, done func(ok bool)) {
	hdr, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	n := e.net
	n.mu.Lock()
	n.activity++
	n.streams[e.node]++
	n.streams[toNode]++
	n.mu.Unlock()
	go func() {
		ok := n.streamSnapshot(e.node, toNode, shard, hdr, snap)
		done(ok) // closes snap, so before the sender's engine may close
		n.mu.Lock()
		n.activity++
		n.streams[e.node]--
		n.streams[toNode]--
		n.cond.Broadcast()
		n.mu.Unlock()
	}()
}

func (n *Network) streamSnapshot(from, to ids.NodeID, shard ids.ShardID, hdr []byte, snap *storage.Snapshot) bool {
	n.mu.Lock()
	p, blocked, onStream := n.up[to], n.cut[from] || n.cut[to], n.onStream
	n.mu.Unlock()
	if p == nil || blocked {
		return false
	}
	if onStream != nil {
		onStream(from, to, shard)
	}
	w, err := p.eng.NewSnapshotWriter(shard)
	if err != nil {
		return false
	}
	if err := snap.ScanState(shard, w.Set); err != nil {
		w.Abort()
		return false
	}
	staged, err := w.Finish()
	if err != nil {
		return false
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(hdr, m); err != nil {
		staged.Discard()
		return false
	}
	return p.host.DeliverSnapshot(context.Background(), from, shard, m, staged) == nil
}

// setUp makes node's host reachable (nil: the node is down).
func (n *Network) setUp(node ids.NodeID, p *peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p == nil {
		delete(n.up, node)
		return
	}
	n.up[node] = p
}

// OnSnapshotStream calls f in each snapshot stream's goroutine once the
// stream is under way (the sender's snapshot taken, the receiver up and
// not cut off), before any data is read (nil: stop). f may block, to hold
// a stream while the test changes the cluster: a cut made meanwhile does
// not stop the stream.
func (n *Network) OnSnapshotStream(f func(from, to ids.NodeID, shard ids.ShardID)) {
	n.set(func() { n.onStream = f })
}

// WaitSnapshotStreams waits until no snapshot stream to or from node is
// under way: every one has delivered its snapshot (or failed).
func (n *Network) WaitSnapshotStreams(node ids.NodeID) { n.waitStreams(node) }

// waitStreams waits until no snapshot stream touches node's engine.
func (n *Network) waitStreams(node ids.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.streams[node] > 0 {
		n.cond.Wait()
	}
}

func (n *Network) activityCount() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.activity
}

// Cut drops every message to and from node until Heal.
func (n *Network) Cut(node ids.NodeID) { n.set(func() { n.cut[node] = true }) }

// Heal undoes Cut.
func (n *Network) Heal(node ids.NodeID) { n.set(func() { delete(n.cut, node) }) }

// SetDropRate makes each message (not snapshots) lost with probability p.
func (n *Network) SetDropRate(p float64) { n.set(func() { n.dropRate = p }) }

// Tap calls f, under the network's lock, with every raft message delivered
// from now on (as marshalled on the wire; f must not keep env's bytes past
// the call without copying, nor call into the network). Tests capture real
// traffic with it, e.g. as a fuzz corpus.
func (n *Network) Tap(f func(from, to ids.NodeID, env *concordpb.RaftEnvelope)) {
	n.set(func() { n.tap = f })
}

// SetDelay holds every message back for ticks ticks (0: deliver at once).
func (n *Network) SetDelay(ticks uint64) { n.set(func() { n.delayTicks = ticks }) }

// OnFlush calls f, under the network's lock, with the messages each Flush
// of a node sends to each other node, before faults apply (nil: stop).
func (n *Network) OnFlush(f func(from, to ids.NodeID, envs []*concordpb.RaftEnvelope)) {
	n.set(func() { n.onFlush = f })
}

func (n *Network) set(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f()
}

func (n *Network) isCut(node ids.NodeID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[node]
}

// Intercept installs f, which sees every raft message sent (before drops
// and delays) and takes it off the wire by returning true: a test holds a
// message back this way and delivers it later with Inject, to play out an
// exact interleaving. f runs with the network's lock held; it must not call
// back into the Network. nil removes it.
func (n *Network) Intercept(f func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool) {
	n.set(func() { n.intercept = f })
}

// Inject delivers env from node from to node to now, past every fault:
// the way to release a message Intercept held back.
func (n *Network) Inject(from, to ids.NodeID, env *concordpb.RaftEnvelope) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deliverLocked(from, to, env)
}
