package multiraftest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// run calls f, a membership call on h (shard 1's leader), in the
// background and returns its result. It begins f with multiraftest.Begin,
// ticks until h's loop shows the call's effect on shard 1 (a new epoch, a
// new leader, the replica gone) or f returned, and only then waits for f's
// goroutine, which needs no tick after that: a change's caller reads the
// applied descriptor in one loop turn, a transfer's polls the published
// leader, and a refusal has returned within Begin. Ticking until f itself
// returned failed now and then under load: ticks synchronise with the
// loops only, and Go's scheduler could keep f's goroutine off the CPU for
// all 500 ticks.
func run(t *testing.T, c *multiraftest.Cluster, h *multiraft.Host, what string, f func(context.Context, *multiraft.Host) (*concordpb.ShardDescriptor, error)) (*concordpb.ShardDescriptor, error) {
	t.Helper()
	type result struct {
		d   *concordpb.ShardDescriptor
		err error
	}
	before := viewOf(h)
	done := make(chan result, 1)
	ended := multiraftest.Begin(func(ctx context.Context) { d, err := f(ctx, h); done <- result{d, err} })
	c.RunUntil(what, 500, func() bool { return viewOf(h) != before || isClosed(ended) })
	r := await(t, done, what)
	return r.d, r.err
}

// shardView is what h's loop publishes of shard 1 that a membership call
// changes: the descriptor's epoch, the leader, the replica itself.
type shardView struct {
	present bool
	epoch   uint64
	leader  ids.ReplicaID
}

func viewOf(h *multiraft.Host) shardView {
	i, ok := h.Info(1)
	return shardView{present: ok, epoch: i.Desc.GetEpoch(), leader: i.LeaderReplica}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// descOf returns node's descriptor of shard 1.
func descOf(c *multiraftest.Cluster, node ids.NodeID) *concordpb.ShardDescriptor {
	i, _ := c.Node(node).Host.Info(1)
	return i.Desc
}

// roleOf returns replica id's role in d, and whether d lists it.
func roleOf(d *concordpb.ShardDescriptor, id ids.ReplicaID) (concordpb.ReplicaRole, bool) {
	for _, rd := range d.GetReplicas() {
		if ids.ReplicaID(rd.GetReplicaId()) == id {
			return rd.GetRole(), true
		}
	}
	return 0, false
}

// putAll writes prefix0..prefix(n-1) and returns the keys.
func putAll(c *multiraftest.Cluster, prefix string, n int) []string {
	var keys []string
	for i := range n {
		k := fmt.Sprintf("%s%d", prefix, i)
		c.Put(k, "v")
		keys = append(keys, k)
	}
	return keys
}

func waitAll(c *multiraftest.Cluster, keys []string, nodes ...ids.NodeID) {
	for _, k := range keys {
		c.WaitValue(k, "v", nodes...)
	}
}

func others(leader ids.NodeID, n int) []ids.NodeID {
	var out []ids.NodeID
	for id := ids.NodeID(1); id <= ids.NodeID(n); id++ {
		if id != leader {
			out = append(out, id)
		}
	}
	return out
}

// TestAddLearner protects learners: a learner added while writes flow
// catches up by the log (every write before, during and after reaches it),
// every member's descriptor lists it as LEARNER under a new epoch, and it
// does not count for quorum: cut off together with one voter, the other two
// voters still commit (a fourth voter would need three); with two of the
// three voters cut off, the remaining voter and the learner cannot commit.
func TestAddLearner(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	before := putAll(c, "before", 5)
	n4 := c.AddNode()
	epoch := descOf(c, leader).GetEpoch()
	d, err := run(t, c, c.Node(leader).Host, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, epoch, n4)
	})
	if err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	learner := ids.ReplicaID(4) // the shard's next replica id
	if role, ok := roleOf(d, learner); !ok || role != concordpb.ReplicaRole_REPLICA_LEARNER || d.GetEpoch() != epoch+1 {
		t.Fatalf("descriptor %v, want learner 4 at epoch %d", d, epoch+1)
	}
	after := putAll(c, "after", 5)
	waitAll(c, append(before, after...), n4)
	c.RunUntil("every member to list the learner", 300, func() bool {
		for _, n := range []ids.NodeID{1, 2, 3, n4} {
			if role, ok := roleOf(descOf(c, n), learner); !ok || role != concordpb.ReplicaRole_REPLICA_LEARNER {
				return false
			}
		}
		return true
	})
	if i, _ := c.Node(n4).Host.Info(1); i.Applied < descOf(c, leader).GetEpoch() || i.IsLeader {
		t.Fatalf("learner's info %+v", i)
	}

	// Cut off with one voter, the learner costs nothing: two of three
	// voters commit (two of four would not).
	leader = c.WaitLeader(1)
	voter := others(leader, 3)[0]
	c.Cut(n4)
	c.Cut(voter)
	c.Put("learner-cut", "v")
	c.Heal(n4)
	c.Heal(voter)
	c.WaitValue("learner-cut", "v", n4, voter)

	// Two voters cut off: the third voter and the learner are no quorum.
	leader = c.WaitLeader(1)
	cut := others(leader, 3)
	for _, n := range cut {
		c.Cut(n)
	}
	call := c.Propose(leader, 1, multiraftest.PutOp("stuck", "v"))
	c.Tick(100) // ten election timeouts
	if call.Done() && call.Err == nil {
		t.Fatal("a write committed with two of three voters cut off: the learner counted")
	}
	for _, n := range cut {
		c.Heal(n)
	}
	c.Put("healed", "v")
	c.WaitValue("healed", "v", 1, 2, 3, n4)
}

