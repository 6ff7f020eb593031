package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// faultKind names one way the nemesis breaks the cluster.
type faultKind string

const (
	killLeader   faultKind = "kill-leader"    // kill -9 a shard's leader, restart it
	killFollower faultKind = "kill-follower"  // kill -9 a node that does not lead the shard
	cleanDie     faultKind = "clean-die"      // Admin.Die(clean), restart
	restart      faultKind = "restart"        // SIGTERM, restart at once
	minority     faultKind = "minority"       // cut a follower off from the other two
	leaderCutOff faultKind = "leader-cut-off" // cut the majority off from a shard's leader
	bridge       faultKind = "bridge"         // two nodes cannot see each other; the third sees both
	isolate      faultKind = "isolate"        // cut a random node off from every peer
	wipe         faultKind = "wipe"           // kill -9, delete its data dir, restart empty
	pause        faultKind = "pause"          // SIGSTOP for a few seconds, then SIGCONT
	crashAll     faultKind = "crash-all"      // kill -9 every node at once, restart them all
	pauseLeader  faultKind = "pause-leader"   // SIGSTOP a shard's leader: it resumes believing it leads
	space        faultKind = "space"          // a random node's disk reads as full (Admin.DiskLow): the space alarm
	// The membership kinds (membership.go) change the cluster for good.
	joinNode      faultKind = "join"               // a new node joins (server --join); replicas move onto it
	removeNode    faultKind = "remove"             // concord node remove of a live node, drained under load
	killStayDead  faultKind = "kill-and-stay-dead" // kill -9 a node for good; its replicas are re-created elsewhere
	allFaultKinds           = "all"
	classicKinds            = "classic" // every kind but the membership ones
)

// classicFaultKinds keep the cluster's membership: a history of only these
// runs on 3 nodes. space is one of them: it stops no node and cuts no link,
// it only refuses the writes that add data for its hold, so a mixed history
// still answers every form of operation between its space faults (one
// fault in thirteen), and mixing it in checks refusals next to leader
// changes and restarts, as a real disk fills during them.
var classicFaultKinds = []faultKind{killLeader, killFollower, cleanDie, restart, minority, leaderCutOff, bridge, isolate, wipe, pause, crashAll, pauseLeader, space}

// membershipFaultKinds add or take away nodes: a history with any of them
// runs on membershipNodes nodes with short liveness timeouts.
var membershipFaultKinds = []faultKind{joinNode, removeNode, killStayDead}

var faultKinds = append(slices.Clone(classicFaultKinds), membershipFaultKinds...)

// nemesis injects faults, one at a time, on a schedule drawn from its seed.
type nemesis struct {
	t     testing.TB
	c     *testcluster.Cluster
	rng   *rand.Rand
	kinds []faultKind
	// injected counts faults per kind; held, those held for their whole
	// hold time (not cut short by the end of the run).
	injected, held map[faultKind]int
	// members says which nodes are gone for good (killed to stay dead, or
	// removed); no fault touches them, and the RESP clients skip them.
	members *liveSet
	// The fields below are for TestAvailableNoLostWrites; the other
	// histories leave them unset.
	//
	// opening are kinds injected first, in order, before any drawn one
	// (each still made feasible).
	opening []faultKind
	// cutOffRemoved makes a remove cut its node off from every peer
	// before it asks for the removal and heal that cut before it waits
	// for the removal: the node goes on taking writes it cannot commit
	// (available mode holds them) without knowing it is leaving.
	cutOffRemoved bool
	// joined is told of each joined node once its join has settled;
	// removing of each node being removed, just before the nemesis waits
	// for its removal (after the cut-off, before its heal). nil: nothing.
	joined, removing func(i int)
}

// run injects faults until ctx ends: wait, break, hold, heal, wait healthy.
func (n *nemesis) run(ctx context.Context) {
	for {
		if !sleepCtx(ctx, time.Duration(1000+n.rng.IntN(2000))*time.Millisecond) {
			return
		}
		kind := n.kinds[n.rng.IntN(len(n.kinds))]
		if len(n.opening) > 0 {
			kind, n.opening = n.opening[0], n.opening[1:]
		}
		kind = n.feasible(kind)
		hold := time.Duration(2000+n.rng.IntN(3000)) * time.Millisecond
		n.t.Logf("nemesis: %s for %v", kind, hold)
		heal := n.inject(kind)
		n.injected[kind]++
		if sleepCtx(ctx, hold) { // hold, but cut short at the end of the run
			n.held[kind]++
		}
		heal()
		n.waitHealthy(60 * time.Second)
	}
}

