package multiraft_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

var leaseDuration = multiraft.DefaultConfig(1).LeaseDuration()

type readResult struct {
	val   string
	found bool
	err   error
}

func info(t *testing.T, h *multiraft.Host, shard ids.ShardID) multiraft.ReplicaInfo {
	t.Helper()
	i, ok := h.Info(shard)
	if !ok {
		t.Fatalf("no replica of shard %d", shard)
	}
	return i
}

// get reads key of shard from v.
func get(v *storage.ReadView, shard ids.ShardID, key string) (string, bool, error) {
	var val []byte
	var found bool
	err := v.Read(func(r storage.Reader) (err error) {
		val, _, found, err = kv.Get(r, uint64(shard), []byte(key), 0)
		return err
	})
	return string(val), found, err
}

// read runs one linearizable read of key on h and returns when it ends;
// a read that needs the loop needs the cluster to run (readLoop).
func read(h *multiraft.Host, shard ids.ShardID, key string) readResult {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a guard against a hang, not a timing
	defer cancel()
	return readWith(ctx, h, shard, key)
}

// readWith is read with the caller's context.
func readWith(ctx context.Context, h *multiraft.Host, shard ids.ShardID, key string) readResult {
	v, err := h.ReadIndex(ctx, shard)
	if err != nil {
		return readResult{err: err}
	}
	defer v.Release()
	val, found, err := get(v, shard, key)
	return readResult{val: val, found: found, err: err}
}

// readLoop runs read in the background while the cluster runs: it ticks
// until the loop has taken the read (a round issued for it, or served by
// lease) or the read ended, then waits for the read's goroutine, which
// needs no tick to end. Ticking until that goroutine itself reported its
// end failed now and then: ticks synchronise with the loops only, and Go's
// scheduler kept the goroutine off the CPU, before it had even queued the
// read, for all the 100 ticks (multiraftest.Begin).
func readLoop(t *testing.T, c *multiraftest.Cluster, node ids.NodeID, shard ids.ShardID, key string) readResult {
	t.Helper()
	h := c.Node(node).Host
	i0 := info(t, h, shard)
	done := make(chan readResult, 1)
	ended := multiraftest.Begin(func(ctx context.Context) { done <- readWith(ctx, h, shard, key) })
	c.RunUntil("the loop to take the read", 100, func() bool {
		i := info(t, h, shard)
		return i.ReadRounds > i0.ReadRounds || i.LeaseReads > i0.LeaseReads || isClosed(ended)
	})
	return await(t, done)
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

// withLease makes node's replica of shard, its leader, hold a published
// lease: a read takes a round, whose answer grants it.
func withLease(t *testing.T, c *multiraftest.Cluster, node ids.NodeID, shard ids.ShardID) {
	t.Helper()
	h := c.Node(node).Host
	if _, _, ok := multiraft.PublishedLease(h, shard); ok {
		return
	}
	if res := readLoop(t, c, node, shard, "x"); res.err != nil {
		t.Fatalf("read on the leader: %v", res.err)
	}
	c.RunUntil("a published lease", 100, func() bool { _, _, ok := multiraft.PublishedLease(h, shard); return ok })
}

// freshLease makes node's replica of shard, its leader, publish a lease
// that fast reads may use at the clock's present time (before its renewal
// point), without moving the clock: a read takes a round (or, late in a
// lease, renews it), which needs no tick, and the loops are waited for.
func freshLease(t *testing.T, c *multiraftest.Cluster, node ids.NodeID, shard ids.ShardID) {
	t.Helper()
	h := c.Node(node).Host
	fresh := func() bool {
		_, e, ok := multiraft.PublishedLease(h, shard)
		return ok && c.Clock.Now() < e-int64(leaseDuration/2)
	}
	for range 100 {
		if fresh() {
			return
		}
		if res := read(h, shard, "x"); res.err != nil {
			t.Fatalf("read on the leader: %v", res.err)
		}
		for _, n := range c.Nodes() { // a barrier on every loop, as the cluster's settle
			if n.Host != nil {
				_ = n.Host.Do(context.Background(), func() {})
				_ = n.Host.Do(context.Background(), func() {})
			}
		}
	}
	t.Fatal("no fresh lease published")
}

// holdLoop blocks h's loop until the returned function is called.
func holdLoop(t *testing.T, h *multiraft.Host) (release func()) {
	hold, held := make(chan struct{}), make(chan struct{})
	go func() { _ = h.Do(context.Background(), func() { close(held); <-hold }) }()
	<-held
	release = sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	return release
}

// TestFastLeaseReadNeedsNoLoop protects the point of the fast path: a
// leader holding a lease serves linearizable reads, with the committed
// value, while its loop is blocked; with lease reads off it publishes no
// lease and serves nothing off the loop.
func TestFastLeaseReadNeedsNoLoop(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) { cfg.LeaseReads = on }})
		leader := c.WaitLeader(1)
		c.Put("k", "v")
		h := c.Node(leader).Host
		if res := readLoop(t, c, leader, 1, "k"); res.err != nil || res.val != "v" {
			t.Fatalf("lease reads %v: first read %+v", on, res)
		}
		if !on {
			for range 3 {
				if res := readLoop(t, c, leader, 1, "k"); res.err != nil || res.val != "v" {
					t.Fatalf("lease reads off: read %+v", res)
				}
			}
			if _, _, ok := multiraft.PublishedLease(h, 1); ok || info(t, h, 1).FastLeaseReads != 0 {
				t.Fatalf("lease reads off: lease published %v, %d reads off the loop; want none", ok, info(t, h, 1).FastLeaseReads)
			}
			continue
		}
		freshLease(t, c, leader, 1)
		f0, l0 := info(t, h, 1).FastLeaseReads, info(t, h, 1).LeaseReads
		release := holdLoop(t, h)
		for range 3 {
			if res := read(h, 1, "k"); res.err != nil || res.val != "v" {
				t.Fatalf("read with the loop blocked: %+v", res)
			}
		}
		release()
		if f, l := info(t, h, 1).FastLeaseReads-f0, info(t, h, 1).LeaseReads-l0; f != 3 || l != 3 {
			t.Fatalf("3 reads with the loop blocked: %d counted off the loop, %d by lease; want 3 and 3", f, l)
		}
	}
}