// TestAddLearnerBySnapshot protects a learner's catch-up by snapshot: added
// after the leader truncated its log, it receives a streamed snapshot and
// then the log, and holds every write.
func TestAddLearnerBySnapshot(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	before := putAll(c, "k", 20)
	c.RunUntil("the leader to truncate its log", 100, func() bool { return truncated(t, c, leader) > 15 })
	n4 := c.AddNode()
	snaps := 0
	c.Net.OnSnapshotStream(func(_, to ids.NodeID, _ ids.ShardID) {
		if to == n4 {
			snaps++
		}
	})
	if _, err := run(t, c, c.Node(leader).Host, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, 0, n4)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.Put("after", "v")
	waitAll(c, append(before, "after"), n4)
	if snaps == 0 {
		t.Fatal("the learner caught up without a snapshot")
	}
}

// TestPromoteLearner protects promotion: the learner becomes a VOTER in
// every descriptor, and then counts for quorum: with four voters one cut
// off, the three left (the promoted one among them) commit, which two
// original voters alone could not (three of four needed).
func TestPromoteLearner(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	n4 := c.AddNode()
	if _, err := run(t, c, c.Node(leader).Host, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, 0, n4)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.Put("caught-up", "v")
	c.WaitValue("caught-up", "v", n4)
	d, err := run(t, c, c.Node(leader).Host, "the promotion", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.PromoteLearner(ctx, 1, 0, 4)
	})
	if err != nil {
		t.Fatalf("PromoteLearner: %v", err)
	}
	if role, ok := roleOf(d, 4); !ok || role != concordpb.ReplicaRole_REPLICA_VOTER {
		t.Fatalf("descriptor %v, want replica 4 a voter", d)
	}
	c.RunUntil("the promoted replica to see itself a voter", 300, func() bool {
		role, ok := roleOf(descOf(c, n4), 4)
		return ok && role == concordpb.ReplicaRole_REPLICA_VOTER
	})
	cut := others(leader, 3)[0]
	c.Cut(cut)
	c.Put("three-of-four", "v")
	c.WaitValue("three-of-four", "v", n4)
	// Now the promoted replica alone out too: two of four cannot commit.
	c.Cut(n4)
	leader = c.Leader(1)
	call := c.Propose(leader, 1, multiraftest.PutOp("stuck", "v"))
	c.Tick(100)
	if call.Done() && call.Err == nil {
		t.Fatal("two of four voters committed a write")
	}
	c.Heal(cut)
	c.Heal(n4)
	c.Put("healed", "v")
}

