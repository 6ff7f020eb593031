package grpcapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if st := status.Convert(err); st.Code() != code || st.Message() != msg {
		t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), code, msg)
	}
}

// TestWriteIsForwardedToTheLeader protects the path of a write that reaches
// a follower: it is proposed once, on the leader, with its session intact.
func TestWriteIsForwardedToTheLeader(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	serve(t, f2, f1)
	c1 := concordpb.NewKVClient(serve(t, f1, f2))
	resp, err := c1.Put(context.Background(), &concordpb.PutRequest{
		Header: &concordpb.RequestHeader{SessionId: 5, Seq: 1}, Key: []byte("k"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetHeader().GetServedByNodeId(); got != 2 {
		t.Fatalf("served by node %d, want 2", got)
	}
	if f1.proposalCount() != 0 || f2.proposalCount() != 1 {
		t.Fatalf("proposals: %d on the follower, %d on the leader; want 0 and 1", f1.proposalCount(), f2.proposalCount())
	}
	kv := f2.proposals[0].GetKv()
	if kv.GetSessionId() != 5 || kv.GetSeq() != 1 || string(kv.GetOps()[0].GetKey()) != "k" {
		t.Fatalf("leader proposed %v", kv)
	}
}

// TestStaleReadIsForwardedToAnyReplica protects that a node without a
// replica sends a stale read to one that has it (no leader needed, no read
// barrier), while a linearizable read without a known leader fails fast.
func TestStaleReadIsForwardedToAnyReplica(t *testing.T) {
	f1, f3 := newFakeNode(t, 1, 4, 0), newFakeNode(t, 3, 4, 0)
	shard := f1.shardOfKey("k")
	f1.data[shard] = []*concordpb.KeyValue{{Key: []byte("k"), Value: []byte("v1")}}
	serve(t, f1, f3)
	c3 := concordpb.NewKVClient(serve(t, f3, f1))
	ctx := context.Background()
	resp, err := c3.Get(ctx, &concordpb.GetRequest{Key: []byte("k"),
		Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.GetValue()) != "v1" || resp.GetHeader().GetServedByNodeId() != 1 || len(f1.readIndex) != 0 {
		t.Fatalf("got %q from node %d after %d barriers; want v1 from node 1 with none",
			resp.GetValue(), resp.GetHeader().GetServedByNodeId(), len(f1.readIndex))
	}
	_, err = c3.Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable, fmt.Sprintf("shard %d: no leader known yet (election in progress?)", shard))
}

// TestLinearizableReadWaitsForTheBarrier protects that a leader reads only
// after ReadIndex, and that a failed barrier is not an ambiguous outcome.
func TestLinearizableReadWaitsForTheBarrier(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	shard := f.shardOfKey("k")
	kv := NewKV(f, testLimits)
	if _, err := kv.Get(context.Background(), &concordpb.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if len(f.readIndex) != 1 || f.readIndex[0] != shard {
		t.Fatalf("barriers on shards %v, want [%d]", f.readIndex, shard)
	}
}

// TestBouncingRequestStopsAtTheHopLimit protects against two nodes with
// stale leader hints, each naming the other, forwarding a request forever.
func TestBouncingRequestStopsAtTheHopLimit(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 1)
	shard := f1.shardOfKey("k")
	serve(t, f2, f1)
	conn := serve(t, f1, f2)
	ctx := context.Background()
	want := fmt.Sprintf("shard %d: not the leader here, and the request was already forwarded 2 times", shard)
	_, err := concordpb.NewKVClient(conn).Put(ctx, &concordpb.PutRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable, want)
	_, err = concordpb.NewKVClient(conn).Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable, want)
	_, err = concordpb.NewClusterClient(conn).ChangeReplicas(ctx, &concordpb.ChangeReplicasRequest{ShardId: uint64(shard), RemoveReplicaId: 1, AddNodeId: 4})
	wantStatus(t, err, codes.Unavailable, "request already forwarded 2 times")
	if f1.proposalCount()+f2.proposalCount() != 0 {
		t.Fatal("a bounced request was proposed")
	}
}

// TestHeartbeatFindsThePlacementLeaderByHint protects that placement
// requests reach the placement leader even when this node does not know it.
func TestHeartbeatFindsThePlacementLeaderByHint(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 0), newFakeNode(t, 2, 4, 2)
	f1.hint = 2
	serve(t, f2, f1)
	c1 := concordpb.NewClusterClient(serve(t, f1, f2))
	resp, err := c1.Heartbeat(context.Background(), &concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: 7}})
	if err != nil {
		t.Fatal(err)
	}
	f2.mu.Lock()
	got := f2.heartbeats
	f2.mu.Unlock()
	if resp.GetMetaLeaderNodeId() != 2 || len(got) != 1 || got[0] != 7 {
		t.Fatalf("answered by %d; placement leader recorded %v", resp.GetMetaLeaderNodeId(), got)
	}
	f1.hint = 0
	_, err = NewCluster(f1).Heartbeat(context.Background(), &concordpb.HeartbeatRequest{})
	wantStatus(t, err, codes.Unavailable, "placement leader unknown")
}

