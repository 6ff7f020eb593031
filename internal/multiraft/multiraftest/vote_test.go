package multiraftest_test

import (
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// TestVoteSurvivesRestart protects election safety across a restart (raft
// rule: persist the vote before answering). A node votes for a candidate,
// restarts before the candidate hears the answer, and is then asked by a
// second candidate in the same term. It must refuse: had it forgotten its
// vote, both candidates would win the same term — two leaders, which can
// commit different entries at the same index.
//
// The interleaving is played out exactly: the granted vote is held on the
// wire, the first candidate's timer stands still (it stays a candidate in
// that term), the old leader comes back as the rival and only it ticks,
// and it cannot hear from or reach the first candidate, which would
// otherwise move it to the new term before it campaigns. This is what the
// forget-vote mutant (a hard state persisted without its vote) needs to
// show itself, and what random kills in the robustness suite hit only by
// luck.
func TestVoteSurvivesRestart(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1})
	const shard = ids.ShardID(1)
	old := c.WaitLeader(shard)
	c.Put("k", "v")
	c.Stop(old)

	var mu sync.Mutex
	var held *concordpb.RaftEnvelope
	var voter, candidate ids.NodeID
	var term uint64
	c.Net.Intercept(func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool {
		mu.Lock()
		defer mu.Unlock()
		m := decode(t, env)
		if held != nil || m.GetType() != pb.MsgVoteResp || m.GetReject() {
			return false
		}
		held, voter, candidate, term = env, from, to, m.GetTerm()
		return true
	})
	c.RunUntil("a vote granted to a candidate", 500, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return held != nil
	})
	t.Logf("node %d voted for node %d in term %d; the answer is held", voter, candidate, term)

	c.Stop(voter)
	c.Start(voter)
	// A restarted voter ignores vote requests for its first election
	// timeout less a tick (it may back a leader's read lease; see
	// replica/lease.go); raft's own timer cannot fire before.
	c.TickOnly(multiraft.DefaultConfig(1).ElectionTicks-1, voter)

	var answered, granted bool
	c.Net.Intercept(func(from, to ids.NodeID, env *concordpb.RaftEnvelope) bool {
		if (from == candidate && to == old) || (from == old && to == candidate) {
			return true
		}
		m := decode(t, env)
		if from != voter || to != old || m.GetTerm() != term {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.GetType() == pb.MsgVoteResp:
			answered, granted = true, !m.GetReject()
		case m.GetType() == pb.MsgPreVoteResp && m.GetReject():
			answered = true
		}
		return false
	})
	c.Start(old)
	for i := 0; ; i++ {
		mu.Lock()
		done := answered
		mu.Unlock()
		if done {
			break
		}
		if i == 500 {
			t.Fatalf("node %d never asked node %d for its vote in term %d", old, voter, term)
		}
		c.TickOnly(1, old)
	}
	t.Logf("node %d answered node %d's campaign in term %d: granted=%v", voter, old, term, granted)

	c.Net.Inject(voter, candidate, held)
	c.RunUntil("the first candidate's election", 1, func() bool {
		i, ok := c.Node(candidate).Host.Info(shard)
		return ok && i.IsLeader && i.Term == term
	})
	if i, ok := c.Node(old).Host.Info(shard); ok && i.IsLeader && i.Term == term {
		t.Fatalf("two leaders in term %d: nodes %d and %d (node %d forgot its vote for node %d across its restart)",
			term, candidate, old, voter, candidate)
	}
	if granted {
		t.Fatalf("node %d voted twice in term %d (for nodes %d and %d)", voter, term, candidate, old)
	}
}

func decode(t *testing.T, env *concordpb.RaftEnvelope) *pb.Message {
	var m pb.Message
	if err := proto.Unmarshal(env.GetMessage(), &m); err != nil {
		t.Errorf("undecodable raft message: %v", err)
	}
	return &m
}
