package robustness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// The membership fault kinds (join, remove, kill-and-stay-dead) change the
// cluster for good, so their histories start with more nodes than R and
// judge silence quickly; each fault's heal waits for the placement service
// to have done its part and fails the history if it does not.
const (
	// replication is R, the server's default --replicas.
	replication = 3
	// membershipNodes is the node count a history with membership kinds
	// starts with: one more than R, so a node can go and R remain.
	membershipNodes = 4
	// maxLive bounds the live nodes: a join beyond it becomes a remove.
	maxLive = 5
	// settleTimeout bounds how long the placement service may take to act
	// on a membership fault (dead-after, then re-creating a dead node's
	// replicas a couple at a time by snapshot, on a loaded 2-core box).
	settleTimeout = 2 * time.Minute
)

// membershipArgs are the liveness flags of a history with membership kinds:
// a node killed for good is declared dead (and its replicas re-created)
// within seconds rather than the default minute.
var membershipArgs = []string{"--suspect-after", "2s", "--dead-after", "5s"}

// changesMembership reports whether kinds include a membership kind.
func changesMembership(kinds []faultKind) bool {
	for _, k := range kinds {
		if slices.Contains(membershipFaultKinds, k) {
			return true
		}
	}
	return false
}

// clusterOptions is the cluster a history under kinds runs on: 3 nodes,
// or membershipNodes with short liveness timeouts when kinds change the
// membership, each with the space guard on.
func clusterOptions(kinds []faultKind) testcluster.Options {
	// A reserve of one byte turns the space guard on (the space fault's
	// Admin.DiskLow is refused while it is off) without the host's real
	// free space ever reaching it.
	opts := testcluster.Options{ExtraArgs: []string{"--enable-fault-injection"}, ReserveDiskBytes: 1}
	if changesMembership(kinds) {
		opts.Nodes = membershipNodes
		opts.ExtraArgs = append(opts.ExtraArgs, membershipArgs...)
	}
	return opts
}

// liveSet records the cluster's node indexes that are gone for good.
// Safe for concurrent use: the nemesis writes it, the RESP clients read it.
type liveSet struct {
	mu   sync.Mutex
	gone map[int]bool
}

func (s *liveSet) markGone(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone == nil {
		s.gone = map[int]bool{}
	}
	s.gone[i] = true
}

// isGone reports whether node i is gone for good (false on a nil set).
func (s *liveSet) isGone(i int) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone[i]
}

// live returns the indexes below n that are not gone, in order.
func (s *liveSet) live(n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		if !s.isGone(i) {
			out = append(out, i)
		}
	}
	return out
}

// feasible turns a membership kind the cluster cannot take now into its
// opposite: a node may go only while more than R are live (R must remain
// for every shard to get its replicas back), and join only below maxLive.
// So a history of one membership kind alternates with its opposite once
// the bound is reached.
func (n *nemesis) feasible(kind faultKind) faultKind {
	live := len(n.members.live(n.c.N()))
	switch {
	case (kind == removeNode || kind == killStayDead) && live <= replication:
		return joinNode
	case kind == joinNode && live >= maxLive:
		return removeNode
	}
	return kind
}

// join starts a new node that joins through node via; the heal waits until
// the scheduler has moved a user shard onto it (a voter, so caught up; the
// meta shard, shard 0, alone does not count).
func (n *nemesis) join(via int) func() {
	j := n.c.AddJoiner([]int{via})
	return func() {
		n.settle(fmt.Sprintf("join of node index %d", j), func(st *concordpb.StatusResponse) error {
			id, err := n.c.NodeID(context.Background(), j)
			if err != nil {
				return err
			}
			if s := stateOf(st, id); s != concordpb.NodeState_NODE_UP {
				return fmt.Errorf("joined node %d is %v", id, s)
			}
			if voters := votersOn(st, id); !slices.ContainsFunc(voters, func(s uint64) bool { return s != 0 }) {
				return fmt.Errorf("joined node %d holds no voter of a user shard yet (voters of %v)", id, voters)
			}
			n.t.Logf("nemesis: joined node %d (index %d) holds voters of shards %v", id, j, votersOn(st, id))
			return nil
		})
		if n.joined != nil {
			n.joined(j)
		}
	}
}

// remove asks the placement service to remove node i (concord node remove),
// which drains it while the workload runs; the heal waits until it is
// REMOVED, no shard lists it, and its process has stopped itself. With
// cutOffRemoved, node i is cut off from every peer first and the cut is
// healed before the wait: the removal then also waits until the node has
// reconciled the tentative writes it took meanwhile.
func (n *nemesis) remove(i int) func() {
	id := n.nodeID(i)
	reconnect := func() {}
	if n.cutOffRemoved {
		reconnect = n.partition(map[int][]int{i: nil})
		n.t.Logf("nemesis: node %d (index %d) cut off from every peer before its removal", id, i)
	}
	exited := n.c.ExpectExit(i)
	n.members.markGone(i)
	asked := n.members.live(n.c.N())[0]
	testcluster.WaitFor(n.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := n.c.ClusterAPI(asked).RemoveNode(ctx, &concordpb.RemoveNodeRequest{NodeId: id})
		return err
	})
	n.t.Logf("nemesis: removing node %d (index %d)", id, i)
	return func() {
		if n.removing != nil {
			n.removing(i)
		}
		reconnect()
		n.settle(fmt.Sprintf("removal of node %d", id), func(st *concordpb.StatusResponse) error {
			if s := stateOf(st, id); s != concordpb.NodeState_NODE_REMOVED {
				return fmt.Errorf("removed node %d is %v", id, s)
			}
			if on := replicasOn(st, id); len(on) > 0 {
				return fmt.Errorf("removed node %d still holds replicas of shards %v: %s", id, on, describeShards(st, on))
			}
			return nil
		})
		exited(30 * time.Second)
	}
}