// TestJoinTellsEveryNodeItPassesThrough protects the fast failover of a
// wiped leader: a join names an address whose old process is gone, and
// both the node the joiner asked (which forwards) and the placement leader
// must hear of it (AddressRejoining), so that their replicas led from
// there elect at once. A join without an address tells nobody anything.
func TestJoinTellsEveryNodeItPassesThrough(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	serve(t, f2, f1)
	c1 := concordpb.NewClusterClient(serve(t, f1, f2))
	if _, err := c1.Join(context.Background(), &concordpb.JoinRequest{Address: "10.0.0.3:7000", Version: uint32(version.Binary)}); err != nil {
		t.Fatal(err)
	}
	_, err := c1.Join(context.Background(), &concordpb.JoinRequest{})
	wantStatus(t, err, codes.InvalidArgument, "join needs the joining node's address")
	for _, f := range []*fakeNode{f1, f2} {
		f.mu.Lock()
		got := f.rejoining
		f.mu.Unlock()
		if len(got) != 1 || got[0] != "10.0.0.3:7000" {
			t.Fatalf("node %d was told of rejoining addresses %q, want [10.0.0.3:7000]", f.id, got)
		}
	}
}

// TestPartitionCutsNodeToNodeCallsOnly protects fault injection's contract:
// a partition refuses forwarding in both directions, while clients still
// reach the partitioned node.
func TestPartitionCutsNodeToNodeCallsOnly(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	f2.blocked[1] = true // node 2 refuses calls from node 1
	c2 := concordpb.NewKVClient(serve(t, f2, f1))
	c1 := concordpb.NewKVClient(serve(t, f1, f2))
	ctx := context.Background()
	_, err := c1.Put(ctx, &concordpb.PutRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable, "partitioned from node 1 (fault injection)")
	if _, err := c2.Put(ctx, &concordpb.PutRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("a client call to the partitioned node: %v", err)
	}
	f3 := newFakeNode(t, 3, 4, 2)
	f3.blocked[2] = true // node 3 will not even send to node 2
	f3.addrs[2] = "unused"
	_, err = NewKV(f3, testLimits).Put(ctx, &concordpb.PutRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable,
		fmt.Sprintf("shard %d: leader node 2 is cut off by a partition (fault injection)", f3.shardOfKey("k")))
}

// TestNothingButProbeBeforeReady protects a fresh node, which serves gRPC
// before it has an identity: it answers probes and refuses the rest.
func TestNothingButProbeBeforeReady(t *testing.T) {
	f := newFakeNode(t, 0, 4, 0)
	f.readyC = make(chan struct{})
	conn := serve(t, f)
	ctx := context.Background()
	_, err := concordpb.NewKVClient(conn).Get(ctx, &concordpb.GetRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unavailable, notReady)
	_, err = concordpb.NewClusterClient(conn).RoutingTable(ctx, &concordpb.RoutingTableRequest{})
	wantStatus(t, err, codes.Unavailable, notReady)
	if _, err := concordpb.NewClusterClient(conn).Probe(ctx, &concordpb.ProbeRequest{}); err != nil {
		t.Fatalf("probe before ready: %v", err)
	}
	st, err := concordpb.NewRaftTransportClient(conn).Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.CloseAndRecv()
	wantStatus(t, err, codes.Unavailable, "node not initialized yet")
}

