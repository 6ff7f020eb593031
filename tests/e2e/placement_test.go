package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

// quietEnv sets how long TestRebalanceAcrossPlacementLeaderKill watches
// the balanced cluster for moves (default 30 s; make test-no-thrash runs
// the ten minutes).
const quietEnv = "CONCORD_QUIET_FOR"

// TestRebalanceAcrossPlacementLeaderKill: on 4 nodes with a client
// writing throughout, a fifth node joins and the scheduler starts moving
// replicas onto it; the placement leader is killed with SIGKILL in the
// middle of that rebalance, a new placement leader carries on (it executes
// scheduler steps) and, with the killed node restarted, the cluster ends
// balanced: every shard with its replicas and no learner, replica and
// leader counts per node within one of the mean. Then the balanced cluster,
// under the same steady writes, makes no move at all for 30 s
// ($CONCORD_QUIET_FOR): no scheduler step on any node, no descriptor epoch
// changes. Every acknowledged write reads back.
func TestRebalanceAcrossPlacementLeaderKill(t *testing.T) {
	t.Parallel()
	quiet := 30 * time.Second
	if v := os.Getenv(quietEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", quietEnv, err)
		}
		quiet = d
	}
	// One move per node at a time, and snapshots paced at 1 MiB/s over
	// 12 MiB of data: the joiner takes its replicas one after another, each
	// a snapshot of about 0.7 MiB, so the rebalance lasts several seconds
	// (about one without the limits) and the kill lands in the middle of it.
	c := startCluster(t, testcluster.Options{Nodes: 4, ExtraArgs: []string{"--max-moves-per-node", "1", "--snapshot-rate-mib", "1"}})
	ctx := context.Background()
	cl := c.Client(t)
	bulk := preload(t, cl, "bulk-", 3000, 4<<10)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	b := startBurst(wctx, cl, seqKeys("rebalance-", 10_000_000), valueOf, 2, 5*time.Second)
	waitAcked(t, b, 100, 30*time.Second)

	j := c.AddJoiner([]int{1})
	var jid uint64
	var atKill *concordpb.StatusResponse
	testcluster.WaitFor(t, 60*time.Second, func() error {
		var err error
		if jid, err = c.NodeID(ctx, j); err != nil {
			return err
		}
		if atKill, err = placementStatus(c); err != nil {
			return err
		}
		if on := userReplicasOn(atKill, jid); len(on) == 0 {
			return fmt.Errorf("the joiner (node %d) holds no replica of a user shard yet", jid)
		}
		if metaLeader(atKill) == 0 {
			// Leaders are balanced while replicas move, the meta shard's
			// too: just after a transfer, until the new leader's next
			// heartbeat, the status names none.
			return fmt.Errorf("the status names no placement leader")
		}
		if metaLeader(atKill) == jid {
			// Leaders move while replicas do, so the joiner may lead the
			// meta shard. Killing it would leave nothing to carry on (every
			// move under way targets it) until dead-after: hand the meta
			// shard to an old node and look again.
			moveMetaOff(ctx, cl, atKill, jid)
			return fmt.Errorf("the joiner (node %d) leads the meta shard; moving it off", jid)
		}
		return nil
	})
	if err := balanced(atKill); err == nil {
		t.Fatalf("the cluster was balanced before the kill: the test did not kill in the middle of a rebalance")
	}
	old := indexOf(t, c, metaLeader(atKill))
	marks := make([]int64, c.N())
	for i := range marks {
		marks[i] = c.LogMark(i)
	}
	t.Logf("rebalance under way (joiner node %d holds user shards %v); killing the placement leader, node %d (index %d)",
		jid, userReplicasOn(atKill, jid), metaLeader(atKill), old)
	c.Kill(old)
	testcluster.WaitFor(t, 60*time.Second, func() error {
		for i := range marks {
			if i != old && strings.Contains(c.LogSince(i, marks[i]), "scheduler step done") {
				t.Logf("node index %d took over as placement leader and executes scheduler steps", i)
				return nil
			}
		}
		return fmt.Errorf("no other node has executed a scheduler step since the placement leader was killed")
	})
	c.Start(old)
	d := testcluster.WaitFor(t, 3*time.Minute, func() error {
		st, err := placementStatus(c)
		if err != nil {
			return err
		}
		return balanced(st)
	})
	t.Logf("balanced %v after the restart; %d writes acknowledged so far", d.Round(time.Millisecond), b.acked.Load())

	waitStepsIdle(t, c, 12*time.Second)
	watchQuiet(t, c, b, quiet)
	stop()
	acked := b.wait()
	t.Logf("%d writes acknowledged, %d failed (first: %v)", len(acked), b.failed.Load(), b.err())
	for k, v := range bulk {
		acked[k] = v
	}
	for k, v := range acked {
		got, found, err := cl.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("acknowledged write %q=%q reads back %q (found %v, err %v)", k, v, got, found, err)
		}
	}
}

