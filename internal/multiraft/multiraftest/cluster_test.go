package multiraftest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storepb"
)

var put = multiraftest.PutOp

// putPrev is a put that returns the previous value.
func putPrev(k, v string) *concordpb.Op {
	op := put(k, v)
	op.ReturnPrev = true
	return op
}

// TestElectionAndProposals protects the write path through real hosts:
// each shard elects its preferred replica (the first, which campaigns at
// start), writes to several shards apply on every replica, and proposals
// flushed together each get their own command's result.
func TestElectionAndProposals(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 3})
	for shard := ids.ShardID(1); shard <= 3; shard++ {
		if l := c.WaitLeader(shard); l != ids.NodeID(shard) { // shard s starts on nodes s, s+1, ...
			t.Errorf("shard %d elected node %d, want its preferred replica on node %d", shard, l, shard)
		}
	}
	for i := range 12 {
		c.Put(fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	for i := range 12 {
		c.WaitValue(fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), 1, 2, 3)
	}
	shard := c.ShardOf("same")
	leader := c.WaitLeader(shard)
	calls := []*multiraftest.Call{c.Propose(leader, shard, putPrev("same", "a"))}
	c.Await(calls[0])
	for _, v := range []string{"b", "c"} {
		calls = append(calls, c.Await(c.Propose(leader, shard, putPrev("same", v))))
	}
	for i, prev := range []string{"", "a", "b"} {
		r := calls[i].Result.GetResults()
		if calls[i].Err != nil || len(r) != 1 || r[0].GetOk() != (prev != "") || string(r[0].GetValue()) != prev {
			t.Fatalf("put %d: %v %v, want previous value %q", i, calls[i].Result, calls[i].Err, prev)
		}
	}
	c.WaitValue("same", "c", 1, 2, 3)
}

// TestFollowerRefuses protects the leader-only paths: a proposal or a
// ReadIndex on a follower fails at once with NotLeaderError naming the
// leader's node, and nothing is applied.
func TestFollowerRefuses(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	follower := leader%3 + 1
	call := c.Await(c.Propose(follower, 1, put("k", "v")))
	var nl *replica.NotLeaderError
	if !errors.As(call.Err, &nl) || nl.LeaderNode != leader {
		t.Fatalf("proposal on a follower: %v, want NotLeaderError naming node %d", call.Err, leader)
	}
	if _, err := c.Node(follower).Host.ReadIndex(context.Background(), 1); !errors.As(err, &nl) || nl.LeaderNode != leader {
		t.Fatalf("ReadIndex on a follower: %v, want NotLeaderError naming node %d", err, leader)
	}
	c.Put("other", "x")
	c.WaitValue("other", "x", 1, 2, 3)
	if _, found := c.Get(leader, "k"); found {
		t.Fatal("a refused proposal was applied")
	}
}

// readAsync runs a ReadIndex on node in the background and returns once
// the read is in the loop's inbox, or was served off the loop by lease
// (multiraftest.Begin).
func readAsync(c *multiraftest.Cluster, node ids.NodeID, shard ids.ShardID) chan error {
	done := make(chan error, 1)
	h := c.Node(node).Host
	multiraftest.Begin(func(ctx context.Context) {
		v, err := h.ReadIndex(ctx, shard)
		if v != nil {
			v.Release()
		}
		done <- err
	})
	return done
}