// TestRequestsWaitForAnElection protects that a write or a linearizable read
// arriving while its shard has no known leader waits for the election
// (briefly) rather than failing at once: a Redis client, unlike the Go
// client, does not retry an Unavailable.
func TestRequestsWaitForAnElection(t *testing.T) {
	f := newFakeNode(t, 1, 4, 0)
	kv := NewKV(f, testLimits)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.electing = &election{calls: 5, leader: 1}
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("put during an election: %v, want it to wait for the leader", err)
	}
	f.electing = &election{calls: 5, leader: 1}
	if _, err := kv.Get(ctx, &concordpb.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("linearizable get during an election: %v, want it to wait for the leader", err)
	}
}

// TestDroppedProposalIsRetried protects writes across a leadership change:
// a proposal raft dropped (it never reached the log) is routed and proposed
// again instead of failing, while an error that may hide an applied write
// is returned as it is.
func TestDroppedProposalIsRetried(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	kv := NewKV(f, testLimits)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.dropFirst = 3
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("put whose first 3 proposals raft dropped: %v, want it retried", err)
	}
	if n := len(f.proposals); n != 4 {
		t.Fatalf("%d proposals, want 4 (3 dropped, then the one that applied)", n)
	}
	f.proposeErr = replica.ErrAmbiguous
	_, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if n := len(f.proposals); err == nil || n != 5 {
		t.Fatalf("ambiguous put: %v after %d proposals, want an error after exactly one more", err, n)
	}
}

// TestReadRetriedWhenLeadershipMoves protects linearizable reads across a
// leadership change: a barrier refused because this replica stopped leading
// is routed again (here it leads again) instead of failing the read.
func TestReadRetriedWhenLeadershipMoves(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	kv := NewKV(f, testLimits)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.lostFirst = 2
	if _, err := kv.Get(ctx, &concordpb.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("get whose first 2 barriers lost leadership: %v, want it routed again", err)
	}
	if n := len(f.readIndex); n != 3 {
		t.Fatalf("%d barriers, want 3", n)
	}
	f.lostFirst = 2
	if _, err := kv.Scan(ctx, &concordpb.ScanRequest{OnlyShard: uint64(f.shardOfKey("k"))}); err != nil {
		t.Fatalf("scan whose first 2 barriers lost leadership: %v, want it routed again", err)
	}
}

// TestReadOnlyBatchIsOneBarrierNotAProposal protects the read path of a
// batch of GETs (the Redis protocol's pipelined GETs): forwarded whole to
// the leader, served there after ONE read barrier for all its keys, never
// proposed, with each key's own result in order (an absent key not found,
// a repeated key found each time). A batch that writes, or carries a
// session, still goes through raft; a stale one needs no barrier.
func TestReadOnlyBatchIsOneBarrierNotAProposal(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	shard := f2.shardOfKey("k")
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("x%d", i); f2.shardOfKey(k) == shard {
			other = k
		}
	}
	f2.data[shard] = []*concordpb.KeyValue{{Key: []byte("k"), Value: []byte("v1")}}
	f2.expiry = map[string]int64{"k": 12345}
	serve(t, f2, f1)
	c1 := concordpb.NewKVClient(serve(t, f1, f2))
	ctx := context.Background()
	get := func(k string) *concordpb.Op { return &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte(k)} }
	resp, err := c1.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{get("k"), get(other), get("k")}})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.GetResults()
	if len(res) != 3 || !res[0].GetOk() || string(res[0].GetValue()) != "v1" || res[0].GetExpireAtUnixMs() != 12345 ||
		res[1].GetOk() || !res[2].GetOk() || string(res[2].GetValue()) != "v1" {
		t.Fatalf("results %v; want v1 (expiry 12345), absent, v1", res)
	}
	if resp.GetHeader().GetServedByNodeId() != 2 || len(f2.readIndex) != 1 || len(f1.readIndex) != 0 {
		t.Fatalf("served by node %d after barriers %v (leader), %v (follower); want node 2 after one on the leader",
			resp.GetHeader().GetServedByNodeId(), f2.readIndex, f1.readIndex)
	}
	if f1.proposalCount()+f2.proposalCount() != 0 {
		t.Fatal("a read-only batch was proposed")
	}

	f2.proposeResult = &storepb.CommandResult{Results: []*concordpb.OpResult{{}, {}}}
	put := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v2")}
	if _, err := c1.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{get("k"), put}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Batch(ctx, &concordpb.BatchRequest{Header: &concordpb.RequestHeader{SessionId: 3, Seq: 1},
		Ops: []*concordpb.Op{get("k"), get(other)}}); err != nil {
		t.Fatal(err)
	}
	if f2.proposalCount() != 2 {
		t.Fatalf("%d proposals for a batch that writes and one with a session; want 2", f2.proposalCount())
	}

	kv2 := NewKV(f2, testLimits)
	resp, err = kv2.Batch(ctx, &concordpb.BatchRequest{Header: &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE},
		Ops: []*concordpb.Op{get("k")}})
	if err != nil || !resp.GetResults()[0].GetOk() || len(f2.readIndex) != 1 {
		t.Fatalf("stale batch: %v, %v after barriers %v; want v1 with no new barrier", resp, err, f2.readIndex)
	}
}

