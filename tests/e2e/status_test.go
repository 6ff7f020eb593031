package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestStatusRightAfterPlacementLeaderKilled: a status asked at once after
// kill -9 of the placement leader's node (the node that answers a
// linearizable status) is answered, by another node, once the meta shard
// has elected a new leader: the client asks the nodes again while they
// all answer Unavailable, instead of failing on the first round (which
// `concord status` right after a crash did, and TestSnapshotCatchUp with
// it, when the node it stopped led placement).
func TestStatusRightAfterPlacementLeaderKilled(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := st.GetAnsweredByNodeId()
	victim := -1
	for _, ns := range st.GetNodes() {
		if ns.GetNode().GetNodeId() == leader {
			victim = c.Index(ns.GetNode().GetAddress())
		}
	}
	if victim < 0 {
		t.Fatalf("status answered by node %d, which it does not list: %v", leader, st)
	}
	c.Kill(victim)
	killed := time.Now()
	st, err = cl.Status(ctx)
	if err != nil {
		t.Fatalf("status %v after the placement leader (node %d) was killed: %v", time.Since(killed).Round(time.Millisecond), leader, err)
	}
	if st.GetAnsweredByNodeId() == leader {
		t.Fatalf("status answered by node %d, which was killed", leader)
	}
	t.Logf("answered by node %d, %v after node %d was killed", st.GetAnsweredByNodeId(), time.Since(killed).Round(time.Millisecond), leader)
}
