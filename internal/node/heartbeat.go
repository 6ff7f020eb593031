package node

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// placementState is what the placement leader learns from heartbeats. It lives
// in memory only: a new placement leader rebuilds it within a heartbeat.
type placementState struct {
	mu       sync.Mutex
	reports  map[ids.NodeID]scheduler.Report // guarded by mu: the last report per node
	loads    map[ids.NodeID]load             // guarded by mu: the load in each node's last report
	inflight map[ids.ShardID]bool            // guarded by mu: shards with a repair (key shard) or descriptor update (key shard|descriptorBusy) under way, nodes with a mark (key node|markBusy)
	steps    map[ids.ShardID]scheduler.Step  // guarded by mu: the step each shard's repair executes (a move, for the per-node cap)
	// transferred holds, per shard, the leadership transfer this node last
	// saw succeed and when (guarded by mu): first-hand knowledge of the
	// new leader, newer than any report until the new leader's report
	// arrives (view puts it in View.LeaderOverride until then). Without
	// it the rounds in between plan from the old leader: they send steps
	// to a node that no longer leads, and leader balancing moves more
	// leaderships off it than it should.
	transferred map[ids.ShardID]transfer
	// kick asks the repair loop for a round now (capacity one: kicks
	// coalesce), on a join and when a step ends, so the next step of a
	// move need not wait for the next tick.
	kick chan struct{}
	// report asks the heartbeat loop for a report now (capacity one),
	// when a local replica learns of a new leader (reportSoon).
	report chan struct{}
	// observedSince is when this node, as placement leader, built its
	// first view (guarded by mu); zero while it does not lead. The
	// scheduler judges silence from it for nodes that have not reported
	// since, so a new placement leader declares nobody dead at once.
	observedSince time.Time
	// lastRound is when this node, as placement leader, last ran a
	// scheduler round (guarded by mu); zero while it does not lead.
	lastRound time.Time
	// learnerSince holds, per shard and learner replica, how long the
	// learner has made no progress although it could have (guarded by mu;
	// learnerAges): the age the scheduler bounds (View.LearnerSince,
	// Settings.LearnerTimeout). A learner promoted or removed is dropped;
	// all are forgotten with observedSince, so a learner's age counts
	// within this placement leadership only.
	learnerSince map[ids.ShardID]map[ids.ReplicaID]learnerClock
	// stuck holds, per shard, the nodes a stuck learner of it was removed
	// from by a step this node executed, and when (guarded by mu;
	// View.StuckLearners): the shard's next replica goes elsewhere while
	// the entry is no older than Settings.LearnerTimeout, after which view
	// drops it.
	stuck map[ids.ShardID]map[ids.NodeID]time.Time

	// lastLeader is the placement leader named by the last heartbeat answer
	// (an ids.NodeID; atomic has no typed uint64).
	lastLeader atomic.Uint64
	rr         atomic.Uint64 // round-robin cursor for finding the placement leader
	// raising is set while a proposal raising the cluster's version is
	// under way (raiseClusterVersion).
	raising atomic.Bool
	// joinMu orders joins and raises of the cluster's version on the
	// placement leader (addNode, raiseTo): each holds it from its check to
	// its proposal's apply.
	joinMu sync.Mutex
	// heartbeatFailed is set when the last heartbeat got no answer: the
	// next goes to another node (which forwards) rather than to the
	// placement leader the cached routes name, which may be dead for good
	// (only a heartbeat answer refreshes those routes).
	heartbeatFailed atomic.Bool
}

// transfer is a leadership transfer that succeeded: to node, at.
type transfer struct {
	node ids.NodeID
	at   time.Time
}

// transferDone records that shard's leadership moved to node at now.
func (m *placementState) transferDone(shard ids.ShardID, node ids.NodeID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.transferred == nil {
		m.transferred = map[ids.ShardID]transfer{}
	}
	m.transferred[shard] = transfer{node: node, at: now}
}

// transferOverrides returns the leaders of the transfers recorded that no
// report received since names a leader for (caller holds mu); it forgets
// the others, and any older than maxAge (reports would have shown them).
func (m *placementState) transferOverrides(now time.Time, maxAge time.Duration) map[ids.ShardID]ids.NodeID {
	out := map[ids.ShardID]ids.NodeID{}
	for shard, t := range m.transferred {
		if now.Sub(t.at) > maxAge || m.reportedLeader(shard, t.at) {
			delete(m.transferred, shard)
			continue
		}
		out[shard] = t.node
	}
	return out
}

