package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/version"
)

// pausableTicks is a raft tick source (testHooks.ticks) that ticks every
// interval until the test pauses it: a paused node's raft has no clock, so
// CheckQuorum never steps its leaders down, as a SIGSTOPped process's
// cannot, while the rest of the node (its gRPC handlers, its heartbeat
// and repair loops, on real timers) goes on.
type pausableTicks struct {
	c      chan time.Time
	paused atomic.Bool
	done   chan struct{}
	once   sync.Once
}

func newPausableTicks(interval time.Duration) *pausableTicks {
	p := &pausableTicks{c: make(chan time.Time, 1), done: make(chan struct{})}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case now := <-t.C:
				if p.paused.Load() {
					continue
				}
				select {
				case p.c <- now:
				default:
				}
			}
		}
	}()
	return p
}

func (p *pausableTicks) C() <-chan time.Time { return p.c }
func (p *pausableTicks) Stop()               { p.once.Do(func() { close(p.done) }) }

// deposedPlacementLeader starts three real nodes in this process, then
// freezes the raft clock of the placement leader (stale) and cuts it off
// from the others, and waits until another node (fresh) leads the meta
// shard and has recorded stale SUSPECT there, while stale still believes
// it leads: no tick steps it down (CheckQuorum), no message brings it the
// new term. That is a stale placement leader in the window before it
// learns it was deposed, held open for as long as the test needs.
func deposedPlacementLeader(t *testing.T) (nodes []*Node, stale, fresh *Node) {
	t.Helper()
	ticks := make([]*pausableTicks, 3)
	nodes, _ = startClusterWith(t, []version.Level{0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		cfg.SuspectAfter, cfg.DeadAfter = 300*time.Millisecond, time.Minute
		ticks[i] = newPausableTicks(cfg.TickInterval)
		hooks.ticks = ticks[i]
	})
	// A leader transfer already under way when the clock stops (the
	// start-up leader balancing) needs no tick: the target campaigns at
	// once, and stale steps down. Then the setup starts over.
	for attempt := 1; ; attempt++ {
		var idx int
		stale, idx = pickPlacementLeader(t, nodes)
		ticks[idx].paused.Store(true)
		stale.partitionFrom(nil)
		var deposedEarly bool
		waitFor(t, 20*time.Second, func() error {
			if isLeader, _, _ := stale.host.Leader(routing.MetaShard); !isLeader {
				deposedEarly = true
				return nil
			}
			fresh = nil
			for _, n := range nodes {
				if _, local := n.leaderOf(routing.MetaShard); local && n != stale {
					fresh = n
				}
			}
			if fresh == nil {
				return errors.New("no new meta leader yet")
			}
			if st, _ := recordedState(t, fresh, stale.ID()); st != concordpb.NodeState_NODE_SUSPECT {
				return fmt.Errorf("the new placement leader records node %d %s", stale.ID(), st)
			}
			return nil
		})
		if !deposedEarly {
			break
		}
		if attempt == 5 {
			t.Fatalf("node %d stepped down with its raft clock stopped, %d times", stale.ID(), attempt)
		}
		t.Logf("node %d stepped down with its raft clock stopped (a transfer under way?); starting over", stale.ID())
		stale.heal()
		ticks[idx].paused.Store(false)
	}
	return nodes, stale, fresh
}

// pickPlacementLeader waits until every node has had a heartbeat answer
// and one leads the meta shard, and returns that one and its index.
func pickPlacementLeader(t *testing.T, nodes []*Node) (leader *Node, idx int) {
	t.Helper()
	waitFor(t, 10*time.Second, func() error {
		leader = nil
		for i, n := range nodes {
			if n.routes.Load() == nil {
				return fmt.Errorf("node %d has no heartbeat answer yet", n.ID())
			}
			if _, local := n.leaderOf(routing.MetaShard); local {
				leader, idx = n, i
			}
		}
		if leader == nil {
			return errors.New("no placement leader yet")
		}
		return nil
	})
	return leader, idx
}