// watchQuiet checks that the balanced cluster makes no move for d while b
// keeps writing: no node logs a scheduler step, and no shard's descriptor
// epoch changes (every membership change bumps it).
func watchQuiet(t *testing.T, c *testcluster.Cluster, b *burst, d time.Duration) {
	t.Helper()
	before, err := placementStatus(c)
	if err != nil {
		t.Fatal(err)
	}
	epochs := map[uint64]uint64{}
	for _, ss := range before.GetShards() {
		epochs[ss.GetShard().GetShardId()] = ss.GetShard().GetEpoch()
	}
	marks := make([]int64, c.N())
	for i := range marks {
		marks[i] = c.LogMark(i)
	}
	acked := b.acked.Load()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		for i := range marks {
			if log := c.LogSince(i, marks[i]); strings.Contains(log, "scheduler step") {
				t.Fatalf("node index %d moved something in a balanced cluster:\n%s", i, grepLines(log, "scheduler step"))
			}
		}
		st, err := placementStatus(c)
		if err != nil {
			continue // a status call that times out under load says nothing about moves
		}
		for _, ss := range st.GetShards() {
			if e := epochs[ss.GetShard().GetShardId()]; e != ss.GetShard().GetEpoch() {
				t.Fatalf("shard %d's epoch went from %d to %d in a balanced cluster", ss.GetShard().GetShardId(), e, ss.GetShard().GetEpoch())
			}
		}
	}
	if got := b.acked.Load() - acked; got == 0 {
		t.Fatalf("no write was acknowledged while watching for moves: the cluster was not under load")
	} else {
		t.Logf("no move in %v while %d writes were acknowledged", d, got)
	}
}

// waitStepsIdle waits until no node has logged a scheduler step for idle
// (longer than a step's deadline): a step planned just before the cluster
// looked balanced (a leader transfer the elections after a restart made
// unnecessary, say) may still end, or fail, after it, and that is not a
// move in a balanced cluster.
func waitStepsIdle(t *testing.T, c *testcluster.Cluster, idle time.Duration) {
	t.Helper()
	marks := make([]int64, c.N())
	quietSince := time.Now()
	for i := range marks {
		marks[i] = c.LogMark(i)
	}
	testcluster.WaitFor(t, 2*time.Minute, func() error {
		for i := range marks {
			if strings.Contains(c.LogSince(i, marks[i]), "scheduler step") {
				marks[i], quietSince = c.LogMark(i), time.Now()
			}
		}
		if q := time.Since(quietSince); q < idle {
			return fmt.Errorf("no scheduler step for %v, waiting for %v", q.Round(time.Second), idle)
		}
		return nil
	})
}

