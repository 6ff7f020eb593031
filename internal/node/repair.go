package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
)

// repair runs on the placement leader: it asks the scheduler what the
// cluster needs (internal/placement/scheduler, pure planning) and executes
// the steps, each in the background, one at a time per shard.
//
// It plans only once this node's leadership of the meta shard is confirmed
// (confirmPlacementLeader): a leader deposed without knowing it yet hears
// no reports (the nodes report to its successor), so it would judge every
// node silent, propose marks raft will refuse, and send shard leaders
// steps planned from that stale view, which a leader whose shard did not
// change since accepts (the epoch is all it checks).
func (n *Node) repair(ctx context.Context) {
	if _, local := n.leaderOf(routing.MetaShard); !local {
		n.placement.stopObserving()
		return
	}
	if err := n.confirmPlacementLeader(ctx); err != nil {
		n.log.Debug("no scheduler round", "err", err)
		return
	}
	if gap := n.roundGap(); n.placement.roundAt(time.Now(), gap) {
		n.log.Warn("no scheduler round for longer than expected (was this process paused?): judging nodes' silence afresh", "gap", gap)
	}
	v, err := n.placementView()
	if err != nil {
		n.log.Debug("placement view", "err", err)
		return
	}
	// This node's own leaderships are first-hand: fresher than any report,
	// and than the transfers it saw succeed (placementState.view).
	if v.LeaderOverride == nil {
		v.LeaderOverride = map[ids.ShardID]ids.NodeID{}
	}
	for _, info := range n.host.Infos() {
		if info.IsLeader {
			v.LeaderOverride[info.Shard] = n.ID()
		}
	}
	for _, s := range scheduler.Schedule(v) {
		n.execute(s)
	}
}

// roundGap is how long the placement leader may go without a scheduler
// round before it takes itself to have stopped (placementState.roundAt):
// several repair intervals, and half of SuspectAfter, so that a node that
// reports on time is not judged silent over the gap (a heartbeat interval
// plus the gap stays below SuspectAfter at the defaults: 1 s + 2.5 s < 5 s).
func (n *Node) roundGap() time.Duration {
	return max(n.cfg.SuspectAfter/2, 4*n.cfg.RepairInterval)
}

// execute runs step s in the background, at most one step per shard at a
// time; while it runs, the scheduler sees it in flight (View.InFlightSteps:
// a move on the nodes it involves). Node marks are proposed to the meta
// shard (markNode).
func (n *Node) execute(s scheduler.Step) {
	if s.Kind == scheduler.StepMarkNode {
		n.markNode(s)
		return
	}
	switch s.Kind {
	case scheduler.StepReplace, scheduler.StepAddLearner, scheduler.StepPromoteLearner,
		scheduler.StepRemoveReplica, scheduler.StepTransferLeader:
	default:
		n.log.Debug("scheduler step not executed", "step", scheduler.DescribeStep(s))
		return
	}
	shard := s.Shard
	if !n.placement.beginStep(s) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		// The scheduler's StepTimeout: a new placement leader waits that
		// long before planning on shards this step may be changing.
		ctx, cancel := context.WithTimeout(context.Background(), n.schedulerSettings().StepTimeout)
		defer cancel()
		ok := n.runStep(ctx, s)
		n.placement.end(shard)
		if ok {
			// The shard's next step may be due at once. Not after a
			// failure: planned again at once from the same view, the step
			// would fail again at once (a leader that died and whose
			// reports are still fresh), a busy loop; the tick retries it.
			n.placement.kickRepair()
		}
	}()
}