// laggingLearner makes a cluster whose shard 1 has a learner (replica 4,
// on node n4) added and then cut off behind the writes missed.
func laggingLearner(t *testing.T) (c *multiraftest.Cluster, leader, n4 ids.NodeID, missed []string) {
	t.Helper()
	c = multiraftest.New(t, multiraftest.Options{})
	leader = c.WaitLeader(1)
	n4 = c.AddNode()
	if _, err := run(t, c, c.Node(leader).Host, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, 0, n4)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.Cut(n4)
	return c, leader, n4, putAll(c, "missed-", 5)
}

// TestPromoteCancelledWhileQueued protects PromoteLearner's promise that a
// promotion whose context ends first proposes nothing and reports
// ErrNotCaughtUp, also when the context ends while its turn waits for the
// loop. The learner here has caught up, so a check that ran in that turn
// regardless would promote it: the test fails if the turn proposes. (The
// caller still waits for the turn, rather than return the bare context
// error while the turn might yet propose, which made
// TestPromoteWaitsForCatchUp flaky under load.)
func TestPromoteCancelledWhileQueued(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	n4 := c.AddNode()
	if _, err := run(t, c, c.Node(leader).Host, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, 0, n4)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.Put("caught-up", "v")
	c.WaitValue("caught-up", "v", n4)
	h := c.Node(leader).Host
	hold, held := make(chan struct{}), make(chan struct{})
	go func() { _ = h.Do(context.Background(), func() { close(held); <-hold }) }()
	<-held // the loop is busy: the promotion's turn queues behind this one
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // ended before the turn runs: the turn must see that
	done := make(chan error, 1)
	go func() { _, err := h.PromoteLearner(ctx, 1, 0, 4); done <- err }()
	close(hold)
	// Its turn needs no tick: wait for the goroutine, which a tick budget
	// could outrun.
	if err := await(t, done, "the cancelled promotion"); !errors.Is(err, multiraft.ErrNotCaughtUp) {
		t.Fatalf("promotion cancelled while its turn was queued: %v, want ErrNotCaughtUp", err)
	}
	// A proposal made in that turn would commit within these ticks.
	c.Tick(20)
	for _, n := range []ids.NodeID{leader, n4} {
		if role, _ := roleOf(descOf(c, n), 4); role != concordpb.ReplicaRole_REPLICA_LEARNER {
			t.Fatalf("a promotion cancelled while queued made replica 4 a %v on node %d", role, n)
		}
	}
}

// TestPromoteWaitsForCatchUp protects the promotion's catch-up check: the
// leader promotes a learner only once its own raft progress shows that the
// learner persisted everything committed when the promotion was asked for.
// A learner cut off behind writes is not promoted while it lags (the call
// waits, and when its context ends returns ErrNotCaughtUp with the
// descriptor unchanged); once healed, the same call, made without waiting
// for the learner first, promotes it, and it holds the writes it missed.
func TestPromoteWaitsForCatchUp(t *testing.T) {
	c, leader, n4, missed := laggingLearner(t)
	h := c.Node(leader).Host
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// Begun: the 50 ticks start once the promotion has checked the learner
	// once and waits to look again.
	multiraftest.BeginWith(ctx, func(ctx context.Context) { _, err := h.PromoteLearner(ctx, 1, 0, 4); done <- err })
	c.Tick(50)
	if len(done) > 0 {
		t.Fatalf("a learner cut off behind writes was promoted (or refused) at once: %v", <-done)
	}
	cancel()
	// The cancelled promotion needs no tick to end: wait for its goroutine,
	// which ticking until it ended could outrun (100 ticks ran out ~1 in 50
	// runs under load).
	if err := await(t, done, "the cancelled promotion"); !errors.Is(err, multiraft.ErrNotCaughtUp) {
		t.Fatalf("promotion of a lagging learner: %v, want ErrNotCaughtUp", err)
	}
	if role, _ := roleOf(descOf(c, leader), 4); role != concordpb.ReplicaRole_REPLICA_LEARNER {
		t.Fatalf("a refused promotion changed replica 4 to %v", role)
	}
	c.Heal(n4)
	d, err := run(t, c, h, "the promotion", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.PromoteLearner(ctx, 1, 0, 4)
	})
	if err != nil {
		t.Fatalf("PromoteLearner after healing: %v", err)
	}
	if role, _ := roleOf(d, 4); role != concordpb.ReplicaRole_REPLICA_VOTER {
		t.Fatalf("descriptor %v, want replica 4 a voter", d)
	}
	for _, k := range missed {
		if v, ok := c.Get(n4, k); !ok || v != "v" {
			t.Fatalf("promoted learner lacks %q (got %q, %t)", k, v, ok)
		}
	}
}

