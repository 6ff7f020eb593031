package multiraftest_test

import (
	"fmt"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// TestNoCommitOnlyAppendBeforeAnAppend protects the leader's message count
// under load: raft answers each ack that moves the commit index with an
// empty MsgApp to every follower, and the same turn's proposals then append
// to the same followers with the same commit index. The empty one must not
// be sent (replica.supersededAppend): it would cost a message each way and
// tell the follower nothing. Every write must still reach every replica.
func TestNoCommitOnlyAppendBeforeAnAppend(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1})
	shard := ids.ShardID(1)
	leader := c.WaitLeader(shard)
	var mu sync.Mutex
	superseded, empties, appends := 0, 0, 0
	c.Net.OnFlush(func(from, _ ids.NodeID, envs []*concordpb.RaftEnvelope) {
		if from != leader {
			return
		}
		var msgs []*pb.Message
		for _, env := range envs {
			m := &pb.Message{}
			if err := proto.Unmarshal(env.GetMessage(), m); err == nil && m.GetType() == pb.MsgApp {
				msgs = append(msgs, m)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i, m := range msgs {
			if len(m.GetEntries()) > 0 {
				appends++
				continue
			}
			empties++
			for _, later := range msgs[i+1:] {
				if later.GetTerm() == m.GetTerm() && later.GetIndex() >= m.GetIndex() && later.GetCommit() >= m.GetCommit() {
					superseded++
					break
				}
			}
		}
	})
	// Proposals queued back to back, so that acks of earlier ones and new
	// proposals meet in the leader's turns.
	var calls []*multiraftest.Call
	for i := range 300 {
		calls = append(calls, c.Propose(leader, shard, multiraftest.PutOp(fmt.Sprintf("k%d", i), "v")))
	}
	c.RunUntil("every proposal's outcome", 2000, func() bool {
		for _, call := range calls {
			if !call.Done() {
				return false
			}
		}
		return true
	})
	for i, call := range calls {
		if call.Err != nil {
			t.Fatalf("proposal %d: %v", i, call.Err)
		}
	}
	c.WaitValue("k299", "v", 1, 2, 3)
	c.WaitValue("k0", "v", 1, 2, 3)
	c.Net.OnFlush(nil)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("leader's MsgApps: %d with entries, %d empty", appends, empties)
	if appends == 0 {
		t.Fatal("the leader sent no appends")
	}
	if superseded > 0 {
		t.Errorf("%d empty MsgApps were sent ahead of an append that carried their commit index", superseded)
	}
}