// reportedLeader reports whether a report received after since claims
// shard's leadership (caller holds mu).
func (m *placementState) reportedLeader(shard ids.ShardID, since time.Time) bool {
	for _, r := range m.reports {
		if !r.At.After(since) {
			continue
		}
		for _, rs := range r.Replicas {
			if ids.ShardID(rs.GetShardId()) == shard && rs.GetIsLeader() {
				return true
			}
		}
	}
	return false
}

// kickRepair asks for a repair round now; a kick already pending covers it.
func (m *placementState) kickRepair() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// reportSoon asks for a heartbeat now: a local replica learned of a new
// leader of its shard, which the placement leader otherwise hears of only
// at the next heartbeat, up to an interval later, and which it needs to
// address that shard's steps (a dead leader's shards get their
// replacement replicas only once their new leader is known). Several
// elections at once coalesce into one report.
func (m *placementState) reportSoon() {
	select {
	case m.report <- struct{}{}:
	default:
	}
}

// load is what a node reports about its use, for status pages, and the
// cluster version its binary applies.
type load struct {
	diskBytes   uint64
	requestRate float64
	version     version.Level
	// The space guard's figures (HeartbeatRequest.disk_free_bytes, ...).
	diskFree, diskReserve uint64
	diskLow               bool
	// tentative is the tentative writes it holds
	// (HeartbeatRequest.tentative_writes).
	tentative uint64
}

// record keeps req as its node's last report. It reports whether req
// names a leader for some shard that the node's previous report did not
// name (a new report, or one after an election or a transfer): then a
// scheduler round may have steps to address to that leader.
func (m *placementState) record(req *concordpb.HeartbeatRequest) (newLeader bool) {
	node := ids.NodeID(req.GetNode().GetNodeId())
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reports == nil {
		m.reports, m.loads = map[ids.NodeID]scheduler.Report{}, map[ids.NodeID]load{}
	}
	before := map[ids.ShardID]uint64{}
	for _, rs := range m.reports[node].Replicas {
		before[ids.ShardID(rs.GetShardId())] = rs.GetLeaderReplicaId()
	}
	for _, rs := range req.GetReplicas() {
		if l := rs.GetLeaderReplicaId(); l != 0 && before[ids.ShardID(rs.GetShardId())] != l {
			newLeader = true
		}
	}
	// A node older than tentative_writes sends none: 0, and a drained
	// LEAVING node of that binary is removed whatever it holds, as
	// before the field (scheduler.Report.Tentative).
	m.reports[node] = scheduler.Report{At: time.Now(), Replicas: req.GetReplicas(), DiskLow: req.GetDiskLow(),
		DiskFree: req.GetDiskFreeBytes(), DiskReserve: req.GetDiskReserveBytes(), Tentative: req.GetTentativeWrites(),
		SawLeaving: req.GetNode().GetState() == concordpb.NodeState_NODE_LEAVING, Stopping: req.GetStopping()}
	m.loads[node] = load{diskBytes: req.GetDiskBytes(), requestRate: req.GetRequestRate(), version: reportedLevel(req),
		diskFree: req.GetDiskFreeBytes(), diskReserve: req.GetDiskReserveBytes(), diskLow: req.GetDiskLow(),
		tentative: req.GetTentativeWrites()}
	return newLeader
}

// levelOf returns the level node's last report gave; false if it has not
// reported to this placement leader within maxAge of now. An older report
// says nothing of the binary the node runs now: a node that is down (or
// reported to another placement leader since) may come back on an older
// one.
func (m *placementState) levelOf(node ids.NodeID, now time.Time, maxAge time.Duration) (version.Level, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.loads[node]
	if !ok || now.Sub(m.reports[node].At) > maxAge {
		return version.Unknown, false
	}
	return l.version, true
}

// lowSpace returns the nodes held low on space in view v (lowSpaceNodes),
// with the figures of their last reports.
func (m *placementState) lowSpace(v scheduler.View) []*concordpb.LowSpaceNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return lowSpaceNodes(v, m.loads)
}