// TestRemoveReplica protects removal under load: removing a follower while
// writes flow completes, writes keep committing on the three left, the
// removed node destroys its replica, and the leader cannot remove itself.
func TestRemoveReplica(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 4})
	leader := c.WaitLeader(1)
	if _, err := run(t, c, c.Node(leader).Host, "the leader's self-removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(leader), 0)
	}); !errors.Is(err, multiraft.ErrRefused) {
		t.Fatalf("removing the leader itself: %v, want ErrRefused", err)
	}
	removed := others(leader, 4)[0]
	h := c.Node(leader).Host
	epoch := descOf(c, leader).GetEpoch()
	done := make(chan error, 1)
	ended := multiraftest.Begin(func(ctx context.Context) {
		_, err := h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(removed), 0)
		done <- err
	})
	during := putAll(c, "during", 5)
	// On the leader's state (the removal applied), then the caller.
	c.RunUntil("the removal", 500, func() bool { return descOf(c, leader).GetEpoch() > epoch || isClosed(ended) })
	if err := await(t, done, "the removal"); err != nil {
		t.Fatalf("RemoveReplica: %v", err)
	}
	after := putAll(c, "after", 5)
	var members []ids.NodeID
	for _, n := range []ids.NodeID{1, 2, 3, 4} {
		if n != removed {
			members = append(members, n)
		}
	}
	waitAll(c, append(during, after...), members...)
	c.RunUntil("the removed replica to be destroyed", 300, func() bool {
		_, ok := c.Node(removed).Host.Info(1)
		return !ok
	})
	if _, found := c.Get(removed, "after0"); found {
		t.Fatal("the removed replica's data survived")
	}
	if _, found := c.Get(removed, "during0"); found {
		t.Fatal("the removed replica's data survived")
	}
}

// TestReplaceDeadReplicaSafely protects the safe replacement sequence with
// one voter dead throughout: add a learner on a new node, promote it once
// caught up, then remove the dead voter. The shard commits at every stage
// (never below a quorum of live voters) and every acknowledged write is on
// the three live voters at the end.
func TestReplaceDeadReplicaSafely(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	dead := others(leader, 3)[0]
	c.Stop(dead)
	acked := putAll(c, "dead-", 3)
	n4 := c.AddNode()
	steps := []struct {
		name string
		f    func(h *multiraft.Host, ctx context.Context, epoch uint64) (*concordpb.ShardDescriptor, error)
	}{
		{"add learner", func(h *multiraft.Host, ctx context.Context, e uint64) (*concordpb.ShardDescriptor, error) {
			return h.AddLearner(ctx, 1, e, n4)
		}},
		{"promote", func(h *multiraft.Host, ctx context.Context, e uint64) (*concordpb.ShardDescriptor, error) {
			return h.PromoteLearner(ctx, 1, e, 4)
		}},
		{"remove dead", func(h *multiraft.Host, ctx context.Context, e uint64) (*concordpb.ShardDescriptor, error) {
			return h.RemoveReplica(ctx, 1, e, ids.ReplicaID(dead), 0)
		}},
	}
	for i, s := range steps {
		leader = c.WaitLeader(1)
		h, epoch := c.Node(leader).Host, descOf(c, leader).GetEpoch()
		if _, err := run(t, c, h, s.name, func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
			return s.f(h, ctx, epoch)
		}); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		acked = append(acked, putAll(c, fmt.Sprintf("step%d-", i), 3)...)
		if i == 0 {
			waitAll(c, acked, n4) // caught up before the promotion
		}
	}
	live := append(others(dead, 3), n4)
	waitAll(c, acked, live...)
	d := descOf(c, c.WaitLeader(1))
	if _, ok := roleOf(d, ids.ReplicaID(dead)); ok || len(d.GetReplicas()) != 3 {
		t.Fatalf("descriptor %v, want three voters without replica %d", d, dead)
	}
}

