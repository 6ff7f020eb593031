package multiraftest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/replica"
)

// leaseDuration is the hosts' default read lease.
var leaseDuration = multiraft.DefaultConfig(1).LeaseDuration()

func leaseReads(t *testing.T, h *multiraft.Host) uint64 {
	t.Helper()
	i, ok := h.Info(1)
	if !ok {
		t.Fatal("no replica of shard 1")
	}
	return i.LeaseReads
}

// readServed runs one linearizable read of key on node's host and returns
// its result once the loop served it, by lease or by a round that can
// complete (the read's goroutine may still be on its way: await).
func readServed(t *testing.T, c *multiraftest.Cluster, node ids.NodeID, key string) readResult {
	t.Helper()
	h := c.Node(node).Host
	r0, l0 := rounds(t, h), leaseReads(t, h)
	done := readKey(t, h, key)
	c.RunUntil("the read served by lease or a round", 100, func() bool {
		return rounds(t, h) > r0 || leaseReads(t, h) > l0
	})
	return await(t, done, "a read")
}

// TestLeaseReadNeedsNoRound protects the point of leases: once a round was
// answered, reads within the lease are served, with the committed value,
// by no round at all; with LeaseReads off every read takes a round.
func TestLeaseReadNeedsNoRound(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) { cfg.LeaseReads = on }})
		leader := c.WaitLeader(1)
		c.Put("k", "v")
		h := c.Node(leader).Host
		if res := readServed(t, c, leader, "k"); res.err != nil || res.val != "v" {
			t.Fatalf("first read: %+v", res)
		}
		r0, l0 := rounds(t, h), leaseReads(t, h)
		// The commit index moves; the clock does not (no tick: the put is
		// applied by the time the cluster settles).
		call := c.Propose(leader, 1, put("k", "v2"))
		c.RunUntil("v2 applied on the leader", 100, func() bool { v, _ := c.Get(leader, "k"); return v == "v2" })
		if await(t, call.Ended(), "the put"); call.Err != nil {
			t.Fatalf("put: %v", call.Err)
		}
		for range 3 {
			if res := readServed(t, c, leader, "k"); res.err != nil || res.val != "v2" {
				t.Fatalf("lease reads %v: read %+v, want \"v2\"", on, res)
			}
		}
		gotRounds, gotLease := rounds(t, h)-r0, leaseReads(t, h)-l0
		t.Logf("lease reads %v: 3 reads took %d rounds, %d served by lease", on, gotRounds, gotLease)
		if on && (gotRounds != 0 || gotLease != 3) {
			t.Fatalf("3 reads inside the lease took %d rounds (%d by lease), want 0 (3)", gotRounds, gotLease)
		}
		if !on && (gotRounds != 3 || gotLease != 0) {
			t.Fatalf("lease reads off: 3 reads took %d rounds (%d by lease), want 3 (0)", gotRounds, gotLease)
		}
	}
}

// TestLeaseRenewedBeforeItRunsOut protects a loaded leader's lease: a read
// in the second half of the lease is served by lease and also sends a
// round that renews it, so reads keep going without waiting for a round.
func TestLeaseRenewedBeforeItRunsOut(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	readServed(t, c, leader, "k") // a round: the lease starts
	for i := range 10 {
		c.Clock.Advance(leaseDuration * 6 / 10) // past half of what is left
		r0, l0 := rounds(t, h), leaseReads(t, h)
		if res := readServed(t, c, leader, "k"); res.err != nil || res.val != "v" {
			t.Fatalf("read %d: %+v", i, res)
		}
		if leaseReads(t, h)-l0 != 1 || rounds(t, h)-r0 != 1 {
			t.Fatalf("read %d, late in the lease: %d by lease, %d rounds; want 1 and a renewal round", i,
				leaseReads(t, h)-l0, rounds(t, h)-r0)
		}
	}
}

