package multiraftest_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/storage"
)

// TestCrashAfterApplyingOwnRemoval protects the removal of a replica whose
// node crashes after the batch that applied the removal committed, before
// the replica was destroyed (tombstone, data). On restart the replica finds
// its own removal applied: it must destroy itself then. Kept instead, it is
// a member of nothing for good: no leader contacts it, and the stray
// collector spares it too, since placement's descriptor is no newer than
// the one the replica applied.
func TestCrashAfterApplyingOwnRemoval(t *testing.T) {
	var view atomic.Pointer[concordpb.ShardDescriptor]
	c := multiraftest.New(t, multiraftest.Options{Nodes: 4, PowerCuts: true, Configure: func(cfg *multiraft.Config) {
		cfg.Placement = func(ids.ShardID) (*concordpb.ShardDescriptor, bool) {
			d := view.Load()
			return d, d != nil
		}
	}})
	leader := c.WaitLeader(1)
	view.Store(descOf(c, leader))
	c.Put("before", "v")
	removed := others(leader, 4)[0]
	c.WaitValue("before", "v", removed)

	// Crash the removed node right after the turn that applied its removal
	// committed: its late messages are flushed before it destroys the
	// replica.
	var imaged atomic.Bool
	c.Net.OnFlush(func(from, _ ids.NodeID, _ []*concordpb.RaftEnvelope) {
		if from != removed || imaged.Load() {
			return
		}
		eng := c.Node(removed).Engine
		d := &concordpb.ShardDescriptor{}
		if found, err := eng.GetProto(keys.Descriptor(1), d); err != nil || !found {
			return
		}
		if _, listed := roleOf(d, ids.ReplicaID(removed)); listed {
			return
		}
		if err := eng.Flush(); err != nil { // the committed batch, durable
			t.Error(err)
			return
		}
		c.CrashImage(removed)
		imaged.Store(true)
	})
	d, err := run(t, c, c.Node(leader).Host, "the removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(removed), 0)
	})
	if err != nil {
		t.Fatalf("RemoveReplica: %v", err)
	}
	view.Store(d) // placement has caught up with the removal
	c.RunUntil("the removed node to apply its removal", 300, imaged.Load)
	c.Net.OnFlush(nil)
	c.PowerCut(removed)
	c.Start(removed)
	if i, ok := c.Node(removed).Host.Info(1); ok {
		if _, listed := roleOf(i.Desc, ids.ReplicaID(removed)); listed {
			t.Fatal("the restarted replica had not applied its removal: the test proves nothing")
		}
	}

	c.Put("after", "v")
	c.RunUntil("the removed replica to be destroyed after the restart", 300, func() bool {
		_, ok := c.Node(removed).Host.Info(1)
		return !ok
	})
	if _, found := c.Get(removed, "before"); found {
		t.Fatal("the removed replica's data survived")
	}
	if tomb, err := c.Node(removed).Engine.Tombstone(1); err != nil || tomb != ids.ReplicaID(removed) {
		t.Fatalf("tombstone %d (%v), want %d", tomb, err, removed)
	}
}