// loadOf returns node's last reported load.
func (m *placementState) loadOf(node ids.NodeID) load {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.loads[node]
}

// requestMeter turns the node's count of client requests into the rate
// each heartbeat reports.
type requestMeter struct {
	count atomic.Uint64 // client RPCs served, ever
	// lastCount and lastAt are the count and time of the previous
	// heartbeat; only the heartbeat loop touches them.
	lastCount uint64
	lastAt    time.Time
}

// rate returns the requests per second since the previous call.
func (r *requestMeter) rate(now time.Time) float64 {
	c := r.count.Load()
	defer func() { r.lastCount, r.lastAt = c, now }()
	if r.lastAt.IsZero() || !now.After(r.lastAt) {
		return 0
	}
	return float64(c-r.lastCount) / now.Sub(r.lastAt).Seconds()
}

// view assembles the scheduler's input from the placement state (nodes,
// shards) and the reports and in-flight changes held here, as of now.
func (m *placementState) view(now time.Time, s scheduler.Settings, nodes []*concordpb.NodeDescriptor, shards []*concordpb.ShardDescriptor) scheduler.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.observedSince.IsZero() {
		m.observedSince = now
	}
	v := scheduler.View{Now: now, Settings: s, Nodes: nodes, Shards: shards, ObservedSince: m.observedSince,
		Reports: make(map[ids.NodeID]scheduler.Report, len(m.reports)), InFlight: map[ids.ShardID]bool{}}
	for node, r := range m.reports {
		v.Reports[node] = r
	}
	for shard := range m.inflight {
		if shard&(descriptorBusy|markBusy) == 0 {
			v.InFlight[shard] = true
		}
	}
	if len(m.steps) > 0 {
		v.InFlightSteps = maps.Clone(m.steps)
	}
	v.LeaderOverride = m.transferOverrides(now, s.ReportMaxAge)
	v.LearnerSince = m.learnerAges(now, s, shards)
	v.StuckLearners = m.stuckLearners(now, s.LearnerTimeout)
	return v
}

// learnerClock is what view keeps of a learner: the applied index it
// last reported, how long it has reported that index while its shard was
// led (stuck), and when that was last brought up to date.
type learnerClock struct {
	applied uint64
	stuck   time.Duration
	last    time.Time
}

// learnerAges returns, for each learner of shards, since when it has been
// stuck (View.LearnerSince): now less the time it has reported the same
// applied index while its shard was led. The count starts at zero when a
// view first lists the learner and again whenever its applied index
// moves (progress); it pauses, keeping what it has, while the learner's
// node has no fresh report or no fresh report names a leader of its shard
// (an outage of the shard is not the learner's node's fault, and a
// leadership change or a late heartbeat must not wipe out the half hour
// a learner that never fits has already spent). A fresh report that does
// not list the learner counts as applied index 0: a node that refused its
// first snapshot never creates the replica. So a learner is judged stuck
// only after LearnerTimeout of a led shard without progress. m.mu is held.
func (m *placementState) learnerAges(now time.Time, s scheduler.Settings, shards []*concordpb.ShardDescriptor) map[ids.ShardID]map[ids.ReplicaID]time.Time {
	seen := make(map[ids.ShardID]map[ids.ReplicaID]learnerClock)
	out := make(map[ids.ShardID]map[ids.ReplicaID]time.Time)
	for _, d := range shards {
		shard := ids.ShardID(d.GetShardId())
		led := false
		for _, r := range d.GetReplicas() {
			if r.GetRole() != concordpb.ReplicaRole_REPLICA_LEARNER {
				continue
			}
			if seen[shard] == nil {
				seen[shard], out[shard] = map[ids.ReplicaID]learnerClock{}, map[ids.ReplicaID]time.Time{}
				led = m.shardLed(now, s, shard)
			}
			id := ids.ReplicaID(r.GetReplicaId())
			applied, fresh := m.learnerApplied(now, s, ids.NodeID(r.GetNodeId()), shard, id)
			c, ok := m.learnerSince[shard][id]
			switch {
			case !ok || fresh && applied != c.applied:
				c = learnerClock{applied: applied, last: now}
			case fresh && led:
				c.stuck += now.Sub(c.last)
				c.last = now
			default: // paused
				c.last = now
			}
			seen[shard][id], out[shard][id] = c, now.Add(-c.stuck)
		}
	}
	m.learnerSince = seen
	return out
}