// TestExpiredLeaseNeverServesStale protects lease reads across a partition
// (the in-process form of a SIGSTOPped leader: its timers stand still, the
// clock does not). The old leader holds a lease; it is cut off and only the
// others tick, so the clock passes its lease while they elect a new leader
// and commit a new value. A read queued at the old leader, which still
// believes it leads, must never return the old value: it may only fail
// (or return the new one). The lease-ignores-expiry mutant serves it.
func TestExpiredLeaseNeverServesStale(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	old := c.WaitLeader(1)
	c.Put("k", "old")
	h := c.Node(old).Host
	readServed(t, c, old, "k")
	if res := readServed(t, c, old, "k"); res.err != nil || leaseReads(t, h) == 0 {
		t.Fatalf("the old leader holds no lease (%+v); the test proves nothing", res)
	}
	others := othersOf(c, old)
	c.Cut(old)
	runOnly(t, c, "a new leader", 500, others, func() bool { l := c.Leader(1); return l != 0 && l != old })
	leader := c.Leader(1)
	put := c.Propose(leader, 1, put("k", "new"))
	runOnly(t, c, "the new value applied on the new leader", 500, others, func() bool { v, _ := c.Get(leader, "k"); return v == "new" })
	await(t, put.Ended(), "the put on the new leader")
	if put.Err != nil {
		t.Fatalf("put on the new leader: %v", put.Err)
	}
	if i, _ := h.Info(1); !i.IsLeader {
		t.Fatal("the old leader already stepped down; the test proves nothing")
	}
	r0, l0 := rounds(t, h), leaseReads(t, h) // before the read: off the loop it is counted at once
	stale := readKey(t, h, "k")
	c.RunUntil("the old leader to take the read", 5, func() bool { return rounds(t, h) > r0 || leaseReads(t, h) > l0 })
	c.Heal(old)
	c.RunUntil("the old leader to step down", 500, func() bool { i, ok := h.Info(1); return ok && !i.IsLeader })
	res := await(t, stale, "the read at the deposed leader")
	if res.err == nil && res.val != "new" {
		t.Fatalf("a leader whose lease ran out served %+v after a new leader committed \"new\"", res)
	}
	var nl *replica.NotLeaderError
	if res.err != nil && !errors.As(res.err, &nl) {
		t.Fatalf("read at the deposed leader: %v, want NotLeaderError", res.err)
	}
	t.Logf("read at the deposed leader: err=%v, value %q", res.err, res.val)
}

func othersOf(c *multiraftest.Cluster, node ids.NodeID) []ids.NodeID {
	var out []ids.NodeID
	for _, n := range c.Nodes() {
		if n.ID != node {
			out = append(out, n.ID)
		}
	}
	return out
}

// TestTransferEndsLeaseForTheTerm protects lease reads against leader
// transfer, whose forced campaign voters grant despite their lease: once a
// transfer started, the leader serves no read by lease for the rest of its
// term, even after the transfer is abandoned and a later round is
// answered. The transfer's MsgTimeoutNow is dropped on the wire, so the
// leader keeps leading.
func TestTransferEndsLeaseForTheTerm(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	readServed(t, c, leader, "k")
	l0 := leaseReads(t, h)
	if readServed(t, c, leader, "k"); leaseReads(t, h) == l0 {
		t.Fatal("no lease read before the transfer; the test proves nothing")
	}
	var mu sync.Mutex
	timeoutNows := 0
	c.Net.Intercept(func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool {
		if decode(t, env).GetType() != pb.MsgTimeoutNow {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		timeoutNows++
		return true
	})
	term := func() uint64 { i, _ := h.Info(1); return i.Term }
	t0 := term()
	target := othersOf(c, leader)[0]
	transfer := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) { transfer <- h.TransferLeader(ctx, 1, 0, ids.ReplicaID(target)) })
	c.RunUntil("the transfer's MsgTimeoutNow", 100, func() bool { mu.Lock(); defer mu.Unlock(); return timeoutNows > 0 })
	check := func(when string) {
		t.Helper()
		l, r := leaseReads(t, h), rounds(t, h)
		if res := readServed(t, c, leader, "k"); res.err != nil || res.val != "v" {
			t.Fatalf("read %s: %+v", when, res)
		}
		if leaseReads(t, h) != l || rounds(t, h) != r+1 {
			t.Fatalf("read %s: %d by lease, %d rounds; want none by lease, one round", when, leaseReads(t, h)-l, rounds(t, h)-r)
		}
	}
	check("while the transfer is under way")
	// On the loop's state, then the caller (await), which polls it.
	c.RunUntil("the transfer to be abandoned", 100, func() bool { i, _ := h.Info(1); return i.Transferee == 0 })
	t.Logf("transfer: %v", await(t, transfer, "the abandoned transfer"))
	check("after the transfer was abandoned")
	check("after a round was answered in the same term")
	if i, _ := h.Info(1); !i.IsLeader || i.Term != t0 {
		t.Fatalf("node %d leads=%v in term %d, want the leader of term %d still; the test proves nothing", leader, i.IsLeader, i.Term, t0)
	}
}