// TestViewsTakenOnlyForReads protects the lazy view: turns that only write
// take no view (one per turn was 6 % of a follower's CPU under pipelined
// writes), and the first fast read after them takes one that holds the
// last acknowledged write, not the view the reads before them shared.
func TestViewsTakenOnlyForReads(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	h := c.Node(leader).Host
	c.Put("k", "v0")
	freshLease(t, c, leader, 1)
	f0 := info(t, h, 1).FastLeaseReads
	if res := read(h, 1, "k"); res.err != nil || res.val != "v0" {
		t.Fatalf("first read: %+v", res)
	}
	if info(t, h, 1).FastLeaseReads != f0+1 {
		t.Fatal("the first read was not served off the loop; the test proves nothing")
	}
	taken := multiraft.ViewsTaken(h)
	for i := 1; i <= 20; i++ {
		c.Put("k", fmt.Sprint("v", i))
	}
	if n := multiraft.ViewsTaken(h) - taken; n != 0 {
		t.Fatalf("20 writes and no read took %d views; want none", n)
	}
	freshLease(t, c, leader, 1) // its reads, if any, are of another key
	f1, taken := info(t, h, 1).FastLeaseReads, multiraft.ViewsTaken(h)
	for range 3 {
		if res := read(h, 1, "k"); res.err != nil || res.val != "v20" {
			t.Fatalf("a read after the writes: %+v; want v20", res)
		}
	}
	if f := info(t, h, 1).FastLeaseReads - f1; f != 3 {
		t.Fatalf("%d of 3 reads served off the loop; the test proves nothing", f)
	}
	if n := multiraft.ViewsTaken(h) - taken; n > 1 {
		t.Fatalf("3 reads with no write between took %d views; want at most one", n)
	}
}

