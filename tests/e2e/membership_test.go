package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestMembershipChangesUnderLoad: on a 4-node cluster (3 replicas per
// shard) with a client writing throughout, a shard gains a learner on the
// node without a replica (ChangeReplicas CHANGE_ADD_LEARNER), which catches
// up; it is promoted, a follower voter is removed, `concord leader transfer`
// hands the shard to the new replica, and a change planned at an old epoch
// is refused with ABORTED. Every acknowledged write reads back.
func TestMembershipChangesUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Nodes: 4, Shards: 4, Replicas: 3})
	ctx := context.Background()
	cl := c.Client(t)
	const shard = 2
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	probe := testcluster.KeyInShard(rt, shard, "probe-")
	if _, _, err := cl.Put(ctx, probe, []byte("p")); err != nil {
		t.Fatal(err)
	}
	desc := shardDesc(t, c, shard)
	idx := map[uint64]int{} // node id -> index
	for i := range c.N() {
		id, err := c.NodeID(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		idx[id] = i
	}
	holds := map[uint64]bool{}
	for _, r := range desc.GetReplicas() {
		holds[r.GetNodeId()] = true
	}
	var spare uint64
	for id := range idx {
		if !holds[id] {
			spare = id
		}
	}
	if spare == 0 {
		t.Fatalf("every node holds shard %d: %v", shard, desc)
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	b := startBurst(wctx, cl, seqKeys("member-", 100000), valueOf, 4, 5*time.Second)
	waitAcked(t, b, 50, 30*time.Second)

	change := func(req *concordpb.ChangeReplicasRequest) *concordpb.ShardDescriptor {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := cl.ChangeReplicas(cctx, req)
		if err != nil {
			t.Fatalf("ChangeReplicas %v: %v", req, err)
		}
		return resp.GetShard()
	}
	d := change(&concordpb.ChangeReplicasRequest{ShardId: shard, Kind: concordpb.ChangeKind_CHANGE_ADD_LEARNER,
		AddNodeId: spare, PlannedEpoch: desc.GetEpoch()})
	learner := d.GetReplicas()[len(d.GetReplicas())-1]
	if learner.GetNodeId() != spare || learner.GetRole() != concordpb.ReplicaRole_REPLICA_LEARNER {
		t.Fatalf("descriptor after adding a learner: %v", d)
	}
	// Caught up: the spare node serves the probe from its own replica.
	testcluster.WaitFor(t, 30*time.Second, func() error {
		resp, err := c.StaleGet(ctx, idx[spare], probe)
		if err != nil {
			return err
		}
		if resp.GetHeader().GetServedByNodeId() != spare || string(resp.GetValue()) != "p" {
			return fmt.Errorf("stale read on the learner's node: %v", resp)
		}
		return nil
	})
	_, err = cl.ChangeReplicas(ctx, &concordpb.ChangeReplicasRequest{ShardId: shard, Kind: concordpb.ChangeKind_CHANGE_PROMOTE,
		ReplicaId: learner.GetReplicaId(), PlannedEpoch: desc.GetEpoch()})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("promotion planned at the old epoch: %v, want Aborted", err)
	}
	d = change(&concordpb.ChangeReplicasRequest{ShardId: shard, Kind: concordpb.ChangeKind_CHANGE_PROMOTE,
		ReplicaId: learner.GetReplicaId(), PlannedEpoch: d.GetEpoch()})
	leaderNode := uint64(0)
	if li := c.LeaderOf(t, shard, 10*time.Second); li >= 0 {
		leaderNode, _ = c.NodeID(ctx, li)
	}
	var victim *concordpb.ReplicaDescriptor
	for _, r := range d.GetReplicas() {
		if r.GetNodeId() != leaderNode && r.GetNodeId() != spare {
			victim = r
		}
	}
	d = change(&concordpb.ChangeReplicasRequest{ShardId: shard, Kind: concordpb.ChangeKind_CHANGE_REMOVE,
		ReplicaId: victim.GetReplicaId(), PlannedEpoch: d.GetEpoch()})
	if len(d.GetReplicas()) != 3 {
		t.Fatalf("descriptor after the removal: %v", d)
	}

	out, err := exec.CommandContext(ctx, testcluster.Binary(t), "leader", "transfer", strconv.Itoa(shard),
		strconv.FormatUint(spare, 10), "--endpoints", c.Addr(0), "--timeout", "20s").CombinedOutput()
	if err != nil {
		t.Fatalf("concord leader transfer: %v: %s", err, out)
	}
	t.Logf("concord leader transfer: %s", out)
	testcluster.WaitFor(t, 10*time.Second, func() error {
		l, err := c.Leader(ctx, shard)
		if err != nil {
			return err
		}
		if l != idx[spare] {
			return fmt.Errorf("shard %d led by node index %d, want %d", shard, l, idx[spare])
		}
		return nil
	})
	out, err = exec.CommandContext(ctx, testcluster.Binary(t), "leader", "transfer", strconv.Itoa(shard),
		strconv.FormatUint(victim.GetNodeId(), 10), "--endpoints", c.Addr(0)).CombinedOutput()
	if err == nil {
		t.Fatalf("leader transfer to a node without a replica succeeded: %s", out)
	}

	waitAcked(t, b, b.acked.Load()+50, 30*time.Second)
	stop()
	acked := b.wait()
	t.Logf("%d writes acknowledged, %d failed during the changes (first: %v)", len(acked), b.failed.Load(), b.err())
	for k, v := range acked {
		got, found, err := cl.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged write %q=%q reads back %q (found %v, err %v)", k, v, got, found, err)
		}
	}
}

// shardDesc returns shard's descriptor from node 0's routing table.
func shardDesc(t *testing.T, c *testcluster.Cluster, shard uint64) *concordpb.ShardDescriptor {
	t.Helper()
	rt, err := c.RoutingTable(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rt.GetShards() {
		if s.GetShard().GetShardId() == shard {
			return s.GetShard()
		}
	}
	t.Fatalf("no shard %d in the routing table", shard)
	return nil
}