// TestTransferLeader protects leader transfer: leadership moves to the
// named voter, a learner is refused as target, and a stale epoch refuses
// every change with ErrStaleEpoch and changes nothing.
func TestTransferLeader(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	leader := c.WaitLeader(1)
	target := others(leader, 3)[1]
	if _, err := run(t, c, c.Node(leader).Host, "the transfer", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return nil, h.TransferLeader(ctx, 1, 0, ids.ReplicaID(target))
	}); err != nil {
		t.Fatalf("TransferLeader: %v", err)
	}
	if got := c.WaitLeader(1); got != target {
		t.Fatalf("leader is node %d, want %d", got, target)
	}
	c.Put("after-transfer", "v")
	c.Tick(100)
	if got := c.Leader(1); got != target {
		t.Fatalf("leadership went back to node %d", got)
	}

	h := c.Node(target).Host
	stale := descOf(c, target).GetEpoch()
	n4 := c.AddNode()
	if _, err := run(t, c, h, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, stale, n4)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	if _, err := run(t, c, h, "a learner as target", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return nil, h.TransferLeader(ctx, 1, 0, 4)
	}); !errors.Is(err, multiraft.ErrRefused) {
		t.Fatalf("TransferLeader to a learner: %v, want ErrRefused", err)
	}
	if _, err := run(t, c, h, "a stale promotion", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.PromoteLearner(ctx, 1, stale, 4)
	}); !errors.Is(err, multiraft.ErrStaleEpoch) {
		t.Fatalf("PromoteLearner at a stale epoch: %v, want ErrStaleEpoch", err)
	}
	if _, err := run(t, c, h, "a stale removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.RemoveReplica(ctx, 1, stale, ids.ReplicaID(leader), 0)
	}); !errors.Is(err, multiraft.ErrStaleEpoch) {
		t.Fatalf("RemoveReplica at a stale epoch: %v, want ErrStaleEpoch", err)
	}
	if _, err := run(t, c, h, "a stale transfer", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return nil, h.TransferLeader(ctx, 1, stale, ids.ReplicaID(leader))
	}); !errors.Is(err, multiraft.ErrStaleEpoch) {
		t.Fatalf("TransferLeader at a stale epoch: %v, want ErrStaleEpoch", err)
	}
	if d := descOf(c, target); len(d.GetReplicas()) != 4 || d.GetEpoch() != stale+1 || c.Leader(1) != target {
		t.Fatalf("refused requests changed something: descriptor %v, leader %d", d, c.Leader(1))
	}
}

// TestLeaderKnownHook protects the hook that makes a node report at once
// after an election or a transfer (Config.OnLeaderKnown): once a shard has
// a leader every node has been told of it, and a leadership transfer
// tells every node again, the new leader and the followers alike; a turn
// that changes no leader tells nobody.
func TestLeaderKnownHook(t *testing.T) {
	var told [4]atomic.Int64 // per node id, calls for shard 1
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		node := cfg.NodeID
		cfg.NoLeaderPreference = true
		cfg.OnLeaderKnown = func(shard ids.ShardID) {
			if shard == 1 {
				told[node].Add(1)
			}
		}
	}})
	leader := c.WaitLeader(1)
	c.RunUntil("every node told of shard 1's leader", 100, func() bool {
		return told[1].Load() > 0 && told[2].Load() > 0 && told[3].Load() > 0
	})
	c.Put("quiet", "v")
	c.Tick(20)
	var before [4]int64
	for n := 1; n <= 3; n++ {
		before[n] = told[n].Load()
	}
	c.Put("still-quiet", "v")
	c.Tick(20)
	for n := 1; n <= 3; n++ {
		if got := told[n].Load(); got != before[n] {
			t.Fatalf("node %d told of a leader %d more times while the leader stayed", n, got-before[n])
		}
	}
	target := others(leader, 3)[0]
	if _, err := run(t, c, c.Node(leader).Host, "the transfer", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return nil, h.TransferLeader(ctx, 1, 0, ids.ReplicaID(target))
	}); err != nil {
		t.Fatalf("TransferLeader: %v", err)
	}
	c.RunUntil("every node told of the new leader", 100, func() bool {
		for n := 1; n <= 3; n++ {
			if told[n].Load() == before[n] {
				return false
			}
		}
		return true
	})
}