// runStep asks the shard's leader (s.Via, possibly this node) to make step
// s, planned against descriptor epoch s.Epoch: a leader whose shard changed
// since refuses it (Aborted), and the next round plans again. Each outcome
// is logged and counted (Node.StepCounts); it reports whether s was made.
//
// A learner added by StepAddLearner is promoted in the same step
// (promoteAdded): the scheduler would promote it anyway once caught up,
// and the shard's leader knows that first.
func (n *Node) runStep(ctx context.Context, s scheduler.Step) bool {
	c, fctx, err := n.clusterClient(ctx, s.Via)
	if err != nil {
		n.steps.record(s.Kind, err)
		return false
	}
	return n.runStepOn(ctx, fctx, c, s)
}

// runStepOn is runStep once the leader's client c (and the context fctx
// its calls take) is known.
func (n *Node) runStepOn(ctx, fctx context.Context, c clusterCaller, s scheduler.Step) bool {
	var desc *concordpb.ShardDescriptor
	var err error
	switch s.Kind {
	case scheduler.StepTransferLeader:
		_, err = c.TransferLeader(fctx, &concordpb.TransferLeaderRequest{ShardId: uint64(s.Shard), ReplicaId: uint64(s.Replica), PlannedEpoch: s.Epoch})
	case scheduler.StepPromoteLearner:
		desc, err = n.promoteWhileUp(fctx, c, s)
	default:
		desc, err = n.change(fctx, c, changeRequest(s))
	}
	n.steps.record(s.Kind, err)
	if s.Kind == scheduler.StepRemoveReplica && s.Stuck {
		// The shard's next learner goes elsewhere for a while
		// (View.StuckLearners). Even if the call failed: its removal may
		// have applied all the same (a timeout after the proposal), and
		// the node would then be the first choice for the shard's next
		// learner. If it did not apply, avoiding the node for the shard
		// changes nothing while the learner is still there.
		n.placement.stuckRemoved(s.Shard, s.ReplicaNode, time.Now())
	}
	if err != nil {
		n.log.Info("scheduler step not done yet", "step", scheduler.DescribeStep(s), "err", err)
		return false
	}
	n.log.Info("scheduler step done", "step", scheduler.DescribeStep(s), "epoch", desc.GetEpoch())
	if s.Kind == scheduler.StepTransferLeader {
		n.placement.transferDone(s.Shard, s.ReplicaNode, time.Now())
	}
	if desc != nil {
		// Recorded before the step ends, so that the next round, which
		// no longer sees the step in flight, sees its result: planned from
		// the old descriptor, it would count the replicas wrongly and
		// balance or repair again what this step just did.
		n.recordStepResult(ctx, desc)
	}
	if s.Kind == scheduler.StepAddLearner {
		n.promoteAdded(ctx, fctx, c, s, desc)
	}
	return true
}

// promoteAdded promotes the learner that step s (StepAddLearner) added,
// per descriptor d, through the same leader: the leader waits, within
// ctx, until its raft progress shows the learner caught up
// (multiraft.Host.PromoteLearner), instead of the scheduler waiting for
// the learner's next heartbeat report. If it does not catch up in time, or
// the leader changed, nothing is promoted and the learner stays: the
// scheduler's promotion rule plans it again from the reports. Counted and
// logged as a promote-learner step of its own.
func (n *Node) promoteAdded(ctx, fctx context.Context, c clusterCaller, s scheduler.Step, d *concordpb.ShardDescriptor) {
	p, ok := promotionOf(s, d)
	if !ok {
		return
	}
	desc, err := n.promoteWhileUp(fctx, c, p)
	n.steps.record(p.Kind, err)
	if err != nil {
		n.log.Info("learner not promoted with its addition; the scheduler will", "step", scheduler.DescribeStep(p), "err", err)
		return
	}
	n.log.Info("scheduler step done", "step", scheduler.DescribeStep(p), "epoch", desc.GetEpoch())
	n.recordStepResult(ctx, desc)
}