// TestForwardedReadsMerge protects the merging of forwarded read-only
// batches: while one is in flight to the leader, the batches that arrive
// queue and go out as ONE batch (one barrier at the leader), each answered
// with its own results; a stale batch does not merge.
func TestForwardedReadsMerge(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	shard := f2.shardOfKey("k")
	f2.data[shard] = []*concordpb.KeyValue{{Key: []byte("k"), Value: []byte("v1")}}
	gate := make(chan struct{})
	f2.readGate = gate
	serve(t, f2, f1)
	kv1 := NewKV(f1, testLimits)
	ctx := context.Background()
	get := func(k string) *concordpb.Op { return &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte(k)} }
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("x%d", i); f2.shardOfKey(k) == shard {
			other = k
		}
	}
	type answer struct {
		res []*concordpb.OpResult
		err error
	}
	read := func(ops ...*concordpb.Op) chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := kv1.Batch(ctx, &concordpb.BatchRequest{Ops: ops})
			ch <- answer{resp.GetResults(), err}
		}()
		return ch
	}
	queued := func() int { return kv1.merge.waiting(shard) }
	first := read(get("k"))
	waitFor(t, func() bool { return queued() == 0 }) // taken, and blocked at the leader's barrier
	later := []chan answer{read(get("k"), get(other)), read(get(other)), read(get("k"))}
	waitFor(t, func() bool { return queued() == 3 })
	gate <- struct{}{} // the first batch's barrier
	gate <- struct{}{} // the merged batch's
	want := [][]bool{{true}, {true, false}, {false}, {true}}
	for i, ch := range append([]chan answer{first}, later...) {
		a := <-ch
		if a.err != nil || len(a.res) != len(want[i]) {
			t.Fatalf("read %d: %v, %v; want %d results", i, a.res, a.err, len(want[i]))
		}
		for j, found := range want[i] {
			if a.res[j].GetOk() != found || (found && string(a.res[j].GetValue()) != "v1") {
				t.Fatalf("read %d result %d = %v, want found=%v", i, j, a.res[j], found)
			}
		}
	}
	f2.mu.Lock()
	barriers := len(f2.readIndex)
	f2.mu.Unlock()
	if barriers != 2 {
		t.Fatalf("%d barriers at the leader for a read and three queued behind it; want 2", barriers)
	}
	f2.readGate = nil
	stale := &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}
	if !mergeable(&concordpb.RequestHeader{}) || mergeable(stale) || mergeable(&concordpb.RequestHeader{Hops: 1}) {
		t.Fatal("only a client's linearizable read-only batch merges")
	}
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemoveNodeRetriesADroppedMark protects `concord node remove` across a
// leadership transfer of the meta shard (the scheduler balances leaders
// onto a node that just came up): a mark raft dropped never reached the
// log, so it is proposed again instead of failing the command; an error
// that may hide an applied mark is returned as it is.
func TestRemoveNodeRetriesADroppedMark(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	c := NewCluster(f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.dropFirst = 3
	resp, err := c.RemoveNode(ctx, &concordpb.RemoveNodeRequest{NodeId: 4})
	if err != nil || resp.GetNode().GetState() != concordpb.NodeState_NODE_LEAVING {
		t.Fatalf("removal whose first 3 marks raft dropped: %v, %v; want it retried and leaving", resp, err)
	}
	if f.removals != 4 {
		t.Fatalf("%d marks proposed, want 4 (3 dropped, then the one that applied)", f.removals)
	}
	f.proposeErr = replica.ErrAmbiguous
	_, err = c.RemoveNode(ctx, &concordpb.RemoveNodeRequest{NodeId: 4})
	if err == nil || f.removals != 5 {
		t.Fatalf("ambiguous mark: %v after %d marks, want an error after exactly one more", err, f.removals)
	}
}

// TestRemoveNodeAtTheHopLimitWaitsForTheLeader protects node removal across
// the end of a meta-shard leadership transfer: a removal forwarded as far
// as it may go reaches a node that does not yet see itself lead; it waits
// for the leadership to settle (here the node leads after a few looks)
// instead of refusing.
func TestRemoveNodeAtTheHopLimitWaitsForTheLeader(t *testing.T) {
	f := newFakeNode(t, 1, 4, 0)
	f.electing = &election{calls: 3, leader: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(hopsKey, strconv.Itoa(maxHops)))
	resp, err := NewCluster(f).RemoveNode(ctx, &concordpb.RemoveNodeRequest{NodeId: 4})
	if err != nil || resp.GetNode().GetState() != concordpb.NodeState_NODE_LEAVING {
		t.Fatalf("removal at the hop limit while the leader settles: %v, %v; want it leaving", resp, err)
	}
	if f.removals != 1 {
		t.Fatalf("%d marks proposed, want 1", f.removals)
	}
}

// TestJoinRefusesABinaryBelowTheClusterVersion: a joining binary that
// applies less than the cluster's version (or reports no version: a binary
// from before versions, Base) is refused with FailedPrecondition and a
// message saying what to do; one at the cluster's version joins.
func TestJoinRefusesABinaryBelowTheClusterVersion(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.clusterVersion.Store(uint32(version.IncrRepeat))
	c := concordpb.NewClusterClient(serve(t, f))
	ctx := context.Background()
	for _, v := range []uint32{0, uint32(version.Base)} {
		_, err := c.Join(ctx, &concordpb.JoinRequest{Address: "10.0.0.4:7000", Version: v})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "run a newer binary") {
			t.Fatalf("a cluster at version %d took a join from a binary at %d: %v, want FailedPrecondition", version.IncrRepeat, v, err)
		}
	}
	if _, err := c.Join(ctx, &concordpb.JoinRequest{Address: "10.0.0.4:7000", Version: uint32(version.IncrRepeat)}); err != nil {
		t.Fatalf("a binary at the cluster's version was refused: %v", err)
	}
}