// TestCrashBetweenTombstoneAndDataRemoval protects a node that crashed
// while destroying a replica, after the tombstone (and the hosted record's
// removal) was durable and before the shard's data was excised: on restart
// the node hosts no replica of the shard, so the data is nobody's, and it
// must go; and the shard added back on the node later must start from an
// empty replica, not from the leftovers.
func TestCrashBetweenTombstoneAndDataRemoval(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 4, PowerCuts: true})
	leader := c.WaitLeader(1)
	c.Put("before", "v")
	victim := others(leader, 4)[0]
	c.WaitValue("before", "v", victim)
	c.Cut(victim)
	if _, err := run(t, c, c.Node(leader).Host, "the removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.RemoveReplica(ctx, 1, 0, ids.ReplicaID(victim), 0)
	}); err != nil {
		t.Fatalf("RemoveReplica: %v", err)
	}

	// The first, durable step of storage.DestroyReplica (as the stray
	// collector runs it), then the crash before the excise.
	eng := c.Node(victim).Engine
	b := eng.NewBatch()
	if err := b.Set(keys.Tombstone(1), binary.BigEndian.AppendUint64(nil, uint64(victim)), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(keys.Hosted(1), nil); err != nil {
		t.Fatal(err)
	}
	if err := storage.Commit(b, true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c.PowerCut(victim)
	c.Heal(victim)
	c.Start(victim)
	if _, ok := c.Node(victim).Host.Info(1); ok {
		t.Fatal("the restarted node hosts the replica it tombstoned")
	}
	if _, found := c.Get(victim, "before"); found {
		t.Fatal("the data of a replica the node no longer hosts survived the restart")
	}

	c.Put("later", "v")
	if _, err := run(t, c, c.Node(c.WaitLeader(1)).Host, "the shard's return to the node", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
		return h.AddLearner(ctx, 1, 0, victim)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.Put("after", "v")
	c.WaitValue("after", "v", victim)
	c.WaitValue("later", "v", victim)
	c.WaitValue("before", "v", victim)
}

// TestRemoveAndReAddAcrossPowerCuts protects a shard's replica removed from
// a node and added back, again and again, with the node's power cut after
// each step: each incarnation is destroyed (tombstoned above the last),
// the next one starts empty and catches up by snapshot (the log is
// truncated far past it), and every acknowledged write is on it, also
// after a power cut.
func TestRemoveAndReAddAcrossPowerCuts(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 4, Replicas: 3, PowerCuts: true, Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	var victim ids.NodeID
	for _, r := range descOf(c, leader).GetReplicas() {
		if n := ids.NodeID(r.GetNodeId()); n != leader {
			victim = n
		}
	}
	replicaOn := func(n ids.NodeID) ids.ReplicaID {
		for _, r := range descOf(c, c.WaitLeader(1)).GetReplicas() {
			if ids.NodeID(r.GetNodeId()) == n {
				return ids.ReplicaID(r.GetReplicaId())
			}
		}
		return 0
	}
	acked := putAll(c, "a", 10)
	for round := range 3 {
		old := replicaOn(victim)
		if _, err := run(t, c, c.Node(c.WaitLeader(1)).Host, "the removal", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
			return h.RemoveReplica(ctx, 1, 0, old, 0)
		}); err != nil {
			t.Fatalf("round %d: RemoveReplica(%d): %v", round, old, err)
		}
		acked = append(acked, putAll(c, fmt.Sprintf("r%d-", round), 10)...)
		c.RunUntil("the removed replica to be destroyed", 300, func() bool {
			_, ok := c.Node(victim).Host.Info(1)
			return !ok
		})
		c.PowerCut(victim)
		c.Start(victim)
		if tomb, err := c.Node(victim).Engine.Tombstone(1); err != nil || tomb != old {
			t.Fatalf("round %d: tombstone %d (%v), want %d", round, tomb, err, old)
		}
		if _, found := c.Get(victim, "a0"); found {
			t.Fatalf("round %d: the destroyed replica's data survived", round)
		}
		if _, err := run(t, c, c.Node(c.WaitLeader(1)).Host, "the re-addition", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
			return h.AddLearner(ctx, 1, 0, victim)
		}); err != nil {
			t.Fatalf("round %d: AddLearner: %v", round, err)
		}
		acked = append(acked, putAll(c, fmt.Sprintf("s%d-", round), 10)...)
		waitAll(c, acked, victim)
		if i, _ := c.Node(victim).Host.Info(1); i.ReplicaID <= old {
			t.Fatalf("round %d: replica %d on the node, want one above %d", round, i.ReplicaID, old)
		}
		c.PowerCut(victim)
		c.Start(victim)
		acked = append(acked, putAll(c, fmt.Sprintf("t%d-", round), 10)...)
		waitAll(c, acked, victim)
		if _, err := run(t, c, c.Node(c.WaitLeader(1)).Host, "the promotion", func(ctx context.Context, h *multiraft.Host) (*concordpb.ShardDescriptor, error) {
			return h.PromoteLearner(ctx, 1, 0, replicaOn(victim))
		}); err != nil {
			t.Fatalf("round %d: PromoteLearner: %v", round, err)
		}
	}
}