// TestLeaderGoneWaitsOutTheLease protects a live leader's lease from
// LeaderGone: followers told the leader's node is gone while they heard
// from it less than a lease ago keep following it; once it has been
// silent a lease long they forget it and elect another, well before an
// election timeout.
func TestLeaderGoneWaitsOutTheLease(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1})
	old := c.WaitLeader(1)
	c.Put("k", "v")
	w := &leaderWatch{t: t, c: c, shard: 1, byTerm: map[uint64]ids.NodeID{}}
	w.check()
	survivors := othersOf(c, old)
	c.Cut(old) // silent from now on, though it still believes it leads
	for _, s := range survivors {
		c.Node(s).Host.LeaderGone(old)
	}
	// Just under a lease of silence, in two steps: one tick, then time alone.
	c.TickOnly(1, survivors...)
	c.Clock.Advance(leaseDuration - 3*multiraft.DefaultConfig(1).TickInterval)
	c.TickOnly(1, survivors...) // the clock is now a tick interval short of the lease
	for _, s := range survivors {
		if i, _ := c.Node(s).Host.Info(1); i.LeaderNode != old {
			t.Fatalf("node %d forgot leader %d heard from less than a lease ago (it follows node %d)", s, old, i.LeaderNode)
		}
	}
	took := 0
	for ; took <= electionTicks; took++ {
		w.check()
		if l := c.Leader(1); l != 0 && l != old {
			break
		}
		c.TickOnly(1, survivors...)
	}
	if l := c.Leader(1); l == 0 || l == old {
		t.Fatalf("no new leader within %d ticks after the lease ran out", electionTicks)
	}
	// Raft alone would have needed an election timeout of ticks in all;
	// two went by before the loop above.
	if took+2 >= electionTicks {
		t.Fatalf("new leader %d ticks after the lease ran out; LeaderGone should elect within a few once it has", took)
	}
	t.Logf("new leader node %d, %d ticks after the old leader's lease ran out", c.Leader(1), took)
}

// TestRestartedVoterDoesNotCampaignInsideALease protects a leader's lease
// from the campaign a shard's preferred replica starts when its host
// starts (multiraft's Start): its own vote counts towards its election, so
// a voter that acknowledged the leader's round just before its process
// restarted must not campaign before the lease it backs has run out, as it
// refuses others' vote requests meanwhile (replica/lease.go).
//
// Leader A (not the preferred replica) holds a lease that the preferred
// replica B's acknowledgement backs; C cannot reach A and, its election
// timeout past, follows no one, so it grants any up-to-date campaign. B
// restarts; its later messages to A are lost, so A keeps believing it
// leads. Had B campaigned at once, B and C would elect B, commit "new",
// and A would serve "old" by lease.
func TestRestartedVoterDoesNotCampaignInsideALease(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1,
		Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	const preferred, a, cNode = ids.NodeID(1), ids.NodeID(2), ids.NodeID(3) // shard 1's replicas start from node 1
	if l := c.WaitLeader(1); l != preferred {
		c.RunUntil("the preferred replica to lead", 500, func() bool { return c.Leader(1) == preferred })
	}
	c.Put("k", "old")
	transfer := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) {
		transfer <- c.Node(preferred).Host.TransferLeader(ctx, 1, 0, ids.ReplicaID(a))
	})
	c.RunUntil("node 2 to lead", 100, func() bool { return c.Leader(1) == a })
	if err := await(t, transfer, "the transfer"); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	c.WaitLeader(1)

	var mu sync.Mutex
	dropBToA := false
	c.Net.Intercept(func(from, to ids.NodeID, _ *concordpb.RaftEnvelope) bool {
		mu.Lock()
		defer mu.Unlock()
		return (from == a && to == cNode) || (from == cNode && to == a) || (dropBToA && from == preferred && to == a)
	})
	c.RunUntil("node 3 to follow no one", 500, func() bool {
		i, ok := c.Node(cNode).Host.Info(1)
		return ok && i.LeaderNode == 0
	})
	h := c.Node(a).Host
	if c.Leader(1) != a {
		t.Fatalf("node %d leads, want node %d still; the test proves nothing", c.Leader(1), a)
	}
	// A fresh lease for A, from a round node 1 answers.
	readServed(t, c, a, "k")
	l0 := leaseReads(t, h)
	if res := readServed(t, c, a, "k"); res.err != nil || res.val != "old" || leaseReads(t, h) == l0 {
		t.Fatalf("node %d holds no lease (%+v); the test proves nothing", a, res)
	}
	i0, _ := h.Info(1)

	mu.Lock()
	dropBToA = true
	mu.Unlock()
	c.Stop(preferred)
	c.Start(preferred)
	c.TickOnly(1) // no host ticks: the messages the restart caused settle, the clock moves a tick
	if l := c.Leader(1); l != a {
		// A new leader inside A's lease: show what it costs.
		call := c.Propose(l, 1, put("k", "new"))
		c.TickOnly(1)
		if await(t, call.Ended(), "the put on the new leader"); call.Err != nil {
			t.Fatalf("node %d elected inside node %d's lease; put: %v", l, a, call.Err)
		}
		stale := readKey(t, h, "k")
		c.TickOnly(1)
		res := await(t, stale, "the read at the old leader")
		t.Fatalf("node %d was elected at once after its restart, inside node %d's lease (term %d); "+
			"after it committed \"new\", node %d's read returned %+v", l, a, i0.Term, a, res)
	}
	if i, _ := h.Info(1); !i.IsLeader || i.Term != i0.Term {
		t.Fatalf("node %d: leads=%v term %d, want the leader of term %d", a, i.IsLeader, i.Term, i0.Term)
	}
}