// TestReadIndex protects linearizable reads: on a leader with a quorum a
// ReadIndex completes once everything committed before it is applied
// locally; on a leader cut off from its quorum it never succeeds, and ends
// when the leader steps down.
func TestReadIndex(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	before := rounds(t, h)
	done := readAsync(c, leader, 1)
	// Wait on the loop, then for the read's goroutine (await); a read that
	// ended without a round (a bug) ends the wait too.
	c.RunUntil("the read's round", 100, func() bool { return rounds(t, h) > before || len(done) > 0 })
	if err := await(t, done, "the read"); err != nil {
		t.Fatalf("ReadIndex on the leader: %v", err)
	}
	if v, _ := c.Get(leader, "k"); v != "v" {
		t.Fatalf("after ReadIndex the leader reads %q, want the committed \"v\"", v)
	}
	c.Cut(leader)
	// Past the lease the first read gave it: until then the cut-off leader
	// may still serve reads, since no other can be elected before.
	c.Clock.Advance(multiraft.DefaultConfig(1).LeaseDuration())
	done = readAsync(c, leader, 1)
	// Stepping down ends every read the leader holds.
	c.RunUntil("the cut-off leader to step down", 200, func() bool { i, ok := h.Info(1); return ok && !i.IsLeader })
	var nl *replica.NotLeaderError
	if err := await(t, done, "the read on a cut-off leader"); !errors.As(err, &nl) {
		t.Fatalf("ReadIndex on a leader without a quorum ended with %v, want NotLeaderError once it stepped down", err)
	}
}

// TestLeaderLoss protects availability and the ambiguity contract across a
// leader failure: a proposal stuck on a cut-off leader ends as ambiguous
// when it steps down, the others elect a new leader and keep taking writes,
// and once healed the old leader's uncommitted entry is overwritten
// everywhere (raft's truncate-on-conflict, through our log).
func TestLeaderLoss(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	old := c.WaitLeader(1)
	c.Put("before", "1")
	c.Cut(old)
	lost := c.Propose(old, 1, put("k", "lost"))
	c.RunUntil("a new leader", 300, func() bool { l := c.Leader(1); return l != 0 && l != old })
	c.Put("during", "2")
	c.Await(lost)
	if !errors.Is(lost.Err, replica.ErrAmbiguous) {
		t.Fatalf("proposal on a leader that lost its quorum: %v, want ErrAmbiguous", lost.Err)
	}
	c.Heal(old)
	c.Put("after", "3")
	for _, k := range []string{"before", "during", "after"} {
		v, _ := c.Get(c.Leader(1), k)
		c.WaitValue(k, v, 1, 2, 3)
	}
	for _, n := range []ids.NodeID{1, 2, 3} {
		if v, found := c.Get(n, "k"); found {
			t.Fatalf("node %d applied the cut-off leader's uncommitted write (k=%q)", n, v)
		}
	}
}

// TestKillLeader protects failover when the leader's process stops: a new
// leader is elected, writes continue, and the old node catches up when it
// comes back.
func TestKillLeader(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	old := c.WaitLeader(1)
	c.Put("a", "1")
	c.Stop(old)
	c.Put("b", "2")
	c.Start(old)
	c.Put("c", "3")
	for k, v := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		c.WaitValue(k, v, 1, 2, 3)
	}
}

// TestDroppedMessages protects progress on a lossy network: with a fifth
// of all messages lost (which ones is decided by the seed), writes still
// commit and reach every replica.
func TestDroppedMessages(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	c.Net.SetDropRate(0.2)
	for i := range 5 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.Net.SetDropRate(0)
	for i := range 5 {
		c.WaitValue(fmt.Sprintf("k%d", i), "v", 1, 2, 3)
	}
}

// TestCatchUpByLog protects the ordinary catch-up: a follower cut off
// while writes land gets the missed entries from the leader's log once
// healed.
func TestCatchUpByLog(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	c.Cut(lagging)
	for i := range 20 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.Heal(lagging)
	for i := range 20 {
		c.WaitValue(fmt.Sprintf("k%d", i), "v", lagging)
	}
	if idx := truncated(t, c, lagging); idx > 5 {
		t.Fatalf("the lagging follower's log was truncated at %d: it got a snapshot, want the log", idx)
	}
}

