package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/backupfile"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// loadLocal reads the node's identity, address book and seen set, if any.
func (n *Node) loadLocal() error {
	id, found, err := n.eng.Ident()
	if err != nil {
		return err
	}
	if found {
		n.ident.Store(id)
	}
	addrs, err := n.eng.Addresses()
	if err != nil {
		return err
	}
	for _, d := range addrs {
		node := ids.NodeID(d.GetNodeId())
		n.book.m[node] = d
		seen, err := n.eng.Seen(node)
		if err != nil {
			return err
		}
		if seen {
			n.seen.loaded(node)
		}
	}
	return nil
}

// checkAddrAtStart refuses to start a node that has an identity at an
// --addr other than the one the cluster records it at (its own descriptor
// in the address book the data dir holds). The recorded address is where
// its peers send raft traffic and clients are routed, and nothing changes
// it: a node that served at another address would heartbeat as healthy at
// the old one while nothing listens there, and receive no writes. As etcd
// refuses a member whose peer URLs do not match the cluster's record, the
// start stops here, before it listens or writes anything, and says what to
// do. The strings are compared as recorded (the node advertises exactly
// its --addr): localhost:7001 is not 127.0.0.1:7001 to a peer that dials it.
//
// A node without an identity (a new one, or a data dir `concord restore`
// staged) takes whatever --addr it is given; a removed node is refused by
// establishIdentity for that, which no address can help.
func (n *Node) checkAddrAtStart() error {
	id := n.ident.Load()
	if id == nil {
		return nil
	}
	self := n.book.get(ids.NodeID(id.GetNodeId()))
	if self == nil || self.GetState() == concordpb.NodeState_NODE_REMOVED || self.GetAddress() == n.cfg.Addr {
		return nil
	}
	return addrChangedError(n.cfg.DataDir, id.GetNodeId(), self.GetAddress(), n.cfg.Addr)
}

func addrChangedError(dataDir string, node uint64, recorded, addr string) error {
	return fmt.Errorf("data dir %s holds node %d, which the cluster records at %s, but it was started with --addr %s: "+
		"a node's --addr is its identity in the cluster (where its peers and clients reach it) and a restart cannot change it; "+
		"start it again with --addr %s, spelled exactly so; to move it to %s, start a new node there with an empty data dir and --join "+
		"(it gets a new node id and the replicas), then `concord node remove %d` (docs/operations.md, Adding and removing nodes). "+
		"Nothing was recorded in the data dir",
		dataDir, node, recorded, addr, recorded, addr, node)
}

