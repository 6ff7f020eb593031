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
	"github.com/concord-kv/concord/client"
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
	// The placement scheduler runs too and may promote the caught-up learner
	// first: then this promotion is refused (the epoch moved on) and the
	// outcome is the same.
	d = changeUnlessDone(t, c, cl, &concordpb.ChangeReplicasRequest{ShardId: shard, Kind: concordpb.ChangeKind_CHANGE_PROMOTE,
		ReplicaId: learner.GetReplicaId(), PlannedEpoch: d.GetEpoch()}, func(d *concordpb.ShardDescriptor) bool {
		for _, r := range d.GetReplicas() {
			if r.GetReplicaId() == learner.GetReplicaId() {
				return r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER
			}
		}
		return false
	})
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
	if victim == nil {
		t.Fatalf("no follower voter to remove in %v", d)
	}
	// The scheduler may remove the excess voter first (then the shard has
	// its three replicas and this removal is refused).
	d = changeUnlessDone(t, c, cl, &concordpb.ChangeReplicasRequest{ShardId: shard, Kind: concordpb.ChangeKind_CHANGE_REMOVE,
		ReplicaId: victim.GetReplicaId(), PlannedEpoch: d.GetEpoch()}, func(d *concordpb.ShardDescriptor) bool {
		return len(d.GetReplicas()) == 3
	})
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
	var outside uint64
	for id := range idx {
		held := false
		for _, r := range shardDescAt(t, c, shard, idx[spare]).GetReplicas() {
			held = held || r.GetNodeId() == id
		}
		if !held {
			outside = id
		}
	}
	out, err = exec.CommandContext(ctx, testcluster.Binary(t), "leader", "transfer", strconv.Itoa(shard),
		strconv.FormatUint(outside, 10), "--endpoints", c.Addr(0)).CombinedOutput()
	if err == nil {
		t.Fatalf("leader transfer to node %d, which holds no replica, succeeded: %s", outside, out)
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

// changeUnlessDone makes change req, or, if the leader refuses it because
// the shard changed meanwhile (the placement scheduler acts too), checks
// that done holds for the shard's current descriptor; it returns that.
func changeUnlessDone(t *testing.T, c *testcluster.Cluster, cl *client.Client, req *concordpb.ChangeReplicasRequest, done func(*concordpb.ShardDescriptor) bool) *concordpb.ShardDescriptor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cl.ChangeReplicas(ctx, req)
	if err == nil {
		return resp.GetShard()
	}
	if code := status.Code(err); code != codes.Aborted && code != codes.FailedPrecondition {
		t.Fatalf("ChangeReplicas %v: %v", req, err)
	}
	var d *concordpb.ShardDescriptor
	testcluster.WaitFor(t, 20*time.Second, func() error {
		leader, err := c.Leader(ctx, req.GetShardId())
		if err != nil {
			return err
		}
		if d = shardDescAt(t, c, req.GetShardId(), leader); !done(d) {
			return fmt.Errorf("ChangeReplicas %v refused (%v) and not done otherwise: %v", req, err, d)
		}
		return nil
	})
	t.Logf("ChangeReplicas %v refused (%v); the scheduler had made it", req, err)
	return d
}

// shardDescAt returns shard's descriptor from node i's routing table.
func shardDescAt(t *testing.T, c *testcluster.Cluster, shard uint64, i int) *concordpb.ShardDescriptor {
	t.Helper()
	rt, err := c.RoutingTable(context.Background(), i)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rt.GetShards() {
		if s.GetShard().GetShardId() == shard {
			return s.GetShard()
		}
	}
	t.Fatalf("no shard %d in node %d's routing table", shard, i)
	return nil
}
