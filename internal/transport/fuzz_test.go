package transport_test

import (
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// FuzzRaftBatch feeds a RaftBatch, as anyone who reaches the raft port can
// send it, to node 1's receive path (transport Server → multiraft Host on a
// real engine; see target). Whatever the batch, the node must not stop
// (no Fatal, no panic), must still answer, and must still commit a put on
// its healthy shard. The cluster and addressee are set right (both are no
// secret); the sender, shard ids and messages are the fuzzer's.
//
// The seed corpus is real traffic to node 1 of an in-process cluster of
// three (elections, appends, heartbeats, votes and their responses), and
// the attacks of TestRaftPortAttacks. `go test` runs the seeds; `make fuzz`
// searches further.
func FuzzRaftBatch(f *testing.F) {
	for _, b := range capturedBatches(f) {
		f.Add(mustMarshal(b))
	}
	for _, a := range attacks {
		f.Add(mustMarshal(a.batch))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &concordpb.RaftBatch{}
		if err := proto.Unmarshal(data, b); err != nil {
			return
		}
		b.ClusterId, b.ToNodeId = targetCluster, 1
		tg := newTarget(t)
		_ = tg.receive(b) // a refused stream is fine; the node must stay up
		if f := tg.fatal(); len(f) > 0 {
			t.Fatalf("the node stopped (Fatal): %v", f)
		}
		tg.serves("k")
	})
}

// capturedBatches runs an in-process cluster of three nodes with user
// shards placed like target's (shard 2 on nodes 1, 2, 3), and returns, as
// RaftBatches, a sample of what nodes 2 and 3 sent node 1: the first few
// messages of each type, in the batches they travelled in.
func capturedBatches(tb testing.TB) []*concordpb.RaftBatch {
	c := multiraftest.New(tb, multiraftest.Options{Nodes: 3, Shards: 2})
	var out []*concordpb.RaftBatch
	perType := map[string]int{}
	c.Net.Tap(func(from, to ids.NodeID, env *concordpb.RaftEnvelope) {
		m := &pb.Message{}
		if to != 1 || proto.Unmarshal(env.GetMessage(), m) != nil {
			return
		}
		key := fmt.Sprintf("%d/%v/%d", env.GetShardId(), m.GetType(), len(m.GetEntries()))
		if perType[key] >= 2 {
			return
		}
		perType[key]++
		out = append(out, &concordpb.RaftBatch{ClusterId: targetCluster, FromNodeId: uint64(from), ToNodeId: 1,
			Messages: []*concordpb.RaftEnvelope{proto.CloneOf(env)}})
	})
	for i := range 3 {
		c.Put(fmt.Sprintf("seed-%d", i), "v")
	}
	c.Net.Tap(nil)
	return out
}