// establishIdentity loads the node's identity or, for an empty data dir,
// decides between bootstrapping the cluster in --peers and joining it.
//
// A fresh node may take its initial id (its position in the sorted peer
// list) only if that id never had live raft state: it bootstraps only once
// every peer is known to have no record of traffic from that id, and joins
// under a new id as soon as one peer has such a record. Otherwise the id's
// votes and acknowledgements may be remembered by others while this node
// forgot them.
//
// Each peer must vouch, not a quorum: an earlier life of the id may have
// voted and acknowledged with one peer only (a quorum of 3 is 2), and only
// that peer knows. But a peer's word need not be fresh (bootEvidence): seen
// is never unlearnt, and an earlier life of the id ended before this
// process could listen at its address, so "p has not seen the id" said at
// any moment since this process started stays true. Two things say it:
// p's answer to this node's probe, and p's own probe to this node (only a
// node without an identity probes, and such a node has seen no one). So a
// node whose peers bootstrapped after probing it bootstraps too, even if
// they are gone before its own probes reach them: every node of the
// initial cluster started with its replicas, and the cluster has the quorum
// it was built with.
func (n *Node) establishIdentity(ctx context.Context) error {
	if id := n.ident.Load(); id != nil {
		if self := n.book.get(ids.NodeID(id.GetNodeId())); self.GetState() == concordpb.NodeState_NODE_REMOVED {
			n.logLostHints()
			return removedError(id.GetNodeId())
		}
		if len(n.cfg.Join) > 0 {
			n.log.Info("data dir holds an identity: --join ignored", "node", id.GetNodeId())
		}
		return n.finishRestore()
	}
	peers := sortedPeers(n.cfg.Peers)
	restore, err := n.stagedRestore()
	if err != nil {
		return err
	}
	if err := n.refusePartialRestore(restore); err != nil {
		return err
	}
	if restore != "" {
		if err := n.checkRestoreStart(peers); err != nil {
			return err
		}
	}
	if len(n.cfg.Join) > 0 {
		return n.join(ctx, n.cfg.Join)
	}
	self := slices.Index(peers, n.cfg.Addr)
	if self < 0 {
		return fmt.Errorf("--peers %s does not include this node's --addr %s", strings.Join(peers, ","), n.cfg.Addr)
	}
	hash := peersHash(peers)
	initialID := ids.NodeID(self + 1)
	for attempt := 0; ; attempt++ {
		decision, via := n.probePeers(ctx, peers, hash, initialID)
		switch decision {
		case decideBootstrap:
			return n.bootstrap(peers, hash, initialID, restore)
		case decideJoin:
			if n.testHooks.joinVia != nil {
				n.testHooks.joinVia(via)
			}
			// Through via first, then every other peer: via may die
			// before it answers, and any member forwards the join to the
			// placement leader (a fresh peer answers Unavailable).
			addrs := []string{via}
			for _, p := range peers {
				if p != via && p != n.cfg.Addr {
					addrs = append(addrs, p)
				}
			}
			return n.join(ctx, addrs)
		}
		if attempt%25 == 0 {
			n.log.Info("waiting for every peer to answer before bootstrapping", "peers", peers, "unheard", n.boot.missing(peers, n.cfg.Addr))
			if other := n.boot.otherLists(); len(other) > 0 {
				n.log.Warn("peers started with another --peers list (or --join) answered; every node of a new cluster must be given the same --peers",
					"peers", peers, "differing", other)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopC:
			return fmt.Errorf("node stopped while waiting for peers")
		case <-n.boot.more: // a peer's probe may have completed the evidence
		case <-time.After(probeInterval):
		}
	}
}

type decision int

const (
	decideWait decision = iota
	decideBootstrap
	decideJoin
)

// probeInterval is how long a fresh node waits between rounds of probes:
// short, since peers that heard from it may bootstrap, elect and serve
// within a few hundred milliseconds.
const probeInterval = 200 * time.Millisecond

// probePeers asks every other peer about its state and decides: join
// through a peer that has seen the initial id (or belongs to another
// cluster); bootstrap once every peer has vouched for the id, in this
// round or before (bootEvidence).
func (n *Node) probePeers(ctx context.Context, peers []string, hash uint64, initialID ids.NodeID) (decision, string) {
	for _, p := range peers {
		if p == n.cfg.Addr {
			continue
		}
		resp, err := n.probe(ctx, p, hash, initialID)
		if err != nil {
			continue
		}
		if resp.GetInitialized() && (resp.GetSeenInitialNode() || resp.GetPeersHash() != hash) {
			return decideJoin, p
		}
		if !resp.GetInitialized() && resp.GetPeersHash() != hash {
			// A fresh peer started with another --peers list (or
			// --join) will not bootstrap this cluster: counting it would
			// let each list's nodes bootstrap a cluster of their own.
			n.boot.differs(p)
			continue
		}
		n.boot.add(p)
	}
	if len(n.boot.missing(peers, n.cfg.Addr)) == 0 {
		return decideBootstrap, ""
	}
	return decideWait, ""
}

// probe asks the peer at addr about the initial id, on a connection of its
// own: a pooled one that failed while the peer was not yet listening would
// answer from gRPC's reconnect backoff (up to a second) instead of trying.
// It is the only sender of Probe, and only a node without an identity
// calls it: heardFreshPeer relies on that.
func (n *Node) probe(ctx context.Context, addr string, hash uint64, initialID ids.NodeID) (*concordpb.ProbeResponse, error) {
	conn, err := dial.Dial(addr, n.conns.opts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return concordpb.NewClusterClient(conn).Probe(ctx, &concordpb.ProbeRequest{
		FromAddress: n.cfg.Addr, PeersHash: hash, InitialNodeId: uint64(initialID),
	})
}

// bootEvidence is the set of peers a fresh node knows, since it started,
// to have no record of its initial id (establishIdentity says why that
// knowledge does not go stale). It lives in memory: a restarted fresh node
// asks again.
type bootEvidence struct {
	mu    sync.Mutex
	clear map[string]bool // guarded by mu
	other map[string]bool // fresh peers that answered with another peer list; guarded by mu
	more  chan struct{}   // signalled (buffer of one) when clear grows
}

func newBootEvidence() bootEvidence {
	return bootEvidence{clear: map[string]bool{}, other: map[string]bool{}, more: make(chan struct{}, 1)}
}

// differs records that the fresh peer at addr was given another peer list.
func (e *bootEvidence) differs(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.other[addr] = true
}

// otherLists returns the peers that answered with another peer list.
func (e *bootEvidence) otherLists() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.other))
}