// promotionOf is the promotion of the learner that add-learner step s put
// on s.Target, planned against d, the descriptor the addition produced
// (its epoch, its replica id for the learner); false if d lists no
// learner there (already promoted, or the addition's result is unknown).
func promotionOf(s scheduler.Step, d *concordpb.ShardDescriptor) (scheduler.Step, bool) {
	r := replicaOnNode(d, s.Target)
	if r == nil || r.GetRole() != concordpb.ReplicaRole_REPLICA_LEARNER {
		return scheduler.Step{}, false
	}
	return scheduler.Step{Kind: scheduler.StepPromoteLearner, Shard: s.Shard, Via: s.Via, Epoch: d.GetEpoch(),
		Replica: ids.ReplicaID(r.GetReplicaId()), ReplicaNode: s.Target}, true
}

// errNotPromotable: a learner's node is not UP, as this placement leader
// judges it now, or this node cannot confirm that it still leads
// placement, so judges nothing.
var errNotPromotable = errors.New("not promoted")

// promotablePoll is how often promoteWhileUp judges the learner's node
// again while the leader waits for the learner to catch up.
const promotablePoll = 50 * time.Millisecond

// promoteWhileUp sends promotion p through c, if the learner's node is UP
// now (promotable): the step was planned earlier (an add-learner's own
// promotion, up to the step's 10 s before), and the node may have been
// marked LEAVING, or gone SUSPECT or DEAD, since. A voter there raises
// the shard's quorum with a vote that may never come. The leader holds a
// promotion until the learner has caught up (Host.PromoteLearner), so the
// node is judged again every promotablePoll meanwhile and the request
// cancelled once it is not UP: the leader then proposes nothing.
func (n *Node) promoteWhileUp(ctx context.Context, c clusterCaller, p scheduler.Step) (*concordpb.ShardDescriptor, error) {
	if err := n.promotable(ctx, p.ReplicaNode); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.cancelUnlessPromotable(ctx, cancel, p.ReplicaNode)
	}()
	desc, err := n.change(ctx, c, changeRequest(p))
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errNotPromotable) {
		err = cause
	}
	return desc, err
}

// cancelUnlessPromotable judges node every promotablePoll until ctx ends,
// and cancels ctx (with promotable's error) once node is not UP.
func (n *Node) cancelUnlessPromotable(ctx context.Context, cancel context.CancelCauseFunc, node ids.NodeID) {
	t := time.NewTicker(promotablePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.promotable(ctx, node); errors.Is(err, errNotPromotable) && ctx.Err() == nil {
			cancel(err)
			return
		}
	}
}

// promotable returns nil if node is UP as the scheduler judges it from
// this placement leader's state now (its recorded state, its reports),
// once that state is confirmed current (confirmPlacementLeader); else an
// error wrapping errNotPromotable, or the error reading the state. A
// leader deposed without knowing it yet (its promotion planned while it
// led) holds a state its successor may have moved on from (the node
// marked LEAVING there), and its reports of the node may still be fresh.
func (n *Node) promotable(ctx context.Context, node ids.NodeID) error {
	if err := n.confirmPlacementLeader(ctx); err != nil {
		return fmt.Errorf("%w: %w", errNotPromotable, err)
	}
	v, err := n.placementView()
	if err != nil {
		return err
	}
	st, known := scheduler.NodeStates(v)[node]
	if !known {
		return fmt.Errorf("%w: learner's node %d is not a member", errNotPromotable, node)
	}
	if st != concordpb.NodeState_NODE_UP {
		return fmt.Errorf("%w: learner's node %d is %s", errNotPromotable, node, strings.TrimPrefix(st.String(), "NODE_"))
	}
	return nil
}

// change sends one ChangeReplicas request and returns the new descriptor.
func (n *Node) change(ctx context.Context, c clusterCaller, req *concordpb.ChangeReplicasRequest) (*concordpb.ShardDescriptor, error) {
	resp, err := c.ChangeReplicas(ctx, req)
	return resp.GetShard(), err
}