// TestLeaderGoneAllowsForClockRates protects a live leader's lease from
// LeaderGone when the followers' clocks run faster than the leader's, by
// less than the 10 % the lease duration leaves for clock rates: a
// follower forgets its leader only after the silence the raft lease
// promised, ElectionTicks - 2 tick periods on its own clock, not after
// the shorter lease duration, which a fast clock passes while the leader
// still holds its lease. The followers' clocks here run 9 % fast; the
// leader, cut off, still believes it leads and serves reads by lease.
func TestLeaderGoneAllowsForClockRates(t *testing.T) {
	const origin = int64(time.Hour) // where the harness's clock starts
	var lease, tick time.Duration
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1, Configure: func(cfg *multiraft.Config) {
		cfg.ElectionTicks = 100 // a lease of many ticks: room between the two clocks' views of it
		lease, tick = cfg.LeaseDuration(), cfg.TickInterval
		if cfg.NodeID != 1 {
			slow := cfg.Clock
			cfg.Clock = func() int64 { return origin + (slow()-origin)*109/100 }
		}
	}})
	const old = ids.NodeID(1) // shard 1's preferred replica
	c.RunUntil("node 1 to lead", 500, func() bool { return c.Leader(1) == old })
	if l := c.WaitLeader(1); l != old {
		t.Fatalf("node %d leads, want node %d; the test proves nothing", l, old)
	}
	c.Put("k", "old")
	h := c.Node(old).Host
	start := c.Clock.Now() // the lease's round is issued at or after this
	readServed(t, c, old, "k")
	l0 := leaseReads(t, h)
	if res := readServed(t, c, old, "k"); res.err != nil || res.val != "old" || leaseReads(t, h) == l0 {
		t.Fatalf("node %d holds no lease (%+v); the test proves nothing", old, res)
	}
	survivors := othersOf(c, old)
	c.Cut(old)
	for _, s := range survivors {
		c.Node(s).Host.LeaderGone(old)
	}
	// Just short of the lease on the leader's clock less a few ticks, past
	// it on the followers' (9 % fast); then tick the survivors through what
	// is left of the lease.
	c.Clock.Advance(lease*100/109 - 2*tick)
	for time.Duration(c.Clock.Now()-start) < lease-2*tick {
		c.TickOnly(1, survivors...)
		l := c.Leader(1)
		if l == 0 || l == old {
			continue
		}
		call := c.Propose(l, 1, put("k", "new"))
		c.RunUntil("the put on the new leader", 1, call.Done)
		stale := readKey(t, h, "k")
		res := await(t, stale, "the read at the old leader")
		t.Fatalf("node %d elected %v after the old leader's round, inside its lease of %v; after it committed "+
			"\"new\" (err %v), node %d's read returned %+v", l, time.Duration(c.Clock.Now()-start), lease, call.Err, old, res)
	}
	// LeaderGone still elects once the promise is over, well before raft's
	// own timeout of 100 ticks.
	for range 20 {
		if l := c.Leader(1); l != 0 && l != old {
			return
		}
		c.TickOnly(1, survivors...)
	}
	t.Fatalf("no new leader within 20 ticks after node %d's lease ran out", old)
}
