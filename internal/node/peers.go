package node

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// What the node knows and holds about its peers: their addresses (the
// address book), which of them have sent it raft traffic (the seen set),
// and one client connection per peer address (the connection pool).

// addressBook maps node ids to descriptors (addresses). It is persisted so a
// restarted node can reach its peers before hearing from the placement leader.
type addressBook struct {
	// writeMu serializes update, so that updates persist and publish in
	// the same order; it is held across the write to storage. mu is not:
	// the host loop resolves addresses for every message it sends, and
	// must never wait on an fsync.
	writeMu sync.Mutex
	mu      sync.RWMutex
	m       map[ids.NodeID]*concordpb.NodeDescriptor // guarded by mu
	// gone, if set, is told of nodes an update shows REPLACED, DEAD or
	// REMOVED (guarded by mu): the host's LeaderGone.
	gone func(ids.NodeID)
}

func (b *addressBook) resolve(node ids.NodeID) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	d, ok := b.m[node]
	return d.GetAddress(), ok
}

// resolvePeer is resolve for raft traffic (the transport's Resolve): a
// node REMOVED, or REPLACED by a fresh process at its address, gets none,
// and none is taken from it. Both states are final (placement's
// allowedMark), and a REPLACED node's address, often a REMOVED one's too
// (the README's replace procedure), now reaches another node, which would
// refuse every message "for node 3" it got. The transport then drops its
// peer for the node (its lanes redialled the old address for ever) and
// refuses its streams.
func (b *addressBook) resolvePeer(node ids.NodeID) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	d, ok := b.m[node]
	switch d.GetState() {
	case concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED:
		return "", false
	}
	return d.GetAddress(), ok
}

func (b *addressBook) get(node ids.NodeID) *concordpb.NodeDescriptor {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.m[node]
}

func (b *addressBook) all() []*concordpb.NodeDescriptor {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*concordpb.NodeDescriptor, 0, len(b.m))
	for _, d := range b.m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}

// update records descriptors that are new or changed: durably first, then
// in memory, so a restart never knows less than the node acted on. If
// gone is set, it is then told each node the update shows newly gone
// (goneState).
func (b *addressBook) update(eng *storage.Engine, ds []*concordpb.NodeDescriptor) error {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	changed := b.changed(ds)
	if len(changed) == 0 {
		return nil
	}
	if err := eng.SaveAddresses(changed); err != nil {
		return err
	}
	b.mu.Lock()
	for _, d := range changed {
		b.m[ids.NodeID(d.GetNodeId())] = d
	}
	gone := b.gone
	b.mu.Unlock()
	if gone != nil {
		for _, d := range changed {
			if goneState(d.GetState()) {
				gone(ids.NodeID(d.GetNodeId()))
			}
		}
	}
	return nil
}

// setGone sets the function update tells of gone nodes.
func (b *addressBook) setGone(f func(ids.NodeID)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gone = f
}

// goneState reports whether a node in state s has certainly stopped
// serving its replicas: REPLACED (a fresh process holds its address),
// DEAD (silent past --dead-after) or REMOVED.
func goneState(s concordpb.NodeState) bool {
	switch s {
	case concordpb.NodeState_NODE_REPLACED, concordpb.NodeState_NODE_DEAD, concordpb.NodeState_NODE_REMOVED:
		return true
	}
	return false
}

// atAddress returns the nodes registered at addr that may still be the
// process serving it (not REPLACED, LEAVING or REMOVED).
func (b *addressBook) atAddress(addr string) []ids.NodeID {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []ids.NodeID
	for id, d := range b.m {
		switch d.GetState() {
		case concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD:
			if d.GetAddress() == addr {
				out = append(out, id)
			}
		}
	}
	return out
}

// changed returns the descriptors of ds that are new or differ from the book's.
func (b *addressBook) changed(ds []*concordpb.NodeDescriptor) []*concordpb.NodeDescriptor {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []*concordpb.NodeDescriptor
	for _, d := range ds {
		if cur, ok := b.m[ids.NodeID(d.GetNodeId())]; !ok || !proto.Equal(cur, d) {
			out = append(out, d)
		}
	}
	return out
}

// seenSet is the set of nodes this node has received peer traffic from. A
// node id in it had live raft state; if that node loses its data it must
// join anew, because reusing the id would forget its votes.
//
// Recording a peer is a synced write. mu guards only the map; the write is
// serialized per peer by that peer's entry, so the first batch from one peer
// waits for its fsync while streams from every other peer go on.
type seenSet struct {
	mu sync.Mutex
	m  map[ids.NodeID]*seenEntry // guarded by mu
}

// seenEntry is one peer's record in the seen set.
type seenEntry struct {
	mu   sync.Mutex  // held across this peer's synced write
	done atomic.Bool // the record is durable
}

func (s *seenSet) entry(node ids.NodeID) *seenEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[node]
	if e == nil {
		e = &seenEntry{}
		s.m[node] = e
	}
	return e
}

func (s *seenSet) has(node ids.NodeID) bool {
	s.mu.Lock()
	e := s.m[node]
	s.mu.Unlock()
	return e != nil && e.done.Load()
}

// loaded records a peer found seen in storage at start.
func (s *seenSet) loaded(node ids.NodeID) { s.entry(node).done.Store(true) }

// mark makes node seen: it calls record (the durable write) unless node
// already is. Only callers for the same node wait for one another. If record
// fails, node is not seen and the error is returned; a later call tries again.
func (s *seenSet) mark(node ids.NodeID, record func(ids.NodeID) error) error {
	e := s.entry(node)
	if e.done.Load() {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done.Load() {
		return nil
	}
	if err := record(node); err != nil {
		return err
	}
	e.done.Store(true)
	return nil
}

// markSeen records that fromNode sent peer traffic, durably, before that
// traffic is delivered. Only the first message from a node pays the fsync.
// If the write fails, the traffic must not be delivered (the transport drops
// it and ends the stream): a peer whose traffic we acted on but did not
// record could later reuse its id and vote twice.
func (n *Node) markSeen(fromNode ids.NodeID) error {
	if err := n.seen.mark(fromNode, n.eng.MarkSeen); err != nil {
		n.log.Error("record peer as seen", "peer", fromNode, "err", err)
		return fmt.Errorf("node: record peer %d as seen: %w", fromNode, err)
	}
	return nil
}

// connPool keeps one client connection per node address.
type connPool struct {
	opts []grpc.DialOption
	mu   sync.Mutex
	m    map[string]*grpc.ClientConn // guarded by mu
}

func (p *connPool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.m[addr]; ok {
		return c, nil
	}
	c, err := dial.Dial(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	p.m[addr] = c
	return c, nil
}

func (p *connPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.m {
		c.Close()
		delete(p.m, a)
	}
}
