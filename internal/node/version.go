package node

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// The cluster version gate (package version): every heartbeat reports the
// level this node's binary applies; the placement leader raises the
// cluster's version, a record of the meta shard, once every node that is
// not removed has reported a higher level, and answers every heartbeat
// with it. A node learns it there, records it (synced), and uses a feature
// only once the version allows it (backend.ClusterVersion). A binary below
// the cluster's version stops (learnClusterVersion), will not start on the
// data of a node that knew the higher version (checkVersionAtStart), cannot
// join (grpcapi.Cluster.Join), and is not heard by placement (a pre-level
// binary cannot stop itself: silent, it is judged dead and its replicas
// are replaced).

// level is the cluster version this node's binary applies, as it reports
// it: version.Binary, or the lower level a test sets in Config.Version to
// stand for an older binary.
func (n *Node) level() version.Level {
	if n.cfg.Version != 0 {
		return n.cfg.Version
	}
	return version.Binary
}

// checkVersionAtStart refuses to start a binary below the cluster version
// this node last learned or its meta replica holds: the raft logs here may
// hold entries it would apply differently. Otherwise the node starts with
// that version known, so its features need not wait for a heartbeat.
func (n *Node) checkVersionAtStart() error {
	seen, err := n.eng.ClusterVersion()
	if err != nil {
		return err
	}
	cv := version.Level(seen)
	err = n.eng.Read(func(r storage.Reader) error {
		meta, err := placement.ClusterVersion(r)
		cv = max(cv, meta)
		return err
	})
	if err != nil {
		return err
	}
	if cv > n.level() {
		return versionError(cv, n.level())
	}
	n.clusterVersion.Store(uint32(cv))
	return nil
}

func versionError(cluster, binary version.Level) error {
	return fmt.Errorf("the cluster's version is %d, above the %d this binary applies: run a newer concord binary on this node "+
		"(it stopped rather than apply what it does not know)", cluster, binary)
}

// learnClusterVersion takes the cluster's version from a heartbeat answer:
// above this binary's level, the node stops; above what it knew, it is
// recorded before any proposal uses it.
func (n *Node) learnClusterVersion(cv version.Level) {
	if cv > n.level() {
		n.fail(versionError(cv, n.level()))
		return
	}
	n.learnMu.Lock()
	defer n.learnMu.Unlock()
	if uint32(cv) <= n.clusterVersion.Load() {
		return
	}
	if err := n.eng.SetClusterVersion(uint32(cv)); err != nil {
		n.log.Warn("record the cluster version", "version", cv, "err", err)
		return // learned again at the next heartbeat
	}
	n.clusterVersion.Store(uint32(cv))
	n.log.Info("cluster version raised", "version", cv)
}

// reportedLevel is the level a heartbeat reports; a binary from before
// levels reports none and applies Base.
func reportedLevel(req *concordpb.HeartbeatRequest) version.Level {
	return max(version.Base, version.Level(req.GetVersion()))
}

// readClusterVersion reads the cluster's version from the local meta
// replica (the placement leader's).
func (n *Node) readClusterVersion() (cv version.Level, err error) {
	err = n.eng.Read(func(r storage.Reader) (err error) {
		cv, err = placement.ClusterVersion(r)
		return err
	})
	return cv, readErr(err)
}

// clusterVersionTarget is the level the cluster's version may rise to: the
// lowest level reported by a node that is not removed or replaced (a dead
// one counts: it may come back). ok is false while some such node has not
// reported to this placement leader lately (levelOf): one that is down
// holds the version back, whatever its last report said, since it may
// come back on an older binary.
func clusterVersionTarget(nodes []*concordpb.NodeDescriptor, levelOf func(ids.NodeID) (version.Level, bool)) (target version.Level, ok bool) {
	target = version.Binary
	for _, d := range nodes {
		switch d.GetState() {
		case concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED:
			continue
		}
		l, ok := levelOf(ids.NodeID(d.GetNodeId()))
		if !ok {
			return version.Unknown, false
		}
		target = min(target, l)
	}
	return target, true
}

// raiseClusterVersion, on the placement leader, proposes the cluster's
// version up to what every node reports, in the background (a heartbeat
// must not wait on raft); one proposal at a time. nodes may be stale: the
// proposal is decided again under joinMu (raiseTo).
func (n *Node) raiseClusterVersion(nodes []*concordpb.NodeDescriptor, cv version.Level) {
	now, maxAge := time.Now(), n.schedulerSettings().ReportMaxAge
	target, ok := clusterVersionTarget(nodes, func(node ids.NodeID) (version.Level, bool) {
		return n.placement.levelOf(node, now, maxAge)
	})
	if !ok || target <= cv || !n.placement.raising.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.placement.raising.Store(false)
		n.raiseTo(cv)
	}()
}