func (e *bootEvidence) add(addr string) {
	e.mu.Lock()
	grew := !e.clear[addr]
	e.clear[addr] = true
	e.mu.Unlock()
	if grew {
		select {
		case e.more <- struct{}{}:
		default:
		}
	}
}

// missing returns the peers other than self not yet known clear.
func (e *bootEvidence) missing(peers []string, self string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, p := range peers {
		if p != self && !e.clear[p] {
			out = append(out, p)
		}
	}
	return out
}

// answerProbe tells a fresh node whether its initial id is still unused.
func (n *Node) answerProbe(req *concordpb.ProbeRequest) *concordpb.ProbeResponse {
	id := n.ident.Load()
	if id == nil {
		n.heardFreshPeer(req)
		// The list this node would bootstrap with: a prober given
		// another one must not count this answer (probePeers).
		return &concordpb.ProbeResponse{PeersHash: peersHash(sortedPeers(n.cfg.Peers))}
	}
	seen := n.seen.has(ids.NodeID(req.GetInitialNodeId()))
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

// heardFreshPeer records, while this node has no identity, that the peer
// probing it has none either, and so has seen no node: the peer vouches
// for this node's initial id as its answer would (establishIdentity). Only
// a peer of this node's --peers list, given the same list, counts.
func (n *Node) heardFreshPeer(req *concordpb.ProbeRequest) {
	peers := sortedPeers(n.cfg.Peers)
	from := req.GetFromAddress()
	if from == n.cfg.Addr || !slices.Contains(peers, from) || req.GetPeersHash() != peersHash(peers) {
		return
	}
	n.boot.add(from)
}

// bootstrap writes the initial state of the cluster in peers: every node
// computes the same state, so no coordination is needed beyond the probes.
// With restore (the path of a staged backup; single-node clusters only) it
// first loads the backup's keys into the new user shards, in batches the
// final, synced one (with the identity) makes durable (restore.go).
func (n *Node) bootstrap(peers []string, hash uint64, self ids.NodeID, restore string) error {
	nodes := make([]*concordpb.NodeDescriptor, len(peers))
	for i, p := range peers {
		nodes[i] = &concordpb.NodeDescriptor{NodeId: uint64(i + 1), Address: p}
	}
	shards := initialShards(len(peers), n.cfg.Shards, n.cfg.Replicas)
	b := n.eng.NewBatch()
	defer func() { b.Close() }()
	var load *restoreLoad
	var loaded backupfile.Summary
	if restore != "" {
		load = &restoreLoad{path: restore, table: routing.NewTable(shards), now: nowMs(), batchBytes: loadBatchBytes,
			maxKey: n.cfg.MaxKeyBytes, maxValue: n.cfg.MaxValueBytes,
			w: func() storage.Writer { return b },
			flush: func() error {
				if err := storage.Commit(b, false); err != nil {
					return err
				}
				b.Close()
				b = n.eng.NewBatch()
				if n.testHooks.restoreFlushed != nil {
					n.testHooks.restoreFlushed()
				}
				return nil
			}}
		if n.testHooks.restoreBatchBytes > 0 {
			load.batchBytes = n.testHooks.restoreBatchBytes
		}
		// On disk before any key: no part of a load is ever found without
		// it (refusePartialRestore).
		if err := n.eng.MarkRestoring(); err != nil {
			return err
		}
		sum, err := load.load(shards)
		if err != nil {
			return fmt.Errorf("loading the backup staged in %s: %w", restore, err)
		}
		loaded = sum
		n.log.Info("loading backup", "file", restore, "cluster", fmt.Sprintf("%x", sum.ClusterID), "taken", sum.Created,
			"keys", load.loaded, "expired_since", load.expired)
	}
	ident := &storepb.NodeIdent{ClusterId: hash, NodeId: uint64(self), PeersHash: hash}
	if err := storage.SetIdent(b, ident); err != nil {
		return err
	}
	if load != nil {
		// The load is complete with this batch, and with it only.
		if err := storage.ClearRestoring(b); err != nil {
			return err
		}
		if err := storage.SetRestored(b, loaded.Digest); err != nil {
			return err
		}
	}
	for _, d := range nodes {
		if err := storage.SetAddress(b, d); err != nil {
			return err
		}
	}
	for _, d := range shards {
		if err := bootstrapReplica(b, d, self, nodes, shards); err != nil {
			return err
		}
	}
	if err := storage.Commit(b, true); err != nil {
		return err
	}
	n.ident.Store(ident)
	if err := n.book.update(n.eng, nodes); err != nil {
		return err
	}
	if load != nil {
		n.log.Info("restored backup into the new cluster", "keys", load.loaded)
		if err := n.finishRestore(); err != nil {
			return err
		}
	}
	n.log.Info("bootstrapped new cluster", "node", self, "peers", peers, "shards", n.cfg.Shards, "replicas", min(n.cfg.Replicas, len(peers)))
	return nil
}

// bootstrapReplica writes self's replica of shard d, if it has one; in the
// initial placement a replica's id is its node's id.
func bootstrapReplica(w storage.Writer, d *concordpb.ShardDescriptor, self ids.NodeID, nodes []*concordpb.NodeDescriptor, all []*concordpb.ShardDescriptor) error {
	if !slices.ContainsFunc(d.GetReplicas(), func(r *concordpb.ReplicaDescriptor) bool { return ids.NodeID(r.GetNodeId()) == self }) {
		return nil
	}
	if err := storage.BootstrapReplica(w, d, ids.ReplicaID(self)); err != nil {
		return err
	}
	if ids.ShardID(d.GetShardId()) == routing.MetaShard {
		return placement.Bootstrap(w, nodes, all)
	}
	return nil
}

// initialShards places the meta shard and the user shards on n nodes: shard
// s's replicas go round-robin from node s, so every node holds about the
// same number of replicas, and (the first replica being the preferred
// leader) of leaders. In the first placement a replica's id is its node's id.
// Keys hash by their hash tags (routing.KeyHashTags) in every new cluster.
func initialShards(n, shards, replicas int) []*concordpb.ShardDescriptor {
	r := min(replicas, n)
	starts, ends := routing.Ranges(shards)
	mk := func(shard ids.ShardID, first int, start, end uint64) *concordpb.ShardDescriptor {
		d := &concordpb.ShardDescriptor{ShardId: uint64(shard), StartHash: start, EndHash: end, Epoch: 1, NextReplicaId: uint64(n + 1),
			KeyHash: routing.KeyHashTags}
		for j := 0; j < r; j++ {
			node := uint64((first+j)%n + 1)
			d.Replicas = append(d.Replicas, &concordpb.ReplicaDescriptor{ReplicaId: node, NodeId: node})
		}
		return d
	}
	out := []*concordpb.ShardDescriptor{mk(routing.MetaShard, 0, 0, 0)}
	for i := range starts {
		out = append(out, mk(ids.ShardID(i+1), i, starts[i], ends[i]))
	}
	return out
}

// ErrRemoved is what the error of a node whose identity was removed from
// the cluster Is (errors.Is): it will never serve again from its data dir,
// so the command line exits with its own code, and a supervisor must not
// restart it (deploy/systemd: RestartPreventExitStatus).
var ErrRemoved = errors.New("node removed from the cluster")

// removedError is why a node whose identity was removed does not serve.
func removedError(id uint64) error { return removed{id} }

type removed struct{ id uint64 }

func (e removed) Error() string {
	return fmt.Sprintf("node %d was removed from the cluster and cannot serve under that identity again; "+
		"to add this machine back, empty its data dir and start it with --join", e.id)
}

func (removed) Is(target error) bool { return target == ErrRemoved }

// join asks the cluster, through the members at addrs (each in turn until
// one answers), for a new node id, and records the answer before serving.
//
// Every attempt carries the same join token, recorded durably before the
// first: if an answer is lost (the connection drops, the process crashes
// before recording it), the retry gets the node id the first attempt
// registered instead of registering a second identity at this address.
func (n *Node) join(ctx context.Context, addrs []string) error {
	token, err := n.joinToken()
	if err != nil {
		return err
	}
	drop := 0
	// Retry every 100 ms for a while: a member that cannot answer yet is
	// usually waiting for the meta shard's new leader (the one that died
	// may be the node this one replaces), elected one to two seconds
	// after the death, and a rebuild's time is counted from this start;
	// a backoff that had grown to 800 ms by then cost up to that much
	// more. An attempt is one small RPC. After joinFastRetries, once a
	// second.
	for round := 0; ; round++ {
		wait := 100 * time.Millisecond
		if round >= joinFastRetries {
			wait = time.Second
		}
		var lastErr error
		for _, via := range addrs {
			resp, err := n.askJoin(ctx, via, token)
			switch code := status.Code(err); {
			case err == nil && drop < n.cfg.TestDropJoinAnswers:
				drop++
				n.log.Warn("fault injection: dropping a join answer as if it were lost", "node", resp.GetNodeId(), "via", via)
			case err == nil:
				return n.saveJoin(resp)
			case code == codes.FailedPrecondition || code == codes.InvalidArgument:
				return fmt.Errorf("join through %s refused: %s", via, status.Convert(err).Message())
			default:
				lastErr = err
			}
		}
		if lastErr != nil && round%10 == 0 {
			n.log.Info("no member answered the join yet; retrying", "members", addrs, "err", lastErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopC:
			return fmt.Errorf("node stopped while joining")
		case <-time.After(wait):
		}
	}
}

// joinFastRetries is how many join rounds retry after 100 ms (about five
// seconds' worth) before the retries slow to one a second.
const joinFastRetries = 50

func (n *Node) askJoin(ctx context.Context, via string, token []byte) (*concordpb.JoinResponse, error) {
	conn, err := n.conns.get(via)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return concordpb.NewClusterClient(conn).Join(cctx, &concordpb.JoinRequest{Address: n.cfg.Addr, JoinToken: token,
		MaxKeyHash: routing.KeyHashTags, Version: uint32(n.level())})
}

// joinToken returns the node's join token, creating and recording it
// (fsynced) if it has none: 128 random bits.
func (n *Node) joinToken() ([]byte, error) {
	token, err := n.eng.JoinToken()
	if err != nil || token != nil {
		return token, err
	}
	token = make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	return token, n.eng.SetJoinToken(token)
}

// saveJoin records the identity and the address book the join answer
// gave, in one synced batch, before the node serves.
func (n *Node) saveJoin(resp *concordpb.JoinResponse) error {
	ident := &storepb.NodeIdent{ClusterId: resp.GetClusterId(), NodeId: resp.GetNodeId()}
	b := n.eng.NewBatch()
	defer b.Close()
	if err := storage.SetIdent(b, ident); err != nil {
		return err
	}
	for _, d := range resp.GetNodes() {
		if err := storage.SetAddress(b, d); err != nil {
			return err
		}
	}
	if err := storage.Commit(b, true); err != nil {
		return err
	}
	n.ident.Store(ident)
	if err := n.book.update(n.eng, resp.GetNodes()); err != nil {
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
// addr with the joiner's token (which marks an older node at the same
// address REPLACED, or, for a token seen before, returns the node it
// registered) and records the resulting address book.
//
// level is the joining binary's: below the cluster's version the join is
// refused. The check and the registration hold joinMu, so that no raise of
// the version falls between them (raiseTo).
func (n *Node) addNode(ctx context.Context, addr string, token []byte, level version.Level) (ids.NodeID, []*concordpb.NodeDescriptor, error) {
	n.placement.joinMu.Lock()
	defer n.placement.joinMu.Unlock()
	cv, err := n.readClusterVersion()
	if err != nil {
		return 0, nil, err
	}
	if cv = max(cv, version.Level(n.clusterVersion.Load())); level < cv {
		return 0, nil, JoinVersionError(cv, level)
	}
	if n.testHooks.joining != nil {
		n.testHooks.joining()
	}
	res, err := n.proposeMeta(ctx, joinCommand(addr, token, level, cv))
	if err != nil {
		return 0, nil, err
	}
	n.log.Info("node joined", "node", res.GetNodeId(), "addr", addr)
	_ = n.book.update(n.eng, res.GetNodes())
	// The join is the new node's first word: its silence counts from now,
	// not from when this placement leader began listening. The record
	// carries no level, so the node counts at Base until it reports: a
	// raise waiting on joinMu reads it so and holds back.
	n.placement.record(&concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: res.GetNodeId()}})
	// Plan now: the node's replacements (of a wiped predecessor or of a
	// dead node's replicas) and its first balancing moves need not wait
	// for the next tick.
	n.placement.kickRepair()
	return ids.NodeID(res.GetNodeId()), res.GetNodes(), nil
}

// addressRejoining is told that a process with an empty data dir asks to
// join from addr: whatever node was registered there (UP, SUSPECT or DEAD)
// lost its process, so the local followers of replicas it leads elect
// another leader at once. This is what lets a wiped node that led the meta
// shard get its join answered without waiting for an election timeout.
//
// A join retried after its first answer was lost names the address of the
// node that answer registered; that node cannot lead anything yet (its
// process is still joining and hosts no replica but, at most, learners), so
// the event changes nothing for it.
func (n *Node) addressRejoining(addr string) {
	if n.host == nil {
		return
	}
	for _, id := range n.book.atAddress(addr) {
		if id != n.ID() {
			n.host.LeaderGone(id)
		}
	}
}

// proposeMeta proposes cmd to the meta shard (this node leads it) and turns
// a refusal by the placement state machine into a gRPC status error.
func (n *Node) proposeMeta(ctx context.Context, cmd *storepb.Command) (*storepb.CommandResult, error) {
	cmd.UnixNanos = time.Now().UnixNano()
	res, err := n.host.Propose(ctx, routing.MetaShard, cmd)
	if err != nil {
		return nil, err
	}
	if c := codes.Code(res.GetErrorCode()); c != codes.OK {
		return nil, status.Error(c, res.GetErrorMessage())
	}
	return res, nil
}
