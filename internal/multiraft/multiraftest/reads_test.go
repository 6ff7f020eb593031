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
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
)

// getFrom reads key of shard 1 from a linearizable read's view.
func getFrom(t *testing.T, v *storage.ReadView, key string) (string, bool) {
	t.Helper()
	var val []byte
	var found bool
	if err := v.Read(func(r storage.Reader) (err error) {
		val, _, found, err = kv.Get(r, 1, []byte(key), 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return string(val), found
}

// removeLeaderReplica replaces the leader's replica of shard 1 by one on a
// new node, in the background, and returns its outcome's channel once the
// change is proposed (or refused): see multiraftest.Begin.
func removeLeaderReplica(c *multiraftest.Cluster, leader ids.NodeID) chan error {
	added := c.AddNode()
	h := c.Node(leader).Host
	changed := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) {
		_, err := h.ChangeReplicas(ctx, 1, 0, ids.ReplicaID(leader), added) // initial replica ids are node ids
		changed <- err
	})
	return changed
}

// TestReadReleasedBeforeItsReplicaIsRemoved protects linearizable reads
// against the removal of their replica: a read is released on the leader
// (its index applied), but the goroutine serving it runs only after the
// leader's replica has been removed and its data destroyed. It must still
// read the value, from the state it was released at, never "not found".
// Once the replica is gone, a new read fails cleanly.
func TestReadReleasedBeforeItsReplicaIsRemoved(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	type result struct {
		v   *storage.ReadView
		err error
	}
	before := rounds(t, h)
	done := make(chan result, 1)
	multiraftest.Begin(func(ctx context.Context) { v, err := h.ReadIndex(ctx, 1); done <- result{v, err} })
	// Wait for the loop, not for done, which the goroutine fills later
	// (await): once the round is out its answers need no tick.
	c.RunUntil("the read's round", 100, func() bool { return rounds(t, h) > before })
	rd := await(t, done, "the read")
	if rd.err != nil {
		t.Fatalf("ReadIndex on the leader: %v", rd.err)
	}
	removeLeaderReplica(c, leader)
	c.RunUntil("the leader's replica to be destroyed", 500, func() bool { _, ok := h.Info(1); return !ok })
	if _, found := c.Get(leader, "k"); found {
		t.Fatal("the removed replica's data is still in the engine; the test proves nothing")
	}
	if v, found := getFrom(t, rd.v, "k"); !found || v != "v" {
		t.Fatalf("a read released before its replica was removed read found=%v %q, want \"v\"", found, v)
	}
	rd.v.Release()
	if _, err := h.ReadIndex(context.Background(), 1); !errors.Is(err, multiraft.ErrNoReplica) {
		t.Fatalf("ReadIndex after the replica was removed: %v, want ErrNoReplica", err)
	}
}

// TestReadsWhileTheLeaderIsRemoved protects the same with reads racing the
// removal: readers loop on the leader while its replica is replaced; each
// read either fails cleanly (not leader, removed, no replica) or finds the
// value, whether it reads at once or only after the replica is destroyed
// (some read in the very loop turn that applies the removal).
//
// The removal starts only once every reader has been served a read: it
// takes a few milliseconds, and on a loaded machine a reader goroutine may
// not run at all before the replica is gone (seen: three of four readers'
// first read was already ErrNoReplica), leaving no read to look at late.
func TestReadsWhileTheLeaderIsRemoved(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	gone := func() bool { _, ok := h.Info(1); return !ok }
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		late    []*storage.ReadView // read after the replica is destroyed
		served  int
		badErrs []error
	)
	stop := make(chan struct{})
	stopReaders := sync.OnceFunc(func() { close(stop) })
	defer stopReaders() // on a failed wait too, not to leave them looping
	const readers = 4
	firstServed := make(chan struct{}, readers) // one send per reader, at its first served read
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servedOnce := false
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := h.ReadIndex(context.Background(), 1)
				var nl *replica.NotLeaderError
				switch {
				case err == nil:
				case errors.Is(err, multiraft.ErrNoReplica):
					return // the replica is gone
				case errors.As(err, &nl), errors.Is(err, replica.ErrRemoved):
					continue
				default:
					mu.Lock()
					badErrs = append(badErrs, err)
					mu.Unlock()
					continue
				}
				if !servedOnce {
					servedOnce = true
					firstServed <- struct{}{}
				}
				mu.Lock()
				served++
				if i%2 == 0 {
					late = append(late, v)
					mu.Unlock()
					continue
				}
				mu.Unlock()
				if val, found := getFrom(t, v, "k"); !found || val != "v" {
					t.Errorf("read on the leader during its removal: found=%v %q, want \"v\"", found, val)
				}
				v.Release()
			}
		}()
	}
	// A healthy leader serves reads with no tick (its round's heartbeats
	// and answers are delivered at once), so waiting needs no ticking.
	for range readers {
		await(t, firstServed, "a reader's first read before the removal")
	}
	changed := removeLeaderReplica(c, leader)
	// On the loop's state, then the caller, which a tick budget could
	// outrun: it needs no tick once the replica is gone.
	c.RunUntil("the leader's replica to be destroyed", 500, gone)
	stopReaders()
	wg.Wait()
	if err := await(t, changed, "the replacement"); err != nil {
		t.Fatalf("ChangeReplicas: %v", err)
	}
	for _, v := range late {
		if val, found := getFrom(t, v, "k"); !found || val != "v" {
			t.Fatalf("read released before the removal, run after it: found=%v %q, want \"v\"", found, val)
		}
		v.Release()
	}
	if len(badErrs) > 0 {
		t.Fatalf("reads failed with %v, want only clean refusals", badErrs)
	}
	if served == 0 || len(late) == 0 {
		t.Fatalf("%d reads served (%d read late): the test proves nothing", served, len(late))
	}
	t.Logf("%d reads served, %d of them read after the replica was destroyed", served, len(late))
}

