package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// Every bootstrapped replica starts from the same state: a log truncated at
// (initialIndex, initialTerm), with nothing to replay.
const (
	initialIndex = 5
	initialTerm  = 5
)

// loadLocal reads the node's identity, address book and seen set, if any.
func (n *Node) loadLocal() error {
	var id storepb.NodeIdent
	found, err := storage.GetProto(n.eng.DB, keys.Ident(), &id)
	if err != nil {
		return err
	}
	if found {
		n.ident.Store(&id)
	}
	lo, hi := keys.AddressSpan()
	it, err := n.eng.DB.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		d := &concordpb.NodeDescriptor{}
		if err := proto.Unmarshal(it.Value(), d); err != nil {
			it.Close()
			return err
		}
		n.book.m[d.GetNodeId()] = d
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, d := range n.book.m {
		if _, closer, err := n.eng.DB.Get(keys.Seen(d.GetNodeId())); err == nil {
			closer.Close()
			n.seen.m[d.GetNodeId()] = true
		}
	}
	return nil
}

// establishIdentity loads the node's identity or, for an empty data dir,
// decides between bootstrapping the cluster in --peers and joining it.
//
// A fresh node may take its initial id (its position in the sorted peer
// list) only if that id never had live raft state: it asks every peer, and
// bootstraps only when all answered and none has received traffic from that
// id. Otherwise the id's votes and acknowledgements may be remembered by
// others while this node forgot them, so it joins under a new id instead.
func (n *Node) establishIdentity(ctx context.Context) error {
	if n.ident.Load() != nil {
		return nil
	}
	peers := sortedPeers(n.cfg.Peers)
	self := slices.Index(peers, n.cfg.Addr)
	if self < 0 {
		return fmt.Errorf("--peers %s does not include this node's --addr %s", strings.Join(peers, ","), n.cfg.Addr)
	}
	hash := peersHash(peers)
	initialID := uint64(self + 1)
	for attempt := 0; ; attempt++ {
		decision, via := n.probePeers(ctx, peers, hash, initialID)
		switch decision {
		case decideBootstrap:
			return n.bootstrap(peers, hash, initialID)
		case decideJoin:
			return n.join(ctx, via)
		}
		if attempt%10 == 0 {
			n.log.Info("waiting for every peer to answer before bootstrapping", "peers", peers)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopC:
			return fmt.Errorf("node stopped while waiting for peers")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type decision int

const (
	decideWait decision = iota
	decideBootstrap
	decideJoin
)

// probePeers asks every other peer about its state and decides.
func (n *Node) probePeers(ctx context.Context, peers []string, hash, initialID uint64) (decision, string) {
	answered := 0
	for _, p := range peers {
		if p == n.cfg.Addr {
			continue
		}
		resp, err := n.probe(ctx, p, hash, initialID)
		if err != nil {
			continue
		}
		answered++
		if resp.GetInitialized() && (resp.GetSeenInitialNode() || resp.GetPeersHash() != hash) {
			return decideJoin, p
		}
	}
	if answered == len(peers)-1 {
		return decideBootstrap, ""
	}
	return decideWait, ""
}

func (n *Node) probe(ctx context.Context, addr string, hash, initialID uint64) (*concordpb.ProbeResponse, error) {
	conn, err := n.conns.get(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return concordpb.NewClusterClient(conn).Probe(ctx, &concordpb.ProbeRequest{
		FromAddress: n.cfg.Addr, PeersHash: hash, InitialNodeId: initialID,
	})
}

// answerProbe tells a fresh node whether its initial id is still unused.
func (n *Node) answerProbe(req *concordpb.ProbeRequest) *concordpb.ProbeResponse {
	id := n.ident.Load()
	if id == nil {
		return &concordpb.ProbeResponse{}
	}
	seen := n.seen.has(req.GetInitialNodeId())
	for _, d := range n.book.all() {
		// The address already belongs to a node that joined under another id.
		if d.GetAddress() == req.GetFromAddress() && d.GetNodeId() != req.GetInitialNodeId() {
			seen = true
		}
	}
	return &concordpb.ProbeResponse{
		Initialized: true, ClusterId: id.GetClusterId(), PeersHash: id.GetPeersHash(),
		SeenInitialNode: seen, NodeId: id.GetNodeId(),
	}
}

// bootstrap writes the initial state of the cluster in peers: every node
// computes the same state, so no coordination is needed beyond the probes.
func (n *Node) bootstrap(peers []string, hash, self uint64) error {
	nodes := make([]*concordpb.NodeDescriptor, len(peers))
	for i, p := range peers {
		nodes[i] = &concordpb.NodeDescriptor{NodeId: uint64(i + 1), Address: p}
	}
	shards := initialShards(len(peers), n.cfg.Shards, n.cfg.Replicas)
	b := n.eng.DB.NewBatch()
	defer b.Close()
	ident := &storepb.NodeIdent{ClusterId: hash, NodeId: self, PeersHash: hash}
	if err := storage.SetProto(b, keys.Ident(), ident); err != nil {
		return err
	}
	for _, d := range nodes {
		if err := storage.SetProto(b, keys.Address(d.GetNodeId()), d); err != nil {
			return err
		}
	}
	for _, d := range shards {
		if err := bootstrapReplica(b, d, self, nodes, shards); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	n.ident.Store(ident)
	if err := n.book.update(n.eng.DB, nodes); err != nil {
		return err
	}
	n.log.Info("bootstrapped new cluster", "node", self, "peers", peers, "shards", n.cfg.Shards, "replicas", min(n.cfg.Replicas, len(peers)))
	return nil
}

// bootstrapReplica writes self's replica of shard d, if it has one.
func bootstrapReplica(b *pebble.Batch, d *concordpb.ShardDescriptor, self uint64, nodes []*concordpb.NodeDescriptor, all []*concordpb.ShardDescriptor) error {
	var voters []uint64
	hosted := false
	for _, r := range d.GetReplicas() {
		voters = append(voters, r.GetReplicaId())
		hosted = hosted || r.GetNodeId() == self
	}
	if !hosted {
		return nil
	}
	shard := d.GetShardId()
	errs := []error{
		b.Set(keys.Hosted(shard), binary.BigEndian.AppendUint64(nil, self), nil),
		storage.SetProto(b, keys.HardState(shard), &pb.HardState{Term: new(uint64(initialTerm)), Commit: new(uint64(initialIndex))}),
		storage.SetProto(b, keys.Truncated(shard), &storepb.TruncatedState{Index: initialIndex, Term: initialTerm}),
		storage.SetProto(b, keys.Applied(shard), &storepb.AppliedState{Index: initialIndex, Term: initialTerm}),
		storage.SetProto(b, keys.ConfState(shard), &pb.ConfState{Voters: voters}),
		storage.SetProto(b, keys.Descriptor(shard), d),
	}
	if shard == routing.MetaShard {
		errs = append(errs, placement.Bootstrap(b, nodes, all))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// initialShards places the meta shard and the user shards on n nodes: shard
// s's replicas go round-robin from node s, so every node holds about the
// same number of replicas, and (the first replica being the preferred
// leader) of leaders. In the first placement a replica's id is its node's id.
func initialShards(n, shards, replicas int) []*concordpb.ShardDescriptor {
	r := min(replicas, n)
	starts, ends := routing.Ranges(shards)
	mk := func(shard uint64, first int, start, end uint64) *concordpb.ShardDescriptor {
		d := &concordpb.ShardDescriptor{ShardId: shard, StartHash: start, EndHash: end, Epoch: 1, NextReplicaId: uint64(n + 1)}
		for j := 0; j < r; j++ {
			node := uint64((first+j)%n + 1)
			d.Replicas = append(d.Replicas, &concordpb.ReplicaDescriptor{ReplicaId: node, NodeId: node})
		}
		return d
	}
	out := []*concordpb.ShardDescriptor{mk(routing.MetaShard, 0, 0, 0)}
	for i := range starts {
		out = append(out, mk(uint64(i+1), i, starts[i], ends[i]))
	}
	return out
}

// join asks the cluster (through the peer at via) for a new node id.
func (n *Node) join(ctx context.Context, via string) error {
	for {
		conn, err := n.conns.get(via)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := concordpb.NewClusterClient(conn).Join(cctx, &concordpb.JoinRequest{Address: n.cfg.Addr})
		cancel()
		if err == nil {
			return n.saveJoin(resp)
		}
		n.log.Info("join failed; retrying", "via", via, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopC:
			return fmt.Errorf("node stopped while joining")
		case <-time.After(time.Second):
		}
	}
}

func (n *Node) saveJoin(resp *concordpb.JoinResponse) error {
	ident := &storepb.NodeIdent{ClusterId: resp.GetClusterId(), NodeId: resp.GetNodeId()}
	b := n.eng.DB.NewBatch()
	defer b.Close()
	if err := storage.SetProto(b, keys.Ident(), ident); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	n.ident.Store(ident)
	if err := n.book.update(n.eng.DB, resp.GetNodes()); err != nil {
		return err
	}
	n.log.Info("joined cluster as a new node", "node", ident.GetNodeId(), "cluster", fmt.Sprintf("%x", ident.GetClusterId()))
	return nil
}

func sortedPeers(peers []string) []string {
	out := slices.Clone(peers)
	slices.Sort(out)
	return slices.Compact(out)
}

func peersHash(sorted []string) uint64 {
	h := xxhash.Sum64String(strings.Join(sorted, ","))
	if h == 0 {
		h = 1 // 0 means "no cluster"
	}
	return h
}

// addNode is the placement leader's side of join: it proposes a new node at
// addr (which marks an older node at the same address REPLACED) and records
// the resulting address book.
func (n *Node) addNode(ctx context.Context, addr string) (uint64, []*concordpb.NodeDescriptor, error) {
	res, err := n.host.Propose(ctx, routing.MetaShard, &storepb.Command{
		UnixNanos: time.Now().UnixNano(), Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{Address: addr}},
	})
	if err != nil {
		return 0, nil, err
	}
	n.log.Info("node joined", "node", res.GetNodeId(), "addr", addr)
	_ = n.book.update(n.eng.DB, res.GetNodes())
	return res.GetNodeId(), res.GetNodes(), nil
}