// inject breaks the cluster and returns the function that heals it.
func (n *nemesis) inject(kind faultKind) (heal func()) {
	// Nodes are drawn from the live ones (all of them until a membership
	// fault takes one away, and then the same draws as before).
	live := n.members.live(n.c.N())
	shard := uint64(1 + n.rng.IntN(testcluster.DefaultShards))
	leader := n.c.LeaderOf(n.t, shard, 30*time.Second)
	other := live[(max(slices.Index(live, leader), 0)+1+n.rng.IntN(len(live)-1))%len(live)]
	rnd := live[n.rng.IntN(len(live))]
	switch kind {
	case killLeader:
		return n.killAndRestart(leader)
	case killFollower:
		return n.killAndRestart(other)
	case cleanDie:
		exited := n.c.ExpectExit(rnd)
		n.admin(rnd, func(ctx context.Context, a concordpb.AdminClient) error {
			_, err := a.Die(ctx, &concordpb.DieRequest{Clean: true})
			return err
		})
		exited(20 * time.Second)
		return func() { n.c.Start(rnd) }
	case restart:
		n.c.Stop(rnd)
		n.c.Start(rnd)
		return func() {}
	case minority:
		return n.partition(map[int][]int{other: nil})
	case leaderCutOff:
		return n.partition(map[int][]int{leader: nil})
	case bridge:
		p := slices.Index(live, rnd)
		a, b := live[(p+1)%len(live)], live[(p+2)%len(live)]
		return n.partition(map[int][]int{a: {rnd}, b: {rnd}})
	case isolate:
		return n.partition(map[int][]int{rnd: nil})
	case wipe:
		n.c.Kill(rnd)
		n.c.Wipe(rnd)
		n.c.Start(rnd)
		return func() {}
	case pause:
		n.c.Pause(rnd)
		return func() { n.c.Resume(rnd) }
	case pauseLeader:
		n.c.Pause(leader)
		return func() { n.c.Resume(leader) }
	case space:
		return n.diskLow(rnd)
	case crashAll:
		n.c.KillAll()
		return func() {
			for _, i := range live {
				n.c.Start(i)
			}
		}
	case joinNode:
		return n.join(rnd)
	case removeNode:
		return n.remove(rnd)
	case killStayDead:
		return n.killForGood(rnd)
	}
	panic(fmt.Sprintf("unknown fault kind %q", kind))
}

func (n *nemesis) killAndRestart(i int) func() {
	n.c.Kill(i)
	return func() { n.c.Start(i) }
}

// diskLow makes node i read its disk as full (0 free bytes) until healed:
// within a second it is low on space, and by heartbeat every node refuses
// the client writes that add data (the space alarm), as on a full disk.
func (n *nemesis) diskLow(i int) func() {
	set := func(low bool) {
		n.admin(i, func(ctx context.Context, a concordpb.AdminClient) error {
			_, err := a.DiskLow(ctx, &concordpb.DiskLowRequest{Low: low})
			return err
		})
	}
	set(true)
	return func() { set(false) }
}

// partition cuts each listed node off from every peer but the ones given.
func (n *nemesis) partition(reach map[int][]int) func() {
	for i, peers := range reach {
		var addrs []string
		for _, p := range peers {
			addrs = append(addrs, n.c.Addr(p))
		}
		n.admin(i, func(ctx context.Context, a concordpb.AdminClient) error {
			_, err := a.Partition(ctx, &concordpb.PartitionRequest{Reachable: addrs})
			return err
		})
	}
	return func() {
		for i := range reach {
			n.admin(i, func(ctx context.Context, a concordpb.AdminClient) error {
				_, err := a.Heal(ctx, &concordpb.HealRequest{})
				return err
			})
		}
	}
}

func (n *nemesis) admin(i int, f func(context.Context, concordpb.AdminClient) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx, concordpb.NewAdminClient(n.c.Conn(i))); err != nil {
		// The harness failed, not the system: no mutant is caught by it
		// (a fault the node refused once passed for a catch).
		failure.why, failure.unchecked = fmt.Sprintf("nemesis: admin call to node %d: %v", i, err), true
		n.t.Fatalf("nemesis: admin call to node %d: %v", i, err)
	}
}

// failure is why the last history failed, for the mutant report, and
// whether it failed only for being unchecked (an inconclusive check, no
// fault, nothing to check, a fault the harness could not inject), which
// catches no mutant.
var failure struct {
	why       string
	unchecked bool
}

// waitHealthy waits until every shard has a leader and every replica is on
// a live node, so the next fault never stacks on an unrepaired one.
func (n *nemesis) waitHealthy(timeout time.Duration) {
	n.c.WaitReady(n.t, timeout)
	testcluster.WaitFor(n.t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		live := n.members.live(n.c.N())
		st, err := concordpb.NewClusterClient(n.c.Conn(live[n.rng.IntN(len(live))])).Status(ctx, &concordpb.StatusRequest{})
		if err != nil {
			return err
		}
		return healthy(st)
	})
}

// healthy reports why a status is not healthy: a shard without a leader, or
// a replica on a node that is not UP.
func healthy(st *concordpb.StatusResponse) error {
	up := map[uint64]bool{}
	for _, ns := range st.GetNodes() {
		up[ns.GetNode().GetNodeId()] = ns.GetNode().GetState() == concordpb.NodeState_NODE_UP &&
			ns.GetLastHeartbeatAgeSeconds() >= 0 && ns.GetLastHeartbeatAgeSeconds() < 3
	}
	for _, ss := range st.GetShards() {
		if ss.GetLeaderNodeId() == 0 {
			return fmt.Errorf("shard %d has no leader", ss.GetShard().GetShardId())
		}
		for _, r := range ss.GetShard().GetReplicas() {
			if !up[r.GetNodeId()] {
				return fmt.Errorf("shard %d has a replica on node %d, which is not up", ss.GetShard().GetShardId(), r.GetNodeId())
			}
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