// readResult is the outcome of one linearizable read of a key.
type readResult struct {
	val   string
	found bool
	err   error
}

// readKey runs a linearizable read of key (shard 1) on h in the background
// and returns once the read is in the loop's inbox, or was served off the
// loop by lease (multiraft/fastread.go): see multiraftest.Begin.
func readKey(t *testing.T, h *multiraft.Host, key string) chan readResult {
	done := make(chan readResult, 1)
	multiraftest.Begin(func(ctx context.Context) {
		v, err := h.ReadIndex(ctx, 1)
		if err != nil {
			done <- readResult{err: err}
			return
		}
		val, found := getFrom(t, v, key)
		v.Release() // before the result: a test may end, and close the engine, once it has it
		done <- readResult{val: val, found: found}
	})
	return done
}

// holdLoop runs a Do on h that blocks its loop until the returned function
// is called: reads enqueued meanwhile all reach the loop in its next turn.
func holdLoop(t *testing.T, h *multiraft.Host) (release func()) {
	hold, held := make(chan struct{}), make(chan struct{})
	go func() { _ = h.Do(context.Background(), func() { close(held); <-hold }) }()
	<-held
	release = sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the cluster stops the host
	return release
}

func rounds(t *testing.T, h *multiraft.Host) uint64 {
	t.Helper()
	i, ok := h.Info(1)
	if !ok {
		t.Fatal("no replica of shard 1")
	}
	return i.ReadRounds
}

// TestConcurrentReadsShareOneRound protects the batching of linearizable
// reads on the real loop: 50 reads that reach the leader's loop in one turn
// are all served, with the committed value, by ONE ReadIndex round (one
// heartbeat broadcast instead of fifty).
func TestConcurrentReadsShareOneRound(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	before := rounds(t, h)
	release := holdLoop(t, h)
	var reads []chan readResult
	for range 50 {
		reads = append(reads, readKey(t, h, "k"))
	}
	release()
	// The settle that sees the round issued also carries its heartbeats and
	// their answers, so the loop has ended the reads by then (await).
	c.RunUntil("the round", 100, func() bool { return rounds(t, h) > before })
	for i, r := range reads {
		if res := await(t, r, "a read"); res.err != nil || res.val != "v" {
			t.Fatalf("read %d: %+v, want \"v\"", i, res)
		}
	}
	if n := rounds(t, h) - before; n != 1 {
		t.Fatalf("50 reads in one loop turn took %d ReadIndex rounds, want 1", n)
	}
}

// TestReadsFailWhenTheHostStops protects readers from hanging: reads in a
// round that can never be confirmed (the leader is cut off) and reads still
// queued end with an error when the leader's host stops.
func TestReadsFailWhenTheHostStops(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	before := rounds(t, h)
	c.Cut(leader)
	inRound := readKey(t, h, "k")
	c.RunUntil("the round to be issued", 5, func() bool { return rounds(t, h) > before })
	release := holdLoop(t, h)
	queued := readKey(t, h, "k")
	stopped := make(chan struct{})
	go func() { c.Stop(leader); close(stopped) }()
	release()
	<-stopped
	for name, r := range map[string]chan readResult{"in a round": inRound, "queued": queued} {
		if res := <-r; res.err == nil {
			t.Fatalf("read %s on a stopped host: %+v, want an error", name, res)
		}
	}
}