// TestCollectStray protects garbage collection of replicas removed behind
// their node's back: a follower cut off while the shard removes it never
// hears of the removal (a leader contacts only members) and keeps its
// replica while placement's view is unknown or not newer than its own;
// once the view is the newer descriptor that does not list it, the node
// destroys the replica, data and all.
func TestCollectStray(t *testing.T) {
	var view atomic.Pointer[concordpb.ShardDescriptor]
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.Placement = func(ids.ShardID) (*concordpb.ShardDescriptor, bool) {
			d := view.Load()
			return d, d != nil
		}
	}})
	leader := c.WaitLeader(1)
	c.Put("before", "v")
	victim := others(leader, 3)[0]
	c.WaitValue("before", "v", victim)
	old := descOf(c, victim)
	c.Cut(victim)
	// Past the victim's election timeout, as a slow removal took under
	// load: cut off, it drops its leader and never learns another.
	c.Tick(30)
	d, err := run(t, c, c.Node(leader).Host, "the removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(victim), 0)
	})
	if err != nil {
		t.Fatalf("RemoveReplica: %v", err)
	}
	c.Heal(victim)
	c.Put("after", "v")

	view.Store(old) // placement's view is no newer than the replica's own
	c.Tick(250)     // past two stray checks (10 s at 100 ms ticks)
	if _, ok := c.Node(victim).Host.Info(1); !ok {
		t.Fatal("the replica was destroyed on a view no newer than its own")
	}
	if _, found := c.Get(victim, "before"); !found {
		t.Fatal("the replica's data went while it was kept")
	}

	view.Store(d)
	c.RunUntil("the stray replica to be destroyed", 300, func() bool {
		_, ok := c.Node(victim).Host.Info(1)
		return !ok
	})
	if _, found := c.Get(victim, "before"); found {
		t.Fatal("the stray replica's data survived")
	}
	tomb, err := c.Node(victim).Engine.Tombstone(1)
	if err != nil || tomb < ids.ReplicaID(victim) {
		t.Fatalf("tombstone %d (%v), want at least %d", tomb, err, victim)
	}
	c.Put("later", "v")
	if _, ok := c.Node(victim).Host.Info(1); ok {
		t.Fatal("the destroyed replica came back")
	}
}

// TestOneChangeAtATime protects against a second membership change raft
// would silently drop: while one change cannot commit (the followers are
// cut off), another is refused at once with ErrChangePending, and the
// first completes after healing.
func TestOneChangeAtATime(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 4, Replicas: 3})
	leader := c.WaitLeader(1)
	var spare ids.NodeID
	for _, n := range []ids.NodeID{1, 2, 3, 4} {
		if _, ok := roleOf(descOf(c, leader), ids.ReplicaID(n)); !ok {
			spare = n
		}
	}
	followers := []ids.NodeID{}
	for _, r := range descOf(c, leader).GetReplicas() {
		if n := ids.NodeID(r.GetNodeId()); n != leader {
			followers = append(followers, n)
		}
	}
	for _, n := range followers {
		c.Cut(n)
	}
	h := c.Node(leader).Host
	epoch := descOf(c, leader).GetEpoch()
	first, second := make(chan error, 1), make(chan error, 1)
	// Begin returns once the addition is proposed (it waits for its
	// outcome), so the removal comes second, and is refused within Begin.
	firstEnded := multiraftest.Begin(func(ctx context.Context) { _, err := h.AddLearner(ctx, 1, 0, spare); first <- err })
	multiraftest.Begin(func(ctx context.Context) {
		_, err := h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(followers[0]), 0)
		second <- err
	})
	if err := await(t, second, "the second change"); !errors.Is(err, multiraft.ErrChangePending) {
		t.Fatalf("the second change: %v, want ErrChangePending", err)
	}
	for _, n := range followers {
		c.Heal(n)
	}
	// On the leader's state (the addition applied), then the caller.
	c.RunUntil("the first change", 500, func() bool { return descOf(c, leader).GetEpoch() > epoch || isClosed(firstEnded) })
	if err := await(t, first, "the first change"); err != nil {
		t.Fatalf("the first change: %v", err)
	}
}