// TestJoinRefusesABinaryThatDoesNotKnowTheClustersKeyHash: a cluster whose
// shards hash keys by their hash tags refuses a joining node from before
// tags (its JoinRequest has no max_key_hash), which would place tagged
// keys elsewhere and whose replicas would diverge; a binary that knows
// tags joins, and a whole-key cluster takes either.
func TestJoinRefusesABinaryThatDoesNotKnowTheClustersKeyHash(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.clusterVersion.Store(uint32(version.Base)) // a cluster that binaries before versions may join
	c := concordpb.NewClusterClient(serve(t, f))
	ctx := context.Background()
	if _, err := c.Join(ctx, &concordpb.JoinRequest{Address: "10.0.0.4:7000"}); err != nil {
		t.Fatalf("a whole-key cluster refused a join from before tags: %v", err)
	}
	f.mu.Lock()
	for _, d := range f.descs {
		d.KeyHash = routing.KeyHashTags
	}
	f.mu.Unlock()
	_, err := c.Join(ctx, &concordpb.JoinRequest{Address: "10.0.0.5:7000"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "does not know") {
		t.Fatalf("a tags cluster took a join from a binary before tags: %v, want FailedPrecondition", err)
	}
	if _, err := c.Join(ctx, &concordpb.JoinRequest{Address: "10.0.0.5:7000", MaxKeyHash: routing.KeyHashTags}); err != nil {
		t.Fatalf("a tags cluster refused a join from a binary with tags: %v", err)
	}
}