// learnerApplied returns the applied index node's fresh report gives
// replica id of shard, and whether node has a fresh report: a fresh report
// that does not list the replica counts as applied index 0 (a node that
// could not even create it, its first snapshot refused, is the stuck
// learner's case itself). m.mu is held.
func (m *placementState) learnerApplied(now time.Time, s scheduler.Settings, node ids.NodeID, shard ids.ShardID, id ids.ReplicaID) (uint64, bool) {
	rep, ok := m.reports[node]
	if !ok || !rep.Fresh(now, s) {
		return 0, false
	}
	for _, rs := range rep.Replicas {
		if ids.ShardID(rs.GetShardId()) == shard && ids.ReplicaID(rs.GetReplicaId()) == id {
			return rs.GetAppliedIndex(), true
		}
	}
	return 0, true
}

// shardLed reports whether a fresh report names a leader of shard. m.mu
// is held.
func (m *placementState) shardLed(now time.Time, s scheduler.Settings, shard ids.ShardID) bool {
	for _, rep := range m.reports {
		if !rep.Fresh(now, s) {
			continue
		}
		for _, rs := range rep.Replicas {
			if ids.ShardID(rs.GetShardId()) == shard && rs.GetIsLeader() {
				return true
			}
		}
	}
	return false
}

// stuckRemoved records that a stuck learner of shard was removed from
// node at now (a StepRemoveReplica with Stuck set, done).
func (m *placementState) stuckRemoved(shard ids.ShardID, node ids.NodeID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stuck == nil {
		m.stuck = map[ids.ShardID]map[ids.NodeID]time.Time{}
	}
	if m.stuck[shard] == nil {
		m.stuck[shard] = map[ids.NodeID]time.Time{}
	}
	m.stuck[shard][node] = now
}

// stuckLearners drops the records of stuck learners older than timeout
// (all of them when it is zero: the scheduler then ignores them) and
// returns a copy of the others (View.StuckLearners). m.mu is held.
func (m *placementState) stuckLearners(now time.Time, timeout time.Duration) map[ids.ShardID]map[ids.NodeID]time.Time {
	out := make(map[ids.ShardID]map[ids.NodeID]time.Time, len(m.stuck))
	for shard, nodes := range m.stuck {
		for node, at := range nodes {
			if now.Sub(at) > timeout {
				delete(nodes, node)
			}
		}
		if len(nodes) == 0 {
			delete(m.stuck, shard)
			continue
		}
		out[shard] = maps.Clone(nodes)
	}
	return out
}

// stopObserving forgets when this node began observing: it no longer
// leads placement, and its reports will be stale if it leads again.
func (m *placementState) stopObserving() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observedSince, m.lastRound = time.Time{}, time.Time{}
	m.learnerSince = nil
}

// roundAt records a scheduler round at now. If the previous one was more
// than maxGap earlier, this node's loops did not run in between (a paused
// process, a stalled host) and it heard no reports then, through no fault
// of the nodes: it begins observing afresh at now (observedSince), as a
// new placement leader does, and reports true. Judged from their reports'
// age instead, every node, this one included, would be silent for the
// length of the pause: SUSPECT, or DEAD after a pause past DeadAfter.
func (m *placementState) roundAt(now time.Time, maxGap time.Duration) (restarted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.lastRound.IsZero() && now.Sub(m.lastRound) > maxGap {
		m.observedSince, restarted = now, true
	}
	m.lastRound = now
	return restarted
}

// descriptorBusy marks the busy keys of descriptor updates, a key space
// apart from the shards' repairs.
const descriptorBusy = 1 << 63

// begin marks shard busy; it reports false if it already was.
func (m *placementState) begin(shard ids.ShardID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight == nil {
		m.inflight = map[ids.ShardID]bool{}
	}
	if m.inflight[shard] {
		return false
	}
	m.inflight[shard] = true
	return true
}

func (m *placementState) end(shard ids.ShardID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, shard)
	delete(m.steps, shard)
}

// beginStep marks s's shard busy with s, which then counts as a move on
// the nodes it involves until end; it reports false if the shard was busy.
func (m *placementState) beginStep(s scheduler.Step) bool {
	if !m.begin(s.Shard) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.steps == nil {
		m.steps = map[ids.ShardID]scheduler.Step{}
	}
	m.steps[s.Shard] = s
	return true
}

