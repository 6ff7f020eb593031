package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestWipedNodeRejoinsAsNewNode: a node that lost its data dir and restarts
// with the same address and peers must not reuse its old identity (its old
// votes and acknowledgements are forgotten). It joins as a new node id, the
// old id is marked REPLACED, each of its replicas is replaced by one with a
// replica id never used before, and the new replicas are rebuilt by snapshot
// with everything written before and after the wipe.
func TestWipedNodeRejoinsAsNewNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	const victim = 2
	want := map[string]string{}
	write := func(keys []string) {
		t.Helper()
		b := startBurst(ctx, cl, keys, valueOf, 4, 30*time.Second)
		if len(b.wait()) != len(keys) {
			t.Fatalf("writes failed: %v", b.err())
		}
		for _, k := range keys {
			want[k] = valueOf(k)
		}
	}
	write(seqKeys("wipe-before-", 300))

	oldID, err := c.NodeID(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every replica id each shard has used so far, and its next id.
	oldReplicas := map[uint64]map[uint64]bool{}
	oldNext := map[uint64]uint64{}
	for _, s := range st.GetShards() {
		d := s.GetShard()
		oldReplicas[d.GetShardId()] = map[uint64]bool{}
		for _, r := range d.GetReplicas() {
			oldReplicas[d.GetShardId()][r.GetReplicaId()] = true
		}
		oldNext[d.GetShardId()] = d.GetNextReplicaId()
	}
	if len(oldReplicas) != testcluster.DefaultShards+1 {
		t.Fatalf("status lists %d shards, want %d user shards and the meta shard", len(oldReplicas), testcluster.DefaultShards)
	}

	c.Kill(victim)
	c.Wipe(victim)
	write(seqKeys("wipe-during-", 300))
	mark := c.LogMark(victim)
	peerMarks := map[int]int64{}
	for i := range c.N() {
		if i != victim {
			peerMarks[i] = c.LogMark(i)
		}
	}
	c.Start(victim)
	restarted := time.Now()

	// A new node id at the same address; the old one REPLACED by it.
	var newID uint64
	testcluster.WaitFor(t, 60*time.Second, func() error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		newID = 0
		var old *concordpb.NodeDescriptor
		for _, ns := range st.GetNodes() {
			n := ns.GetNode()
			switch {
			case n.GetNodeId() == oldID:
				old = n
			case n.GetAddress() == c.Addr(victim) && n.GetState() == concordpb.NodeState_NODE_UP:
				newID = n.GetNodeId()
			}
		}
		switch {
		case newID == 0:
			return fmt.Errorf("no new up node at %s yet: %v", c.Addr(victim), st.GetNodes())
		case old.GetState() != concordpb.NodeState_NODE_REPLACED || old.GetReplacedBy() != newID:
			return fmt.Errorf("old node %d is %v (replaced by %d), want REPLACED by %d", oldID, old.GetState(), old.GetReplacedBy(), newID)
		}
		self, err := c.NodeID(ctx, victim)
		if err != nil || self != newID {
			return fmt.Errorf("node %d calls itself %d (%v), want %d", victim, self, err, newID)
		}
		return nil
	})
	if newID == oldID {
		t.Fatalf("the wiped node came back with its old id %d", oldID)
	}
	t.Logf("wiped node came back as node id %d (was %d)", newID, oldID)

	// Every shard, the meta shard too, swaps the old node's replica for a
	// replica on the new node with an id that never existed before.
	replaced := testcluster.WaitFor(t, 90*time.Second, func() error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		if len(st.GetShards()) != len(oldReplicas) {
			return fmt.Errorf("status lists %d shards, want %d", len(st.GetShards()), len(oldReplicas))
		}
		for _, s := range st.GetShards() {
			d := s.GetShard()
			var onNew []uint64
			for _, r := range d.GetReplicas() {
				switch r.GetNodeId() {
				case oldID:
					return fmt.Errorf("shard %d still has replica %d on the old node %d: %v", d.GetShardId(), r.GetReplicaId(), oldID, d.GetReplicas())
				case newID:
					onNew = append(onNew, r.GetReplicaId())
				}
			}
			if len(onNew) != 1 {
				return fmt.Errorf("shard %d has replicas %v on the new node %d, want one: %v", d.GetShardId(), onNew, newID, d.GetReplicas())
			}
			if id := onNew[0]; oldReplicas[d.GetShardId()][id] || id < oldNext[d.GetShardId()] {
				t.Fatalf("shard %d reused replica id %d for the new node (ids before the wipe: %v, next id was %d)",
					d.GetShardId(), id, oldReplicas[d.GetShardId()], oldNext[d.GetShardId()])
			}
			if len(d.GetReplicas()) != 3 {
				return fmt.Errorf("shard %d has %d replicas, want 3: %v", d.GetShardId(), len(d.GetReplicas()), d.GetReplicas())
			}
		}
		return nil
	})
	t.Logf("all %d shards replaced their replica on the wiped node %v after its restart", len(oldReplicas), replaced.Round(time.Millisecond))
	// Once every peer has dropped its lanes to the REPLACED node (they
	// redialled its address for ever, every connection refused by the new
	// node), no peer sends anything for the old id to its address.
	dropped := fmt.Sprintf(`msg="raft peer dropped: the address book no longer lists it at this address (removed, replaced or moved)" peer=%d `, oldID)
	testcluster.WaitFor(t, 30*time.Second, func() error {
		for i, m := range peerMarks {
			if !strings.Contains(c.LogSince(i, m), dropped) {
				return fmt.Errorf("node %d has not dropped its raft peer for the replaced node %d", i, oldID)
			}
		}
		return nil
	})
	settled := c.LogMark(victim)

	write(seqKeys("wipe-after-", 100))
	caught := time.Now().Add(waitStaleHasAll(t, c, victim, want, 60*time.Second))
	t.Logf("wiped node holds all %d values %v after its restart", len(want), caught.Sub(restarted).Round(time.Millisecond))

	misaddressed := fmt.Sprintf("message for node %d reached node %d", oldID, newID)
	if n := strings.Count(c.LogSince(victim, settled), misaddressed); n > 0 {
		t.Errorf("the new node refused %d connections for the old node %d after the replacement (%q)", n, oldID, misaddressed)
	}
	log := c.LogSince(victim, mark)
	if !strings.Contains(log, "joined cluster as a new node") {
		t.Errorf("the wiped node's log does not say it joined as a new node")
	}
	shards := map[string]bool{}
	for _, m := range installedSnapshot.FindAllStringSubmatch(log, -1) {
		shards[m[1]] = true
	}
	if len(shards) != len(oldReplicas) {
		t.Errorf("the wiped node installed snapshots of %d shards, want all %d", len(shards), len(oldReplicas))
	}
}
