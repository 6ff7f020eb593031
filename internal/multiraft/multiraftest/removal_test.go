package multiraftest_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/storage"
)

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
	if _, err := run(t, c, "the removal", func(ctx context.Context) (*concordpb.ShardDescriptor, error) {
		return c.Node(leader).Host.RemoveReplica(ctx, 1, 0, ids.ReplicaID(victim))
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
	if _, err := run(t, c, "the shard's return to the node", func(ctx context.Context) (*concordpb.ShardDescriptor, error) {
		return c.Node(c.WaitLeader(1)).Host.AddLearner(ctx, 1, 0, victim)
	}); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
	c.Put("after", "v")
	c.WaitValue("after", "v", victim)
	c.WaitValue("later", "v", victim)
	c.WaitValue("before", "v", victim)
}