// TestFastReadStopsAtRenewalAndExpiry protects the fast path's use of the
// clock: from half a lease before its expiry reads go to the loop, which
// serves them by lease and renews it (then fast reads resume); once it ran
// out no read is served by lease at all, only by a round. Reads here need
// no tick (a round's messages are delivered when sent), so only the test
// moves the clock.
func TestFastReadStopsAtRenewalAndExpiry(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	freshLease(t, c, leader, 1)
	counts := func() (fast, lease, rounds uint64) {
		i := info(t, h, 1)
		return i.FastLeaseReads, i.LeaseReads, i.ReadRounds
	}
	expect := func(when string, wantFast, wantLease, wantRounds uint64) {
		t.Helper()
		f0, l0, r0 := counts()
		if res := read(h, 1, "k"); res.err != nil || res.val != "v" {
			t.Fatalf("read %s: %+v", when, res)
		}
		// The loop publishes its counts just after it serves a read, so
		// they may trail the read's return: wait for as many as expected
		// (with no tick: ticks move the lease), then check which.
		f, l, r := counts()
		for deadline := time.Now().Add(5 * time.Second); f-f0+l-l0+r-r0 < wantFast+wantLease+wantRounds && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			f, l, r = counts()
		}
		if f-f0 != wantFast || l-l0 != wantLease || r-r0 != wantRounds {
			t.Fatalf("read %s: %d off the loop, %d by lease, %d rounds; want %d, %d, %d", when, f-f0, l-l0, r-r0,
				wantFast, wantLease, wantRounds)
		}
	}
	expect("early in the lease", 1, 1, 0)
	_, e0, _ := multiraft.PublishedLease(h, 1)
	half := int64(leaseDuration / 2)
	c.Clock.Advance(time.Duration(e0 - half - c.Clock.Now() + int64(time.Millisecond))) // just past the renewal point
	expect("late in the lease", 0, 1, 1)                                                // by the loop, with a renewal round
	c.RunUntil("the renewed lease published", 100, func() bool { _, e, ok := multiraft.PublishedLease(h, 1); return ok && e > e0 })
	_, e1, _ := multiraft.PublishedLease(h, 1)
	if c.Clock.Now() >= e1-half {
		t.Fatal("the renewed lease is past its renewal point already; the test proves nothing")
	}
	expect("in the renewed lease", 1, 1, 0)
	c.Clock.Advance(time.Duration(e1 - c.Clock.Now())) // the lease runs out: now = expiry
	expect("when the lease ran out", 0, 0, 1)
}

// interceptFrom installs f on c's network for messages node sends; f's
// complaints are collected and reported by the returned check, and a
// message it reports drop for never arrives.
func interceptFrom(t *testing.T, c *multiraftest.Cluster, node ids.NodeID, f func(m *pb.Message) (complaint string, drop bool)) (check func()) {
	var mu sync.Mutex
	var bad []string
	c.Net.Intercept(func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool {
		if from != node {
			return false
		}
		var m pb.Message
		if err := proto.Unmarshal(env.GetMessage(), &m); err != nil {
			return false
		}
		s, drop := f(&m)
		if s != "" {
			mu.Lock()
			bad = append(bad, s)
			mu.Unlock()
		}
		return drop
	})
	return func() {
		t.Helper()
		c.Net.Intercept(nil)
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("%d messages left with the lease still published, first: %s", len(bad), bad[0])
		}
	}
}

// TestFastLeaseVoidedBeforeTransfer protects fast reads against leader
// transfer: the published lease is withdrawn before the transfer's
// MsgTimeoutNow leaves (its target campaigns with a vote voters grant
// despite their lease).
func TestFastLeaseVoidedBeforeTransfer(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	withLease(t, c, leader, 1)
	var sent atomic.Int32
	check := interceptFrom(t, c, leader, func(m *pb.Message) (string, bool) {
		if m.GetType() != pb.MsgTimeoutNow {
			return "", false
		}
		sent.Add(1)
		if _, _, ok := multiraft.PublishedLease(h, 1); ok {
			return "MsgTimeoutNow", false
		}
		return "", false
	})
	target := c.Nodes()[0].ID
	if target == leader {
		target = c.Nodes()[1].ID
	}
	done := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) { done <- h.TransferLeader(ctx, 1, 0, ids.ReplicaID(target)) })
	c.RunUntil("the transfer", 200, func() bool { return c.Leader(1) == target })
	if err := await(t, done); err != nil { // on the loops' state, then the caller, which polls it
		t.Fatalf("transfer: %v", err)
	}
	check()
	if sent.Load() == 0 {
		t.Fatal("no MsgTimeoutNow seen; the test proves nothing")
	}
	if _, _, ok := multiraft.PublishedLease(h, 1); ok {
		t.Fatal("the old leader still publishes a lease")
	}
}