// schedulerSettings are the scheduler's limits, derived from the node's
// configuration: a report counts for a few heartbeats, so one lost
// heartbeat does not hide a leader.
func (n *Node) schedulerSettings() scheduler.Settings {
	s := scheduler.DefaultSettings(n.cfg.HeartbeatInterval)
	s.SuspectAfter, s.DeadAfter = n.cfg.SuspectAfter, n.cfg.DeadAfter
	s.Replication = n.cfg.Replicas
	if n.cfg.MaxMovesPerNode > 0 {
		s.MaxMovesPerNode = n.cfg.MaxMovesPerNode
	}
	if n.cfg.LearnerTimeout > 0 { // 0: a Config not validated (tests)
		s.LearnerTimeout = n.cfg.LearnerTimeout
	}
	return s
}

// placementView is the scheduler's view of the cluster, read from the
// local meta replica's state and this node's heartbeat reports. It reads
// through Engine.Read: Heartbeat and Status handlers call it, and one that
// outlives Stop must get an error (Unavailable), not Pebble's panic.
func (n *Node) placementView() (scheduler.View, error) {
	var nodes []*concordpb.NodeDescriptor
	var shards []*concordpb.ShardDescriptor
	err := n.eng.Read(func(r storage.Reader) (err error) {
		if nodes, err = placement.Nodes(r); err != nil {
			return err
		}
		shards, err = placement.Shards(r)
		return err
	})
	if err != nil {
		return scheduler.View{}, readErr(err)
	}
	return n.placement.view(time.Now(), n.schedulerSettings(), nodes, shards), nil
}

// sendHeartbeat reports this node's replicas to the placement leader and
// learns the cluster's nodes and shards from the answer.
func (n *Node) sendHeartbeat(ctx context.Context) {
	// Its own record before the count: once the record says LEAVING, no
	// write can start holding (mayHoldTentative), and one that started
	// before is in the count (tentativeWrites), so the placement leader
	// may remove it on a count of 0 (scheduler.Report.SawLeaving).
	self := n.book.get(n.ID())
	req := &concordpb.HeartbeatRequest{Node: self, Version: uint32(n.level()),
		DiskBytes: n.eng.DiskUsage(), RequestRate: n.requests.rate(time.Now()),
		DiskFreeBytes: n.space.free.Load(), DiskReserveBytes: n.space.reserve.Load(), DiskLow: n.space.low.Load(),
		TentativeWrites: n.tentativeWrites(), Stopping: n.stopping.Load()}
	if req.Stopping {
		defer n.stoppingOnce.Do(func() { close(n.stoppingSent) })
	}
	if req.Node == nil {
		req.Node = &concordpb.NodeDescriptor{NodeId: uint64(n.ID()), Address: n.cfg.Addr}
	}
	infos := n.host.Infos()
	shards := make([]ids.ShardID, len(infos))
	for i, info := range infos {
		shards[i] = info.Shard
	}
	sizes := n.approxBytes(time.Now(), shards)
	for _, info := range infos {
		req.Replicas = append(req.Replicas, &concordpb.ReplicaStatus{
			ShardId: uint64(info.Shard), ReplicaId: uint64(info.ReplicaID), NodeId: uint64(n.ID()), LeaderReplicaId: uint64(info.LeaderReplica),
			Term: info.Term, CommitIndex: info.Commit, AppliedIndex: info.Applied, IsLeader: info.IsLeader,
			DescriptorEpoch: info.Desc.GetEpoch(), Role: roleIn(info.Desc, info.ReplicaID), ApproxBytes: sizes[info.Shard],
		})
		if info.IsLeader && info.Desc != nil {
			req.LedDescriptors = append(req.LedDescriptors, info.Desc)
		}
	}
	var resp *concordpb.HeartbeatResponse
	var err error
	if leader, local := n.leaderOf(routing.MetaShard); local {
		resp, err = n.handleHeartbeat(ctx, req)
	} else {
		target := leader
		if target == 0 || n.placement.heartbeatFailed.Load() {
			target = n.nextCandidate()
		}
		c, fctx, cerr := grpcapi.ClusterClientFor(ctx, n.backend(), target)
		if cerr != nil {
			n.placement.heartbeatFailed.Store(true)
			return
		}
		resp, err = c.Heartbeat(fctx, req)
	}
	n.placement.heartbeatFailed.Store(err != nil)
	if err != nil {
		n.log.Debug("heartbeat failed", "err", err)
		return
	}
	n.placement.lastLeader.Store(resp.GetMetaLeaderNodeId())
	n.learnClusterVersion(version.Level(resp.GetClusterVersion()))
	n.learnLowSpace(resp.GetLowSpace())
	if err := n.book.update(n.eng, resp.GetNodes()); err != nil {
		n.log.Warn("update address book", "err", err)
	}
	if self := n.book.get(n.ID()); self.GetState() == concordpb.NodeState_NODE_REMOVED {
		n.failRemoved()
		return
	}
	routes := resp.GetShards()
	n.routes.Store(&routes)
}