// placementStatus is the placement leader's status, asked through any node.
func placementStatus(c *testcluster.Cluster) (*concordpb.StatusResponse, error) {
	var errs []string
	for i := 0; i < c.N(); i++ {
		if !c.Running(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := c.ClusterAPI(i).Status(ctx, &concordpb.StatusRequest{})
		cancel()
		if err == nil {
			return st, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("status: %s", strings.Join(errs, "; "))
}

// balanced reports why st is not balanced: a node not up, a shard with a
// learner or without its replicas or leader, or a node whose replica or
// leader count is not within one of the mean (|count·N − total| ≤ N, the
// scheduler's rule).
func balanced(st *concordpb.StatusResponse) error {
	var replicas, leaders []uint32
	var totalReplicas, totalLeaders uint32
	for _, ns := range st.GetNodes() {
		switch ns.GetNode().GetState() {
		case concordpb.NodeState_NODE_UP:
		case concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED:
			continue
		default:
			return fmt.Errorf("node %d is %v", ns.GetNode().GetNodeId(), ns.GetNode().GetState())
		}
		replicas, leaders = append(replicas, ns.GetReplicas()), append(leaders, ns.GetLeaders())
		totalReplicas += ns.GetReplicas()
		totalLeaders += ns.GetLeaders()
	}
	// The meta shard has five replicas from five live members on, the
	// others three (the cluster's R): a shard with one more is a move
	// whose removal is still to come.
	wantMeta := 3
	if len(replicas) >= 5 {
		wantMeta = 5
	}
	for _, ss := range st.GetShards() {
		want := 3
		if ss.GetIsMeta() {
			want = wantMeta
		}
		if n := len(ss.GetShard().GetReplicas()); n != want {
			return fmt.Errorf("shard %d has %d replicas, want %d", ss.GetShard().GetShardId(), n, want)
		}
		if ss.GetUnderReplicated() || ss.GetLeaderNodeId() == 0 {
			return fmt.Errorf("shard %d: under-replicated %v, leader %d", ss.GetShard().GetShardId(), ss.GetUnderReplicated(), ss.GetLeaderNodeId())
		}
		for _, r := range ss.GetShard().GetReplicas() {
			if r.GetRole() == concordpb.ReplicaRole_REPLICA_LEARNER {
				return fmt.Errorf("shard %d has a learner on node %d", ss.GetShard().GetShardId(), r.GetNodeId())
			}
		}
	}
	if !withinOne(replicas, totalReplicas) || !withinOne(leaders, totalLeaders) {
		return fmt.Errorf("not within one of the mean: replicas per node %v, leaders per node %v", replicas, leaders)
	}
	return nil
}

func withinOne(counts []uint32, total uint32) bool {
	n := int64(len(counts))
	for _, c := range counts {
		if d := int64(c)*n - int64(total); d > n || d < -n {
			return false
		}
	}
	return true
}

// userReplicasOn returns the user shards with a replica (of any role) on
// node id.
func userReplicasOn(st *concordpb.StatusResponse, id uint64) []uint64 {
	var out []uint64
	for _, ss := range st.GetShards() {
		for _, r := range ss.GetShard().GetReplicas() {
			if !ss.GetIsMeta() && r.GetNodeId() == id {
				out = append(out, ss.GetShard().GetShardId())
			}
		}
	}
	return out
}

// preload writes n keys of size bytes each (16 writers) and returns them;
// any failed write fails the test.
func preload(t *testing.T, cl *client.Client, prefix string, n, size int) map[string]string {
	t.Helper()
	out := make(map[string]string, n)
	keys := make(chan string, n)
	for i := range n {
		k := fmt.Sprintf("%s%06d", prefix, i)
		out[k] = fmt.Sprintf("%s-%0*d", k, size, i)
		keys <- k
	}
	close(keys)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for k := range keys {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _, err := cl.Put(ctx, []byte(k), []byte(out[k]))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("preload %s: %w", k, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// moveMetaOff asks for the meta shard's leadership to move from node off
// to another voter of it; an error only means the next look tries again.
func moveMetaOff(ctx context.Context, cl *client.Client, st *concordpb.StatusResponse, off uint64) {
	for _, ss := range st.GetShards() {
		if !ss.GetIsMeta() {
			continue
		}
		for _, r := range ss.GetShard().GetReplicas() {
			if r.GetNodeId() != off && r.GetRole() == concordpb.ReplicaRole_REPLICA_VOTER {
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = cl.TransferLeader(tctx, ss.GetShard().GetShardId(), r.GetNodeId())
				cancel()
				return
			}
		}
	}
}

// metaLeader is the node id leading the meta shard: the placement leader.
func metaLeader(st *concordpb.StatusResponse) uint64 {
	for _, ss := range st.GetShards() {
		if ss.GetIsMeta() {
			return ss.GetLeaderNodeId()
		}
	}
	return 0
}

// indexOf is the index of the running node with id.
func indexOf(t *testing.T, c *testcluster.Cluster, id uint64) int {
	t.Helper()
	for i := 0; i < c.N(); i++ {
		if got, err := c.NodeID(context.Background(), i); err == nil && got == id {
			return i
		}
	}
	t.Fatalf("no running node has id %d", id)
	return -1
}

// grepLines returns log's lines that contain s.
func grepLines(log, s string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