// killForGood kills node i with SIGKILL and never restarts it; the heal
// waits until the placement service has judged it dead and every shard has
// R voters again, none on it.
func (n *nemesis) killForGood(i int) func() {
	id := n.nodeID(i)
	n.c.Kill(i)
	n.members.markGone(i)
	n.t.Logf("nemesis: node %d (index %d) killed for good", id, i)
	return func() {
		n.settle(fmt.Sprintf("death of node %d", id), func(st *concordpb.StatusResponse) error {
			if s := stateOf(st, id); s != concordpb.NodeState_NODE_DEAD {
				return fmt.Errorf("killed node %d is %v", id, s)
			}
			if on := replicasOn(st, id); len(on) > 0 {
				return fmt.Errorf("dead node %d still holds replicas of shards %v: %s", id, on, describeShards(st, on))
			}
			return fullyReplicated(st)
		})
	}
}

// settle polls the placement leader's status (through a live node) until
// cond holds, and fails the history if it does not within settleTimeout.
func (n *nemesis) settle(what string, cond func(*concordpb.StatusResponse) error) {
	start := time.Now()
	testcluster.WaitFor(n.t, settleTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		live := n.members.live(n.c.N())
		st, err := n.c.ClusterAPI(live[n.rng.IntN(len(live))]).Status(ctx, &concordpb.StatusRequest{})
		if err != nil {
			return err
		}
		if err := cond(st); err != nil {
			return fmt.Errorf("after the %s: %w", what, err)
		}
		return nil
	})
	n.t.Logf("nemesis: placement settled the %s in %v", what, time.Since(start).Round(time.Millisecond))
}

// nodeID is node i's id as it reports itself.
func (n *nemesis) nodeID(i int) uint64 {
	var id uint64
	testcluster.WaitFor(n.t, 30*time.Second, func() error {
		var err error
		id, err = n.c.NodeID(context.Background(), i)
		return err
	})
	return id
}

// stateOf is node id's state in st (REMOVED if st does not list it: a node
// the meta shard has forgotten holds nothing).
func stateOf(st *concordpb.StatusResponse, id uint64) concordpb.NodeState {
	for _, ns := range st.GetNodes() {
		if ns.GetNode().GetNodeId() == id {
			return ns.GetNode().GetState()
		}
	}
	return concordpb.NodeState_NODE_REMOVED
}

// replicasOn returns the shards (meta included) whose descriptors put a
// replica, of any role, on node id.
func replicasOn(st *concordpb.StatusResponse, id uint64) []uint64 {
	var out []uint64
	for _, ss := range st.GetShards() {
		for _, r := range ss.GetShard().GetReplicas() {
			if r.GetNodeId() == id {
				out = append(out, ss.GetShard().GetShardId())
			}
		}
	}
	return out
}

// votersOn returns the shards with a voter on node id.
func votersOn(st *concordpb.StatusResponse, id uint64) []uint64 {
	var out []uint64
	for _, ss := range st.GetShards() {
		for _, r := range ss.GetShard().GetReplicas() {
			if r.GetNodeId() == id && r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER {
				out = append(out, ss.GetShard().GetShardId())
			}
		}
	}
	return out
}

// fullyReplicated reports a shard with fewer than R voters on UP nodes,
// or one the placement service calls under-replicated.
func fullyReplicated(st *concordpb.StatusResponse) error {
	up := map[uint64]bool{}
	for _, ns := range st.GetNodes() {
		up[ns.GetNode().GetNodeId()] = ns.GetNode().GetState() == concordpb.NodeState_NODE_UP
	}
	for _, ss := range st.GetShards() {
		voters := 0
		for _, r := range ss.GetShard().GetReplicas() {
			if up[r.GetNodeId()] && r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER {
				voters++
			}
		}
		if voters < replication || ss.GetUnderReplicated() {
			return fmt.Errorf("shard %d has %d voters on up nodes (under-replicated: %v), want %d",
				ss.GetShard().GetShardId(), voters, ss.GetUnderReplicated(), replication)
		}
	}
	return nil
}

// describeShards says, for a failure message, who the placement service
// thinks leads each of shards and where their replicas are.
func describeShards(st *concordpb.StatusResponse, shards []uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "(status from node %d)", st.GetAnsweredByNodeId())
	for _, ss := range st.GetShards() {
		if !slices.Contains(shards, ss.GetShard().GetShardId()) {
			continue
		}
		fmt.Fprintf(&b, "; s%d epoch %d leader n%d:", ss.GetShard().GetShardId(), ss.GetShard().GetEpoch(), ss.GetLeaderNodeId())
		for _, r := range ss.GetShard().GetReplicas() {
			fmt.Fprintf(&b, " r%d@n%d", r.GetReplicaId(), r.GetNodeId())
			if r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER {
				b.WriteString("(learner)")
			}
		}
	}
	return b.String()
}