// roleIn returns replica's role in d (a voter if d does not list it).
func roleIn(d *concordpb.ShardDescriptor, replica ids.ReplicaID) concordpb.ReplicaRole {
	for _, r := range d.GetReplicas() {
		if ids.ReplicaID(r.GetReplicaId()) == replica {
			return r.GetRole()
		}
	}
	return concordpb.ReplicaRole_REPLICA_VOTER
}

// nextCandidate cycles through the other known nodes, to find the placement
// leader when no hint is known or the last heartbeat got no answer: the UP
// ones, or if the book shows none UP, any that may still serve (SUSPECT,
// DEAD, LEAVING). The book's states are those of the last heartbeat answer,
// which can be long stale just when heartbeats fail (a paused placement
// leader's own view judged its peers silent over its pause); skipping all
// of them would send no heartbeat, get no answer, and so keep that book,
// and the node silent, for good.
func (n *Node) nextCandidate() ids.NodeID {
	if id := n.nextOther(func(s concordpb.NodeState) bool { return s == concordpb.NodeState_NODE_UP }); id != 0 {
		return id
	}
	return n.nextOther(func(s concordpb.NodeState) bool {
		return s != concordpb.NodeState_NODE_REMOVED && s != concordpb.NodeState_NODE_REPLACED
	})
}

// nextOther returns the next node after the round-robin cursor, other than
// this one, whose state in the book ok accepts; 0 if none.
func (n *Node) nextOther(ok func(concordpb.NodeState) bool) ids.NodeID {
	nodes := n.book.all()
	for range nodes {
		d := nodes[int(n.placement.rr.Add(1))%len(nodes)]
		if id := ids.NodeID(d.GetNodeId()); id != n.ID() && ok(d.GetState()) {
			return id
		}
	}
	return 0
}

// handleHeartbeat runs on the placement leader: it records the report,
// proposes any newer descriptor a shard leader sent, and answers with the
// nodes and the shard routes. It first confirms that this node still leads
// the meta shard (confirmPlacementLeader), and refuses (Unavailable: the
// sender tries another node, which forwards) if it cannot: the sender
// writes the answer into its address book and routes over what it knew.
//
// A node whose binary is below the cluster's version is answered (a binary
// with versions stops itself on the answer) but not heard: its report is
// not recorded, so placement judges it silent, as it would a dead node.
func (n *Node) handleHeartbeat(ctx context.Context, req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	if err := n.confirmPlacementLeader(ctx); err != nil {
		return nil, err
	}
	cv, err := n.readClusterVersion()
	if err != nil {
		return nil, err
	}
	if reportedLevel(req) >= cv && n.placement.record(req) {
		n.placement.kickRepair()
	}
	v, err := n.placementView()
	if err != nil {
		return nil, err
	}
	n.raiseClusterVersion(v.Nodes, cv)
	for _, d := range newerDescriptors(v.Shards, req.GetLedDescriptors()) {
		n.recordDescriptor(d)
	}
	leaders := scheduler.Leaders(v)
	resp := &concordpb.HeartbeatResponse{Nodes: v.Nodes, MetaLeaderNodeId: uint64(n.ID()), ClusterVersion: uint32(cv),
		LowSpace: n.placement.lowSpace(v)}
	for _, d := range v.Shards {
		leader := leaders[ids.ShardID(d.GetShardId())].Node
		resp.Shards = append(resp.Shards, &concordpb.ShardRoute{Shard: d, LeaderNodeId: uint64(leader)})
	}
	return resp, nil
}