// TestDeposedLeaderNeverServesStale protects linearizable reads across a
// partition, with rounds shared by reads. The old leader is cut off but its
// timers stand still, so it still believes it leads; the others elect a
// new leader, which commits a new value. A read then queued at the old
// leader must never return the old value: it may only fail (or, had the
// old leader somehow caught up, return the new one).
//
// To make batching's own mistake visible, an earlier round of the old
// leader (issued before the partition, so the old value is a correct
// answer for it) is confirmed late: the followers' heartbeat answers for it
// are held on the wire and delivered only after the stale read is queued.
// They confirm that earlier round and no later one; a read wrongly added to
// an earlier round, or confirmed by earlier answers, would come back with
// the old value.
func TestDeposedLeaderNeverServesStale(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	old := c.WaitLeader(1)
	c.Put("k", "old")
	h := c.Node(old).Host
	var others []ids.NodeID
	for _, n := range c.Nodes() {
		if n.ID != old {
			others = append(others, n.ID)
		}
	}

	type heldMsg struct {
		from ids.NodeID
		env  *concordpb.RaftEnvelope
	}
	var mu sync.Mutex
	var held []heldMsg
	c.Net.Intercept(func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool {
		if to != old || env.GetShardId() != 1 {
			return false
		}
		m := decode(t, env)
		if m.GetType() != pb.MsgHeartbeatResp || len(m.GetContext()) == 0 {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		held = append(held, heldMsg{from, env})
		return true
	})
	heldFrom := func() int {
		mu.Lock()
		defer mu.Unlock()
		from := map[ids.NodeID]bool{}
		for _, m := range held {
			from[m.from] = true
		}
		return len(from)
	}
	early := readKey(t, h, "k")
	c.RunUntil("both followers' answers to the early round, held", 3, func() bool { return heldFrom() == 2 })

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

	stale := readKey(t, h, "k")
	c.TickOnly(1, others...) // the old leader's loop takes the read
	mu.Lock()
	for _, m := range held {
		c.Net.Inject(m.from, old, m.env)
	}
	held = nil
	mu.Unlock()
	// The settle of this tick has the old leader's loop step the answers
	// and run the Ready that releases the early read; only its reader
	// goroutine may still be on its way.
	c.TickOnly(1, others...)
	if res := await(t, early, "the early read, its round confirmed by the held answers"); res.err != nil || res.val != "old" {
		t.Fatalf("early read, confirmed by the held answers: %+v, want \"old\"", res)
	}

	// Whatever became of the stale read meanwhile, it has ended by the time
	// the old leader, reconnected, steps down (stepping down fails every
	// read it holds).
	c.Net.Intercept(nil)
	c.Heal(old)
	c.RunUntil("the old leader to step down", 500, func() bool { i, ok := h.Info(1); return ok && !i.IsLeader })
	res := await(t, stale, "the stale read, its leader deposed")
	if res.err == nil && res.val != "new" {
		t.Fatalf("read queued at a deposed leader after a new write returned %+v", res)
	}
	var nl *replica.NotLeaderError
	if res.err != nil && !errors.As(res.err, &nl) {
		t.Fatalf("read on a deposed leader: %v, want NotLeaderError", res.err)
	}
	t.Logf("read queued at the deposed leader: err=%v, value %q", res.err, res.val)
}

// await returns what a read's (or any call's) goroutine sends on ch. Call
// it only once the host's loop has ended the call (the cluster settled
// after what ends it): it then waits for that goroutine alone, which ticks
// and settling do not synchronise with. Polling len(ch) while ticking
// instead can give up before that goroutine ever runs: a test goroutine
// handing work to the loops back and forth can keep it off the CPU for a
// hundred ticks. The deadline only bounds a call the loop never ended.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never ended", what)
		var zero T
		return zero
	}
}

// runOnly ticks only nodes until cond holds, failing the test after
// maxTicks: the other nodes' timers stand still.
func runOnly(t *testing.T, c *multiraftest.Cluster, what string, maxTicks int, nodes []ids.NodeID, cond func() bool) {
	for range maxTicks {
		c.TickOnly(1, nodes...)
		if cond() {
			return
		}
	}
	t.Helper()
	t.Fatalf("gave up after %d ticks waiting for %s", maxTicks, what)
}