// TestFastLeaseVoidedBeforeStepDown protects fast reads across a step-down:
// a leader that learns of a newer term withdraws its published lease
// before it sends anything in that term.
func TestFastLeaseVoidedBeforeStepDown(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	old := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(old).Host
	withLease(t, c, old, 1)
	t0 := info(t, h, 1).Term
	var others []ids.NodeID
	for _, n := range c.Nodes() {
		if n.ID != old {
			others = append(others, n.ID)
		}
	}
	c.Cut(old)
	for range 500 {
		if l := c.Leader(1); l != 0 && l != old {
			break
		}
		c.TickOnly(1, others...)
	}
	if l := c.Leader(1); l == 0 || l == old {
		t.Fatal("no new leader")
	}
	// The old leader's own messages of its term are dropped: the others'
	// answers would depose it with nothing to send back. It learns of the
	// new term from the new leader, and answers in the same Ready.
	var later atomic.Int32
	check := interceptFrom(t, c, old, func(m *pb.Message) (string, bool) {
		if m.GetTerm() <= t0 {
			return "", true
		}
		later.Add(1)
		if _, _, ok := multiraft.PublishedLease(h, 1); ok {
			return fmt.Sprintf("%v of term %d", m.GetType(), m.GetTerm()), false
		}
		return "", false
	})
	c.Heal(old)
	c.RunUntil("the old leader to step down and answer", 500, func() bool { return !info(t, h, 1).IsLeader && later.Load() > 0 })
	check()
	if _, _, ok := multiraft.PublishedLease(h, 1); ok {
		t.Fatal("the deposed leader still publishes a lease")
	}
}

// TestFastLeaseVoidedBeforeConfChangeCommits protects fast reads across a
// membership change (the lease's quorum was of the old configuration): the
// leader withdraws its lease before any message telling the change is
// committed leaves, and gets one again from a later round.
func TestFastLeaseVoidedBeforeConfChangeCommits(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	withLease(t, c, leader, 1)
	var ccIndex atomic.Uint64
	var told atomic.Int32
	check := interceptFrom(t, c, leader, func(m *pb.Message) (string, bool) {
		for _, e := range m.GetEntries() {
			if t := e.GetType(); (t == pb.EntryConfChange || t == pb.EntryConfChangeV2) && ccIndex.Load() == 0 {
				ccIndex.Store(e.GetIndex())
			}
		}
		if idx := ccIndex.Load(); idx == 0 || m.GetCommit() < idx {
			return "", false
		}
		told.Add(1)
		if _, _, ok := multiraft.PublishedLease(h, 1); ok {
			return fmt.Sprintf("%v with commit %d ≥ change %d", m.GetType(), m.GetCommit(), ccIndex.Load()), false
		}
		return "", false
	})
	added := c.AddNode()
	var follower ids.NodeID
	for _, n := range c.Nodes() {
		if n.ID != leader && n.ID != added {
			follower = n.ID
			break
		}
	}
	epoch := info(t, h, 1).Desc.GetEpoch()
	done := make(chan error, 1)
	ended := multiraftest.Begin(func(ctx context.Context) {
		_, err := h.ChangeReplicas(ctx, 1, 0, ids.ReplicaID(follower), added)
		done <- err
	})
	// On the leader's state (the change applied), then the caller.
	c.RunUntil("the membership change", 500, func() bool { return info(t, h, 1).Desc.GetEpoch() > epoch || isClosed(ended) })
	if err := await(t, done); err != nil {
		t.Fatalf("change: %v", err)
	}
	check()
	if told.Load() == 0 {
		t.Fatal("no message told the change committed; the test proves nothing")
	}
	c.Net.Intercept(nil)
	withLease(t, c, leader, 1) // a later round grants a new lease
	if res := read(h, 1, "k"); res.err != nil || res.val != "v" {
		t.Fatalf("read after the change: %+v", res)
	}
}

// keyOf returns a key of shard.
func keyOf(t *testing.T, c *multiraftest.Cluster, shard ids.ShardID) string {
	for i := range 10000 {
		if k := fmt.Sprintf("key%d", i); c.ShardOf(k) == shard {
			return k
		}
	}
	t.Fatalf("no key of shard %d", shard)
	return ""
}