// TestDescGenerationMoves protects the node's cached routing table: the
// host's descriptor generation stays put while only writes flow, and moves
// on every node when the shard's descriptor changes (a learner added), so
// a cache keyed on it is rebuilt exactly when routing may have changed.
func TestDescGenerationMoves(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	putAll(c, "warm", 3) // settle the bootstrap's publications
	gens := func() map[ids.NodeID]uint64 {
		out := map[ids.NodeID]uint64{}
		for _, n := range []ids.NodeID{1, 2, 3} {
			out[n] = c.Node(n).Host.DescGeneration()
		}
		return out
	}
	before := gens()
	waitAll(c, putAll(c, "steady", 10), 1, 2, 3)
	if got := gens(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("generations moved with only writes flowing: %v -> %v", before, got)
	}
	n4 := c.AddNode()
	epoch := descOf(c, leader).GetEpoch()
	if _, err := run(t, c, c.Node(leader).Host, "the learner's addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, epoch, n4)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.RunUntil("every node's generation to move", 300, func() bool {
		now := gens()
		for n, g := range before {
			if now[n] == g {
				return false
			}
		}
		return true
	})
}

// TestLeaderAnswersAsInfo protects Host.Leader, the lock-free leader lookup
// that routes every request: on every node it agrees with Info's IsLeader
// and LeaderNode after the first election, after a leadership transfer,
// and after a replica is removed (ok false there). It fails if the map it
// reads is not replaced when a leader changes or a replica goes.
func TestLeaderAnswersAsInfo(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 4, Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	agree := func(what string) {
		t.Helper()
		c.RunUntil(what, 300, func() bool {
			for _, n := range c.Nodes() {
				i, ok := n.Host.Info(1)
				isLeader, node, ok2 := n.Host.Leader(1)
				if ok != ok2 || i.IsLeader != isLeader || i.LeaderNode != node {
					return false
				}
			}
			return true
		})
	}
	leader := c.WaitLeader(1)
	agree("Leader to agree with Info after the election")
	if _, node, _ := c.Node(others(leader, 4)[0]).Host.Leader(1); node != leader {
		t.Fatalf("a follower's Leader names node %d, want %d", node, leader)
	}
	c.Put("k", "v")
	c.WaitValue("k", "v") // every replica caught up: the transfer's condition
	target := others(leader, 4)[0]
	if _, err := run(t, c, c.Node(leader).Host, "the transfer", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return nil, h.TransferLeader(ctx, 1, 0, ids.ReplicaID(target))
	}); err != nil {
		t.Fatalf("TransferLeader: %v", err)
	}
	c.RunUntil("the transferee to lead", 300, func() bool {
		isLeader, _, _ := c.Node(target).Host.Leader(1)
		return isLeader
	})
	agree("Leader to agree with Info after the transfer")
	removed := others(target, 4)[0]
	if _, err := run(t, c, c.Node(target).Host, "the removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(removed), 0)
	}); err != nil {
		t.Fatalf("RemoveReplica: %v", err)
	}
	c.RunUntil("the removed replica to be gone from Leader", 300, func() bool {
		_, _, ok := c.Node(removed).Host.Leader(1)
		return !ok
	})
	agree("Leader to agree with Info after the removal")
}