// raiseTo proposes the cluster's version up from cv, if every node now
// allows it. It holds joinMu, which joins hold from their check of the
// version to their registration (addNode), and reads the nodes afresh
// under it: a join either registered first, and its node (recorded at
// Base until it reports) holds the raise back, or checks after the raise
// applied, and is refused.
//
// Across a change of placement leader joinMu orders nothing: the raise
// names the registrations it read (raiseCommand), and the meta shard
// refuses it if another leader registered a node before it applied.
func (n *Node) raiseTo(cv version.Level) {
	n.placement.joinMu.Lock()
	defer n.placement.joinMu.Unlock()
	// The counter before the nodes: a registration between the two reads
	// then shows in the nodes (and holds the raise back) or makes the
	// raise's basis stale (and the raise is refused), never neither.
	next, err := n.nextNodeID()
	if err != nil {
		return
	}
	v, err := n.placementView()
	if err != nil {
		return
	}
	now, maxAge := time.Now(), n.schedulerSettings().ReportMaxAge
	target, ok := clusterVersionTarget(v.Nodes, func(node ids.NodeID) (version.Level, bool) {
		return n.placement.levelOf(node, now, maxAge)
	})
	if !ok || target <= cv {
		return
	}
	if n.testHooks.raising != nil {
		n.testHooks.raising()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err = n.proposeMeta(ctx, raiseCommand(target, next)); err != nil {
		n.log.Debug("raise the cluster version", "version", target, "err", err)
		return
	}
	n.log.Info("cluster version raised by placement", "from", cv, "to", target)
	// Applied here: use it now (joins check against it), not at the next
	// heartbeat.
	n.learnClusterVersion(target)
}

// raiseCommand raises the cluster's version to target, decided on the
// nodes registered before id next. A raise to version.OrderedJoins or above
// names next, for the meta shard to refuse it if a node registered since;
// below, it cannot: some replica's binary may not know the field (it would
// stop on it).
func raiseCommand(target version.Level, next uint64) *storepb.Command {
	set := &storepb.SetClusterVersion{Version: uint32(target)}
	if target.Allows(version.OrderedJoins) {
		set.NextNodeId = next
	}
	return &storepb.Command{Kind: &storepb.Command_SetClusterVersion{SetClusterVersion: set}}
}

// joinCommand registers a node at addr with token, whose binary applies
// level, at a cluster whose version is cv: from version.OrderedJoins on it
// names the level, for the meta shard to refuse the join if a raise above
// it applied first (below, some replica's binary may not know the field).
func joinCommand(addr string, token []byte, level, cv version.Level) *storepb.Command {
	add := &storepb.AddNode{Address: addr, JoinToken: token}
	if cv.Allows(version.OrderedJoins) {
		add.Level = uint32(level)
	}
	return &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: add}}
}

// nextNodeID reads the meta shard's next node id from the local replica.
func (n *Node) nextNodeID() (next uint64, err error) {
	err = n.eng.Read(func(r storage.Reader) (err error) {
		next, err = placement.NextNodeID(r)
		return err
	})
	return next, readErr(err)
}

// testHooks let a test stop a node at a point of a race.
type testHooks struct {
	// raising runs in raiseTo, under joinMu, before the proposal.
	raising func()
	// joining runs in addNode, under joinMu, after the version check.
	joining func()
	// identified runs in Start once the node has its identity, before
	// raft starts.
	identified func()
	// joinVia runs in establishIdentity when a fresh node's probes
	// decided to join, with the peer that decided it, before the join.
	joinVia func(via string)
	// noHeartbeats: the node sends only the heartbeats a test sends
	// (sendHeartbeat), none at start or on its own.
	noHeartbeats bool
	// noRepairs: the node runs only the scheduler rounds a test runs
	// (repair), none on its own.
	noRepairs bool
	// restoreBatchBytes, when set, replaces loadBatchBytes: a restore's
	// load commits a batch (not synced) every that many bytes of keys
	// and values.
	restoreBatchBytes int
	// restoreFlushed runs in a restore's load after each batch it
	// committed, before the next: where a test crashes the load midway.
	restoreFlushed func()
	// ticks, when set, replaces the raft loop's ticker (multiraft.Config.Ticks):
	// a test that stops it freezes raft's clocks on this node, as a paused
	// process's are, while its gRPC handlers and loops go on.
	ticks multiraft.TickSource
	// diskSpace, when set, replaces the measurement of the data dir's
	// filesystem (free and total bytes) by the space guard.
	diskSpace func() (free, total uint64, err error)
	// shardSizeEvery, when set, replaces shardSizeEvery: how often the
	// heartbeats measure the replicas' sizes anew.
	shardSizeEvery time.Duration
	// reconcileGate, when set, holds the reconciler back until it is
	// closed: the node keeps the tentative writes it holds meanwhile.
	reconcileGate <-chan struct{}
}

// JoinVersionError is the refusal of a join from a binary below the
// cluster's version.
func JoinVersionError(cluster, joiner version.Level) error {
	return status.Error(codes.FailedPrecondition, version.JoinRefusal(cluster, joiner))
}