// putPastTruncation writes k0 to k19 (value "v") and waits for leader to
// truncate its log of shard 1 past index 15: a follower cut off before
// then can only catch up by snapshot. It returns the index truncated at.
func putPastTruncation(t *testing.T, c *multiraftest.Cluster, leader ids.NodeID) uint64 {
	t.Helper()
	for i := range 20 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	var gap uint64
	c.RunUntil("the leader to truncate its log", 100, func() bool {
		gap = truncated(t, c, leader)
		return gap > 15
	})
	return gap
}

// truncated returns the index node's log of shard 1 is truncated at.
func truncated(t *testing.T, c *multiraftest.Cluster, node ids.NodeID) uint64 {
	t.Helper()
	var ts storepb.TruncatedState
	if _, err := c.Node(node).Engine.GetProto(keys.Truncated(1), &ts); err != nil {
		t.Fatal(err)
	}
	return ts.GetIndex()
}

// TestCatchUpBySnapshot protects snapshot catch-up: a follower that missed
// entries the others have truncated away receives a snapshot streamed from
// the leader's engine, installs it (its staged file consumed), applies what
// follows, and keeps it all across a restart.
func TestCatchUpBySnapshot(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	c.Cut(lagging)
	gap := putPastTruncation(t, c, leader)
	c.Heal(lagging)
	c.Put("after", "x")
	c.WaitValue("after", "x", lagging)
	if idx := truncated(t, c, lagging); idx < gap {
		t.Fatalf("the lagging follower's log starts after %d, want a snapshot at or beyond %d", idx, gap)
	}
	if n := c.StagedFiles(lagging); n != 0 {
		t.Fatalf("%d staged snapshot files left after the install", n)
	}
	c.Stop(lagging)
	c.Start(lagging)
	for i := range 20 {
		c.WaitValue(fmt.Sprintf("k%d", i), "v", lagging)
	}
}

// TestReplaceReplica protects membership changes under load: replacing a
// follower's replica by a fresh one on a new node completes while writes
// continue, the new replica (created empty by the leader's first message)
// catches up and holds every write, every member's descriptor puts it in
// the old one's slot with the next epoch, and the removed replica's node
// destroys its copy.
func TestReplaceReplica(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("before", "1")
	added := c.AddNode()
	removed := leader%3 + 1
	removedReplica := ids.ReplicaID(removed) // in the initial placement a replica's id is its node's
	h := c.Node(leader).Host
	epoch := descOf(c, leader).GetEpoch()
	changed := make(chan error, 1)
	ended := multiraftest.Begin(func(ctx context.Context) {
		_, err := h.ChangeReplicas(ctx, 1, 0, removedReplica, added)
		changed <- err
	})
	for i := range 5 {
		c.Put(fmt.Sprintf("during%d", i), "2")
	}
	// On the leader's state (the replacement applied), then the caller,
	// which a tick budget could outrun.
	c.RunUntil("the replacement", 300, func() bool { return descOf(c, leader).GetEpoch() > epoch || isClosed(ended) })
	if err := await(t, changed, "the replacement"); err != nil {
		t.Fatalf("ChangeReplicas: %v", err)
	}
	c.Put("after", "3")
	members := []ids.NodeID{}
	for n := ids.NodeID(1); n <= 3; n++ {
		if n != removed {
			members = append(members, n)
		}
	}
	members = append(members, added)
	c.WaitValue("after", "3", members...)
	for _, k := range []string{"before", "during0", "during4"} {
		v, _ := c.Get(leader, k)
		c.WaitValue(k, v, members...)
	}
	for _, n := range members {
		i, _ := c.Node(n).Host.Info(1)
		got := map[ids.ReplicaID]ids.NodeID{}
		for _, r := range i.Desc.GetReplicas() {
			got[ids.ReplicaID(r.GetReplicaId())] = ids.NodeID(r.GetNodeId())
		}
		if len(got) != 3 || got[4] != added || got[removedReplica] != 0 || i.Desc.GetEpoch() < 2 {
			t.Fatalf("node %d's descriptor %v, want replica 4 on node %d in place of %d", n, i.Desc, added, removed)
		}
	}
	c.RunUntil("the removed replica to be destroyed", 300, func() bool {
		_, ok := c.Node(removed).Host.Info(1)
		return !ok
	})
}