// recordedState is node's state in n's local copy of the placement state;
// false if it lists no such node.
func recordedState(t *testing.T, n *Node, node ids.NodeID) (concordpb.NodeState, bool) {
	t.Helper()
	var ds []*concordpb.NodeDescriptor
	err := n.eng.Read(func(r storage.Reader) (err error) {
		ds, err = placement.Nodes(r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if ids.NodeID(d.GetNodeId()) == node {
			return d.GetState(), true
		}
	}
	return 0, false
}

// TestDeposedPlacementLeaderAnswersNoHeartbeat: a placement leader that was
// deposed but does not know it yet refuses heartbeats (Unavailable: the
// sender tries another node, which forwards to the real leader) rather
// than answering from its own state, which is stale. A node that takes
// such an answer overwrites its fresher book and routes with it: it
// records nodes in states the cluster left (here the deposed node UP,
// where the new leader recorded it SUSPECT; a node back UP recorded DEAD
// makes it drop that node's leaders, LeaderGone), names the deposed node
// as placement leader, and keeps heartbeating it.
func TestDeposedPlacementLeaderAnswersNoHeartbeat(t *testing.T) {
	nodes, stale, fresh := deposedPlacementLeader(t)
	var other *Node
	for _, n := range nodes {
		if n != stale && n != fresh {
			other = n
		}
	}
	// The heartbeat other would send, taken by the handler a peer's RPC
	// reaches (the partition's interceptor is not in this path).
	req := &concordpb.HeartbeatRequest{Node: other.book.get(other.ID()), Version: uint32(other.level())}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := stale.cluster.Heartbeat(ctx, req)
	if err == nil {
		state := "missing"
		for _, d := range resp.GetNodes() {
			if ids.NodeID(d.GetNodeId()) == stale.ID() {
				state = d.GetState().String()
			}
		}
		t.Fatalf("deposed placement leader %d answered a heartbeat: it names %d placement leader (%d leads) and itself %s (recorded SUSPECT)",
			stale.ID(), resp.GetMetaLeaderNodeId(), fresh.ID(), state)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("deposed placement leader refused a heartbeat with %v; want Unavailable (retry elsewhere)", err)
	}
}

// TestDeposedPlacementLeaderPlansNothing: a placement leader that was
// deposed but does not know it yet runs no scheduler round. Its reports
// stop with its leadership, so it judges every node silent (here SUSPECT,
// itself included) and would act on that: propose marks (which raft
// refuses, but only after holding them for their timeout) and send steps
// to shard leaders planned from a stale view of liveness, which a leader
// whose shard did not change accepts (its epoch check is all it checks).
func TestDeposedPlacementLeaderPlansNothing(t *testing.T) {
	_, stale, _ := deposedPlacementLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stale.repair(ctx)
	// Marks only: a step the leader began while it still led (a transfer
	// from leader balancing, say) may still be under way, and says
	// nothing. A mark is planned only for a node silent past SuspectAfter,
	// longer than the leader's lease outlives the partition.
	stale.placement.mu.Lock()
	defer stale.placement.mu.Unlock()
	for key := range stale.placement.inflight {
		if key&markBusy != 0 {
			t.Errorf("deposed placement leader %d is marking node %d from its stale view", stale.ID(), uint64(key&^markBusy))
		}
	}
}

// TestPausedPlacementLeaderJudgesNoSilenceOverItsPause: a placement leader
// whose own rounds stopped for longer than a node may be silent (a paused
// process; here its loops send and run nothing until the test runs them)
// and that still leads when it resumes (the other meta voters could not
// elect meanwhile: paused too, or down) judges no node silent over that
// gap: it heard nothing because it was not running, not because the nodes
// were. Judged from their reports' age, every node, itself included, was
// SUSPECT at its first round (DEAD after a pause past --dead-after), and
// the marks it proposed commit, since it still leads.
func TestPausedPlacementLeaderJudgesNoSilenceOverItsPause(t *testing.T) {
	const suspectAfter = time.Second
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0}, func(_ int, cfg *Config, hooks *testHooks) {
		// The rounds' gap that reveals a pause (roundGap) is then half of
		// SuspectAfter: the pause below is longer than both.
		cfg.SuspectAfter, cfg.DeadAfter, cfg.RepairInterval = suspectAfter, time.Minute, 100*time.Millisecond
		hooks.noHeartbeats, hooks.noRepairs = true, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Rounds until the placement leader has nothing left to do (leader
	// balancing may move the meta shard's leadership first).
	var leader *Node
	waitFor(t, 20*time.Second, func() error {
		leader = nil
		for _, n := range nodes {
			n.sendHeartbeat(ctx)
			if _, local := n.leaderOf(routing.MetaShard); local {
				leader = n
			}
		}
		if leader == nil {
			return errors.New("no placement leader yet")
		}
		for _, n := range nodes {
			if err := reportedSince([]*Node{leader}, n.ID(), time.Time{}); err != nil && n != leader {
				return err
			}
		}
		leader.repair(ctx)
		return settled(leader)
	})
	// The pause: the fault this test injects, not a wait for anything.
	time.Sleep(suspectAfter + suspectAfter/2)
	leader.repair(ctx)
	// The round's marks, if any, began before repair returned: wait until
	// they are recorded (or failed), then look.
	waitFor(t, 10*time.Second, func() error {
		leader.placement.mu.Lock()
		defer leader.placement.mu.Unlock()
		for key := range leader.placement.inflight {
			if key&markBusy != 0 {
				return fmt.Errorf("placement leader %d is marking node %d", leader.ID(), uint64(key&^markBusy))
			}
		}
		return nil
	})
	for _, n := range nodes {
		if st, _ := recordedState(t, leader, n.ID()); st != concordpb.NodeState_NODE_UP {
			t.Errorf("placement leader %d recorded node %d %s after its own pause", leader.ID(), n.ID(), st)
		}
	}
}

// settled says what the placement leader n still does or plans: nil once
// it has no step under way and its next round would plan none.
func settled(n *Node) error {
	n.placement.mu.Lock()
	busy := len(n.placement.inflight)
	n.placement.mu.Unlock()
	if busy > 0 {
		return fmt.Errorf("placement leader %d has %d steps under way", n.ID(), busy)
	}
	v, err := n.placementView()
	if err != nil {
		return err
	}
	if steps := scheduler.Schedule(v); len(steps) > 0 {
		return fmt.Errorf("placement leader %d plans %s", n.ID(), scheduler.DescribeStep(steps[0]))
	}
	return nil
}

// TestRoundAtRestartsTheWatchAfterAGap: a round more than the gap after
// the previous one restarts the placement leader's watch (observedSince
// moves to it); the first round, rounds within the gap, and the first
// round after the node stopped leading do not.
func TestRoundAtRestartsTheWatchAfterAGap(t *testing.T) {
	var m placementState
	t0 := time.Unix(1000, 0)
	m.observedSince = t0
	for _, tc := range []struct {
		at      time.Duration // after t0
		restart bool
	}{{0, false}, {time.Second, false}, {3 * time.Second, false}, {5*time.Second + time.Millisecond, true}, {6 * time.Second, false}} {
		now := t0.Add(tc.at)
		if got := m.roundAt(now, 2*time.Second); got != tc.restart {
			t.Fatalf("round at +%v: restarted %v; want %v", tc.at, got, tc.restart)
		}
		if tc.restart && !m.observedSince.Equal(now) {
			t.Fatalf("round at +%v restarted the watch, but it began at %v", tc.at, m.observedSince)
		}
	}
	m.stopObserving()
	if m.roundAt(t0.Add(time.Hour), 2*time.Second) {
		t.Fatal("the first round after the node stopped leading restarted a watch")
	}
}

// TestDeposedPlacementLeaderAnswersNoStatus: a status request is
// linearizable by default, as etcd's member list is. A placement leader
// deposed without knowing it yet refuses it (Unavailable: the client asks
// another node) rather than answer from its own state, which is stale: it
// hears no reports, so it shows every node silent (SUSPECT), itself
// included, where its successor has the others UP. Asked for a stale
// status, it answers from that state, as the request allows.
func TestDeposedPlacementLeaderAnswersNoStatus(t *testing.T) {
	_, stale, fresh := deposedPlacementLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := stale.cluster.Status(ctx, &concordpb.StatusRequest{})
	if err == nil {
		var states []string
		for _, ns := range resp.GetNodes() {
			states = append(states, fmt.Sprintf("%d %s", ns.GetNode().GetNodeId(), ns.GetNode().GetState()))
		}
		t.Fatalf("deposed placement leader %d answered a status request (answered by %d, nodes %v; node %d leads placement)",
			stale.ID(), resp.GetAnsweredByNodeId(), states, fresh.ID())
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("deposed placement leader refused a status request with %v; want Unavailable (retry elsewhere)", err)
	}
	resp, err = stale.cluster.Status(ctx, &concordpb.StatusRequest{Stale: true})
	if err != nil {
		t.Fatalf("a stale status request: %v", err)
	}
	if resp.GetAnsweredByNodeId() != uint64(stale.ID()) || len(resp.GetNodes()) != 3 {
		t.Fatalf("a stale status request was answered by node %d with %d nodes; want node %d's own view of 3",
			resp.GetAnsweredByNodeId(), len(resp.GetNodes()), stale.ID())
	}
}

// TestStatusFromACutOffNode: a node that cannot reach the placement leader
// fails a default (linearizable) status request, Unavailable, so that the
// client asks another node; it no longer answers with its own view, whose
// node states are those of its last heartbeat answer. A stale request gets
// that view. A node that reaches the leader forwards either kind to it.
func TestStatusFromACutOffNode(t *testing.T) {
	nodes, _ := startCluster(t, []version.Level{0, 0, 0})
	leader, _ := pickPlacementLeader(t, nodes)
	var follower *Node
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Polled: the start-up leader balancing may move the meta shard's
	// leadership meanwhile, and a request then finds no leader for a while.
	for _, stale := range []bool{false, true} {
		waitFor(t, 10*time.Second, func() error {
			resp, err := follower.cluster.Status(ctx, &concordpb.StatusRequest{Stale: stale})
			if err != nil || resp.GetAnsweredByNodeId() == uint64(follower.ID()) {
				return fmt.Errorf("status (stale %t) through node %d: answered by %d, %v; want the placement leader's answer",
					stale, follower.ID(), resp.GetAnsweredByNodeId(), err)
			}
			return nil
		})
	}
	follower.partitionFrom(nil)
	defer follower.heal()
	resp, err := follower.cluster.Status(ctx, &concordpb.StatusRequest{})
	if err == nil {
		t.Fatalf("node %d, cut off, answered a linearizable status request (answered by %d)", follower.ID(), resp.GetAnsweredByNodeId())
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("node %d, cut off, refused a status request with %v; want Unavailable", follower.ID(), err)
	}
	resp, err = follower.cluster.Status(ctx, &concordpb.StatusRequest{Stale: true})
	if err != nil || resp.GetAnsweredByNodeId() != uint64(follower.ID()) {
		t.Fatalf("a stale status request to node %d, cut off: answered by %d, %v; want its own view",
			follower.ID(), resp.GetAnsweredByNodeId(), err)
	}
}

// TestDeposedPlacementLeaderPromotesNothing: a placement leader deposed
// without knowing it yet judges no learner's node promotable, even one
// whose report it holds fresh (here one recorded just now, as if it had
// arrived just before the partition): its successor may have marked that
// node LEAVING meanwhile, which its stale state does not show. A
// promotion it planned while it led is therefore not sent to the shard's
// leader.
func TestDeposedPlacementLeaderPromotesNothing(t *testing.T) {
	nodes, stale, fresh := deposedPlacementLeader(t)
	var other *Node
	for _, n := range nodes {
		if n != stale && n != fresh {
			other = n
		}
	}
	stale.placement.record(&concordpb.HeartbeatRequest{Node: other.book.get(other.ID()), Version: uint32(other.level())})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stale.promotable(ctx, other.ID()); !errors.Is(err, errNotPromotable) {
		t.Fatalf("deposed placement leader %d judged node %d promotable: %v; want errNotPromotable", stale.ID(), other.ID(), err)
	}
	l := &recordingLeader{}
	promote := scheduler.Step{Kind: scheduler.StepPromoteLearner, Shard: 1, Via: other.ID(), Epoch: 2, Replica: 2, ReplicaNode: other.ID()}
	if stale.runStepOn(ctx, ctx, l, promote) || len(l.asked()) != 0 {
		t.Fatalf("deposed placement leader %d sent a promotion: asked the leader for %v", stale.ID(), l.asked())
	}
}