// TestStepsPlannedAtOneEpochDoNotBothApply protects what keeps two
// placement leaders' steps apart: a new placement leader does not see a
// step its predecessor proposed but which has not applied (its recorded
// descriptor is the one both planned from), and may plan another on the
// same shard at the same epoch. The shard's leader makes only one of
// them: while the first is pending the second is refused
// (ErrChangePending); once it applied, a step planned at the old epoch is
// refused (ErrStaleEpoch); and if the first never committed (its leader was
// cut off with it, and the shard elected another), the second applies
// instead, the first is lost, and the descriptors hold the second alone.
func TestStepsPlannedAtOneEpochDoNotBothApply(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	a := c.WaitLeader(1)
	n4, n5 := c.AddNode(), c.AddNode()
	voters := others(a, 3)
	epoch := descOf(c, a).GetEpoch()
	h := c.Node(a).Host

	// The old placement leader's step, pending: the voters are cut off.
	for _, n := range voters {
		c.Cut(n)
	}
	first := make(chan error, 1)
	firstEnded := multiraftest.Begin(func(ctx context.Context) { _, err := h.AddLearner(ctx, 1, epoch, n4); first <- err })
	second := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) { _, err := h.AddLearner(ctx, 1, epoch, n5); second <- err })
	if err := await(t, second, "the new placement leader's step"); !errors.Is(err, multiraft.ErrChangePending) {
		t.Fatalf("a step planned at epoch %d while another is pending: %v, want ErrChangePending", epoch, err)
	}
	for _, n := range voters {
		c.Heal(n)
	}
	c.RunUntil("the first step", 500, func() bool { return descOf(c, a).GetEpoch() > epoch || isClosed(firstEnded) })
	if err := await(t, first, "the old placement leader's step"); err != nil {
		t.Fatalf("the first step: %v", err)
	}
	if _, err := run(t, c, h, "the new placement leader's step again", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, epoch, n5)
	}); !errors.Is(err, multiraft.ErrStaleEpoch) {
		t.Fatalf("a step planned at epoch %d after another applied: %v, want ErrStaleEpoch", epoch, err)
	}
	if _, ok := roleOf(descOf(c, a), ids.ReplicaID(n4)); !ok || listsNode(descOf(c, a), n5) {
		t.Fatalf("descriptor %v after two steps at one epoch; want the first's learner on node %d alone", descOf(c, a), n4)
	}

	// The old step only in its leader's log, which is then cut off: the
	// shard elects another leader, where the new step applies.
	epoch = descOf(c, a).GetEpoch()
	for _, n := range append([]ids.NodeID{n4}, voters...) {
		c.Cut(n)
	}
	lost := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) { _, err := h.RemoveReplica(ctx, 1, epoch, ids.ReplicaID(n4), 0); lost <- err })
	c.Cut(a)
	for _, n := range append([]ids.NodeID{n4}, voters...) {
		c.Heal(n)
	}
	var b ids.NodeID
	c.RunUntil("a new shard leader", 500, func() bool {
		b = c.Leader(1)
		return b != 0 && b != a
	})
	var err error
	for range 100 { // a new leader refuses changes until it applied its predecessors' log
		if _, err = run(t, c, c.Node(b).Host, "the new step", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
			return h.AddLearner(ctx, 1, epoch, n5)
		}); !errors.Is(err, multiraft.ErrChangePending) {
			break
		}
		c.Tick(1)
	}
	if err != nil {
		t.Fatalf("the new step on the new shard leader %d: %v", b, err)
	}
	c.Heal(a)
	c.RunUntil("the old shard leader to step down", 500, func() bool {
		isLeader, _, _ := h.Leader(1)
		return !isLeader
	})
	if err := await(t, lost, "the old step"); err == nil {
		t.Fatal("the old step, cut off with its leader, reports success")
	}
	c.RunUntil("every replica to apply the new step", 500, func() bool {
		for _, n := range []ids.NodeID{1, 2, 3} {
			if descOf(c, n).GetEpoch() != epoch+1 {
				return false
			}
		}
		return true
	})
	for _, n := range []ids.NodeID{1, 2, 3} {
		d := descOf(c, n)
		if !listsNode(d, n4) || !listsNode(d, n5) {
			t.Fatalf("node %d's descriptor %v; want the learner on node %d kept (the old step lost) and one on %d added", n, d, n4, n5)
		}
	}
}

// listsNode reports whether d has a replica on node.
func listsNode(d *concordpb.ShardDescriptor, node ids.NodeID) bool {
	for _, r := range d.GetReplicas() {
		if ids.NodeID(r.GetNodeId()) == node {
			return true
		}
	}
	return false
}