// recordStepResult records a step's new descriptor in the placement state.
func (n *Node) recordStepResult(ctx context.Context, desc *concordpb.ShardDescriptor) {
	if err := n.proposeDescriptor(ctx, desc); err != nil {
		n.log.Debug("record shard descriptor", "shard", desc.GetShardId(), "err", err)
	}
}

// replicaOnNode returns d's replica on node, or nil.
func replicaOnNode(d *concordpb.ShardDescriptor, node ids.NodeID) *concordpb.ReplicaDescriptor {
	for _, r := range d.GetReplicas() {
		if ids.NodeID(r.GetNodeId()) == node {
			return r
		}
	}
	return nil
}

// changeRequest is the ChangeReplicas request that makes membership step s.
func changeRequest(s scheduler.Step) *concordpb.ChangeReplicasRequest {
	req := &concordpb.ChangeReplicasRequest{ShardId: uint64(s.Shard), PlannedEpoch: s.Epoch}
	switch s.Kind {
	case scheduler.StepAddLearner:
		req.Kind, req.AddNodeId = concordpb.ChangeKind_CHANGE_ADD_LEARNER, uint64(s.Target)
	case scheduler.StepPromoteLearner:
		req.Kind, req.ReplicaId = concordpb.ChangeKind_CHANGE_PROMOTE, uint64(s.Replica)
	case scheduler.StepRemoveReplica:
		req.Kind, req.ReplicaId = concordpb.ChangeKind_CHANGE_REMOVE, uint64(s.Replica)
		req.MinVoters = uint32(max(s.MinVoters, 0))
	default: // StepReplace
		req.RemoveReplicaId, req.AddNodeId = uint64(s.Replica), uint64(s.Target)
	}
	return req
}

// clusterClient returns a Cluster client for node: this node's own service
// when it is node, else a pooled connection.
func (n *Node) clusterClient(ctx context.Context, node ids.NodeID) (clusterCaller, context.Context, error) {
	if node == n.ID() {
		return localCluster{n.cluster}, ctx, nil
	}
	return grpcapi.ClusterClientFor(ctx, n.backend(), node)
}

// clusterCaller is the part of the Cluster API the executor calls.
type clusterCaller interface {
	ChangeReplicas(ctx context.Context, req *concordpb.ChangeReplicasRequest, opts ...grpc.CallOption) (*concordpb.ChangeReplicasResponse, error)
	TransferLeader(ctx context.Context, req *concordpb.TransferLeaderRequest, opts ...grpc.CallOption) (*concordpb.TransferLeaderResponse, error)
}

// localCluster calls this node's own Cluster service in-process.
type localCluster struct{ s *grpcapi.Cluster }

func (l localCluster) ChangeReplicas(ctx context.Context, req *concordpb.ChangeReplicasRequest, _ ...grpc.CallOption) (*concordpb.ChangeReplicasResponse, error) {
	return l.s.ChangeReplicas(ctx, req)
}

func (l localCluster) TransferLeader(ctx context.Context, req *concordpb.TransferLeaderRequest, _ ...grpc.CallOption) (*concordpb.TransferLeaderResponse, error) {
	return l.s.TransferLeader(ctx, req)
}

// stepCounts counts executed scheduler steps per kind, done and failed.
type stepCounts struct {
	mu           sync.Mutex
	done, failed map[scheduler.StepKind]uint64
}

func (c *stepCounts) record(k scheduler.StepKind, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done, c.failed = map[scheduler.StepKind]uint64{}, map[scheduler.StepKind]uint64{}
	}
	if err != nil {
		c.failed[k]++
	} else {
		c.done[k]++
	}
}

// StepCounts returns how many scheduler steps of each kind this node
// executed as placement leader, successfully and not.
func (n *Node) StepCounts() (done, failed map[scheduler.StepKind]uint64) {
	n.steps.mu.Lock()
	defer n.steps.mu.Unlock()
	return maps.Clone(n.steps.done), maps.Clone(n.steps.failed)
}