// confirmTicks bounds confirmPlacementLeader's wait, in raft ticks: an
// election timeout (multiraft's ElectionTicks), after which raft's
// CheckQuorum steps down a leader that no quorum answers.
const confirmTicks = 10

// confirmPlacementLeader returns nil once a linearizable read of the meta
// shard succeeded here: this node's meta replica leads, confirmed by a
// quorum (a ReadIndex round) or by its lease after the call began, and the
// placement state applied here holds everything the meta shard committed
// before (the engine only moves forward, so reads of it after the barrier
// see at least that). A leader deposed without knowing it yet (cut off,
// or a paused process resumed before a message with the new term or
// CheckQuorum stepped it down) cannot confirm: its state and its reports
// may be older than what its successor committed and told other nodes. The
// error is Unavailable: nothing was read or changed.
func (n *Node) confirmPlacementLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, confirmTicks*n.cfg.TickInterval)
	defer cancel()
	v, err := n.host.ReadIndex(ctx, routing.MetaShard)
	if err != nil {
		return status.Errorf(codes.Unavailable, "placement leadership of node %d not confirmed: %v", n.ID(), err)
	}
	v.Release()
	return nil
}

// newerDescriptors returns the descriptors of led that are newer than
// placement's (known) and that this binary can record: one with a field
// it does not know (a newer binary's) would stop every meta replica
// (storepb.ErrUnknownFields); its shard's own replicas keep it, and
// placement keeps the last one it knows.
func newerDescriptors(known, led []*concordpb.ShardDescriptor) []*concordpb.ShardDescriptor {
	epochs := make(map[uint64]uint64, len(known))
	for _, d := range known {
		epochs[d.GetShardId()] = d.GetEpoch()
	}
	var out []*concordpb.ShardDescriptor
	for _, d := range led {
		if e, ok := epochs[d.GetShardId()]; (!ok || e < d.GetEpoch()) && !storepb.HasUnknown(d) {
			out = append(out, d)
		}
	}
	return out
}

// recordDescriptor proposes a newer shard descriptor to the placement
// state, in the background (a heartbeat must not wait on raft).
func (n *Node) recordDescriptor(d *concordpb.ShardDescriptor) {
	n.placementJob(ids.ShardID(d.GetShardId())|descriptorBusy, func(ctx context.Context) {
		if err := n.proposeDescriptor(ctx, d); err != nil {
			n.log.Debug("record shard descriptor", "shard", d.GetShardId(), "err", err)
		}
	})
}

// placementJobTimeout bounds a background placement proposal, so that a
// job stuck (a meta shard without a leader) frees its key and a later
// round can try again.
const placementJobTimeout = 5 * time.Second

// placementJob runs job in the background, bounded by
// placementJobTimeout, with key marked busy in the placement state
// meanwhile: one job a key at a time, the node's stop waiting for it. A
// key already busy means the same work is under way, and job is dropped.
func (n *Node) placementJob(key ids.ShardID, job func(ctx context.Context)) {
	if !n.placement.begin(key) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.placement.end(key)
		ctx, cancel := context.WithTimeout(context.Background(), placementJobTimeout)
		defer cancel()
		job(ctx)
	}()
}

// proposeDescriptor proposes d to the placement state and waits for it to
// apply here. The state machine keeps the higher epoch, so proposing a
// descriptor twice, or an older one, changes nothing.
func (n *Node) proposeDescriptor(ctx context.Context, d *concordpb.ShardDescriptor) error {
	_, err := n.host.Propose(ctx, routing.MetaShard, &storepb.Command{UnixNanos: time.Now().UnixNano(),
		Kind: &storepb.Command_UpdateDescriptor{UpdateDescriptor: &storepb.UpdateDescriptor{Shard: proto.CloneOf(d)}}})
	return err
}

// placementLeaderHint names the node to ask for placement requests when the
// meta shard's leader is unknown: the last leader a heartbeat named, else
// any other known node (which forwards).
func (n *Node) placementLeaderHint() ids.NodeID {
	if h := ids.NodeID(n.placement.lastLeader.Load()); h != 0 && h != n.ID() {
		return h
	}
	return n.nextCandidate()
}