// TestRestartFromDisk protects recovery: a follower restarted from its
// engine keeps its data and rejoins, catching up on what it missed; then
// the whole cluster restarts, elects a leader, still holds everything,
// re-applies nothing (applied index unchanged) and takes new writes.
func TestRestartFromDisk(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("a", "1")
	f := leader%3 + 1
	c.WaitValue("a", "1", f)
	c.Stop(f)
	c.Put("b", "2")
	c.Start(f)
	if v, ok := c.Get(f, "a"); !ok || v != "1" {
		t.Fatalf("node %d lost a=1 across its restart (got %q, %v)", f, v, ok)
	}
	c.WaitValue("b", "2", f)
	applied := map[ids.NodeID]uint64{}
	c.RunUntil("every replica to apply the same index", 100, func() bool {
		i1, _ := c.Node(1).Host.Info(1)
		for n := ids.NodeID(1); n <= 3; n++ {
			i, _ := c.Node(n).Host.Info(1)
			applied[n] = i.Applied
		}
		return applied[1] == i1.Commit && applied[2] == applied[1] && applied[3] == applied[1]
	})
	for n := ids.NodeID(1); n <= 3; n++ {
		var as storepb.AppliedState
		if _, err := c.Node(n).Engine.GetProto(keys.Applied(1), &as); err != nil || as.GetIndex() != applied[n] {
			t.Fatalf("node %d stored applied index %d (%v), want %d: it must be written with the data", n, as.GetIndex(), err, applied[n])
		}
		c.Stop(n)
	}
	for n := ids.NodeID(1); n <= 3; n++ {
		c.Start(n)
		if i, _ := c.Node(n).Host.Info(1); i.Applied != applied[n] {
			t.Fatalf("node %d restarted at applied %d, want %d", n, i.Applied, applied[n])
		}
	}
	c.Put("c", "3")
	for k, v := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		c.WaitValue(k, v, 1, 2, 3)
	}
}

// TestDelayedMessages protects progress on a slow network: with every
// message held back for two ticks (a fifth of the election timeout), the
// cluster still elects a leader and commits writes.
func TestDelayedMessages(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	c.Net.SetDelay(2)
	c.Put("k", "v")
	c.WaitValue("k", "v", 1, 2, 3)
}

// TestPowerCutKeepsAcknowledgedWrites protects "persist before you
// acknowledge": writes acknowledged before every node loses power at once
// (each disk keeps only what was synced) are all there after the restart.
// A loop that acknowledged before its fsync (the ack-before-fsync mutant,
// make robustness-mutants) loses them; a process kill cannot show that,
// since the page cache survives it.
func TestPowerCutKeepsAcknowledgedWrites(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{PowerCuts: true})
	c.WaitLeader(1)
	want := map[string]string{}
	for i := 0; i < 20; i++ {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
		c.Put(k, v)
		want[k] = v
	}
	for n := ids.NodeID(1); n <= 3; n++ {
		c.PowerCut(n)
	}
	for n := ids.NodeID(1); n <= 3; n++ {
		c.Start(n)
	}
	c.WaitLeader(1)
	c.Put("after", "1") // commits everything the new leader holds
	c.WaitValue("after", "1", 1, 2, 3)
	var lost []string
	for k, v := range want {
		for n := ids.NodeID(1); n <= 3; n++ {
			if got, ok := c.Get(n, k); !ok || got != v {
				lost = append(lost, fmt.Sprintf("%s on node %d", k, n))
			}
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d acknowledged writes lost in a power cut, e.g. %v", len(lost), lost[:min(5, len(lost))])
	}
}