// twoShardsOneLeader starts a cluster of two shards that one node leads
// both of (shard 2's leadership moved there), and returns that node and a
// key of each shard, written.
func twoShardsOneLeader(t *testing.T) (c *multiraftest.Cluster, leader ids.NodeID, k1, k2 string) {
	t.Helper()
	c = multiraftest.New(t, multiraftest.Options{Shards: 2, Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	leader = c.WaitLeader(1)
	if l2 := c.WaitLeader(2); l2 != leader {
		done := make(chan error, 1)
		ended := multiraftest.Begin(func(ctx context.Context) {
			done <- c.Node(l2).Host.TransferLeader(ctx, 2, 0, ids.ReplicaID(leader)) // initial replica ids are node ids
		})
		c.RunUntil("shard 2's leadership to move", 500, func() bool { return c.Leader(2) == leader || isClosed(ended) })
		if err := await(t, done); err != nil { // on the loops' state, then the caller, which polls it
			t.Fatalf("shard 2's transfer: %v", err)
		}
	}
	k1, k2 = keyOf(t, c, 1), keyOf(t, c, 2)
	c.Put(k1, "v")
	c.Put(k2, "w")
	return c, leader, k1, k2
}

// removeReplica replaces node's replica of shard 1 (which node leads) by
// one on a new node, in the background; it returns once the change is
// proposed (or refused).
func removeReplica(c *multiraftest.Cluster, node ids.NodeID) {
	added := c.AddNode()
	h := c.Node(node).Host
	multiraftest.Begin(func(ctx context.Context) { _, _ = h.ChangeReplicas(ctx, 1, 0, ids.ReplicaID(node), added) })
}

// TestFastReadNeverSeesDestroyedData protects fast reads against the
// removal of their replica, in the worst interleaving: a read checks the
// lease, then (held by a hook) runs only after the replica was removed,
// its data destroyed, and the shared view replaced by one without it (a
// write of another shard, still leased). It must not read that view, which
// would answer "not found" for a key that exists: it must fall back (and
// fail: no replica) or read state from before the removal.
func TestFastReadNeverSeesDestroyedData(t *testing.T) {
	c, leader, k1, k2 := twoShardsOneLeader(t)
	h := c.Node(leader).Host
	withLease(t, c, leader, 2)
	freshLease(t, c, leader, 1) // the read below passes the lease checks
	validated, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	multiraft.SetFastReadHook(h, func(shard ids.ShardID) {
		if shard == 1 {
			once.Do(func() { close(validated); <-resume })
		}
	})
	done := make(chan readResult, 1)
	go func() { done <- read(h, 1, k1) }()
	<-validated
	removeReplica(c, leader)
	c.RunUntil("the leader's replica of shard 1 destroyed", 500, func() bool { _, ok := h.Info(1); return !ok })
	withLease(t, c, leader, 2)
	c.Put(k2, "w2") // a batch that changes the engine while shard 2's lease is published: a new view
	c.RunUntil("a view without shard 1's data", 100, func() bool {
		v := multiraft.BorrowView(h)
		if v == nil {
			return false
		}
		defer v.Release()
		_, found, err := get(v, 1, k1)
		return err == nil && !found
	})
	close(resume)
	res := await(t, done)
	if res.err == nil && (!res.found || res.val != "v") {
		t.Fatalf("a read that began while the replica led read %+v after its data was destroyed; want \"v\" or an error", res)
	}
	t.Logf("the read: %+v", res)
}

// TestFastReadsDuringRemoval races fast reads against the removal of
// their replica (run it with -race): reads of an existing key, on several
// goroutines, while the replica is removed and destroyed and writes of
// another shard keep replacing the shared view, return the key's value or
// an error, never "not found".
func TestFastReadsDuringRemoval(t *testing.T) {
	c, leader, k1, k2 := twoShardsOneLeader(t)
	h := c.Node(leader).Host
	withLease(t, c, leader, 1)
	withLease(t, c, leader, 2)
	f0 := info(t, h, 1).FastLeaseReads
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	var served atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res := read(h, 1, k1)
				if res.err == nil && (!res.found || res.val != "v") {
					bad.Store(res)
				}
				if res.err == nil {
					served.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = h.Propose(ctx, 2, putCommand(k2, fmt.Sprint(i)))
			cancel()
		}
	}()
	fastBefore := func() bool { i, ok := h.Info(1); return !ok || i.FastLeaseReads > f0+10 }
	// Fast reads need no tick (a lease late in its life is renewed by a
	// round, which needs none either): wait for the readers' goroutines,
	// which ticks could outrun while Go's scheduler keeps them off the CPU.
	for deadline := time.Now().Add(30 * time.Second); !fastBefore(); { // a guard against a hang, not a timing
		if time.Now().After(deadline) {
			t.Fatal("no fast reads")
		}
		time.Sleep(time.Millisecond)
	}
	removeReplica(c, leader)
	c.RunUntil("the leader's replica of shard 1 destroyed", 500, func() bool { _, ok := h.Info(1); return !ok })
	c.Tick(3) // reads and writes go on after the destruction
	close(stop)
	wg.Wait()
	if res := bad.Load(); res != nil {
		t.Fatalf("a read of an existing key returned %+v", res)
	}
	if served.Load() == 0 {
		t.Fatal("no read served; the test proves nothing")
	}
	t.Logf("%d reads served", served.Load())
}

func putCommand(key, value string) *storepb.Command {
	return &storepb.Command{Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: []*concordpb.Op{multiraftest.PutOp(key, value)}}}}
}

func await[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second): // a guard against a hang, not a timing
		t.Fatal("never ended")
		var zero T
		return zero
	}
}
