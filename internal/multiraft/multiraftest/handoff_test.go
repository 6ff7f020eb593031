package multiraftest_test

import (
	"context"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// A stopping node's host refuses leadership (Host.RefuseLeadership,
// replica/handoff.go): it takes no leadership transferred to it and wins
// no election, while the rest of each group keeps or elects a leader
// elsewhere. Leader preference is off: the tests decide every transfer.

func refusingCluster(t *testing.T) (c *multiraftest.Cluster, leader, refusing, other ids.NodeID) {
	t.Helper()
	c = multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1,
		Configure: func(cfg *multiraft.Config) { cfg.NoLeaderPreference = true }})
	leader = c.WaitLeader(1)
	c.Put("k", "v")
	others := othersOf(c, leader) // ascending: replica id = node id
	refusing, other = others[0], others[1]
	if err := c.Node(refusing).Host.RefuseLeadership(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, leader, refusing, other
}

// neverLeads fails the test if node leads shard 1.
func neverLeads(t *testing.T, c *multiraftest.Cluster, node ids.NodeID) {
	t.Helper()
	if i, ok := c.Node(node).Host.Info(1); ok && i.IsLeader {
		t.Fatalf("node %d, refusing leadership, leads shard 1 in term %d", node, i.Term)
	}
}

// TestRefusingHostTakesNoTransfer: a transfer to a refusing replica is
// abandoned (its MsgTimeoutNow is dropped) and the leader keeps leading
// and committing.
func TestRefusingHostTakesNoTransfer(t *testing.T) {
	c, leader, refusing, _ := refusingCluster(t)
	h := c.Node(leader).Host
	transfer := make(chan error, 1)
	multiraftest.Begin(func(ctx context.Context) { transfer <- h.TransferLeader(ctx, 1, 0, ids.ReplicaID(refusing)) })
	c.RunUntil("the transfer to start", 100, func() bool { i, _ := h.Info(1); return i.Transferee != 0 || !i.IsLeader })
	for tick := 0; ; tick++ {
		neverLeads(t, c, refusing)
		i, _ := h.Info(1)
		if !i.IsLeader {
			t.Fatalf("node %d no longer leads %d ticks into the transfer (leader: node %d)", leader, tick, c.Leader(1))
		}
		if i.Transferee == 0 {
			t.Logf("transfer abandoned after %d ticks (election timeout %d)", tick, electionTicks)
			break
		}
		if tick > 4*electionTicks {
			t.Fatalf("transfer still under way after %d ticks", tick)
		}
		c.Tick(1)
	}
	if err := await(t, transfer, "the transfer"); err == nil {
		t.Fatalf("transfer to refusing node %d succeeded", refusing)
	} else {
		t.Logf("transfer: %v", err)
	}
	c.Put("k", "v2") // the leader commits again once the transfer is abandoned
	c.WaitValue("k", "v2", leader, refusing)
}

// TestRefusingHostDoesNotCampaign: once the leader is gone, a refusing
// replica whose election timer fires wins nothing, even where the only
// other voter would grant its vote; the other voter is elected, with the
// refusing one's vote.
func TestRefusingHostDoesNotCampaign(t *testing.T) {
	c, leader, refusing, other := refusingCluster(t)
	// The other voter's own campaigns are held back, so the refusing one
	// could win on its timer (the other grants once its own timer fired).
	var mu sync.Mutex
	hold := true
	c.Net.Intercept(func(from, _ ids.NodeID, env *concordpb.RaftEnvelope) bool {
		mu.Lock()
		defer mu.Unlock()
		t := decode(t, env).GetType()
		return hold && from == other && (t == pb.MsgPreVote || t == pb.MsgVote)
	})
	c.Stop(leader)
	for range 6 * electionTicks {
		neverLeads(t, c, refusing)
		c.Tick(1)
	}
	neverLeads(t, c, refusing)
	mu.Lock()
	hold = false
	mu.Unlock()
	c.RunUntil("the other voter to lead", 4*electionTicks, func() bool {
		neverLeads(t, c, refusing)
		return c.Leader(1) == other
	})
	c.Put("k", "v2")
	c.WaitValue("k", "v2", other, refusing)
}

// TestRefusingHostLeavesGoneLeaderToOthers: told that the leader's node is
// gone (LeaderGone), a refusing replica forgets the leader but does not
// take its turn to campaign; the next voter's turn elects it.
func TestRefusingHostLeavesGoneLeaderToOthers(t *testing.T) {
	c, leader, refusing, other := refusingCluster(t)
	c.Stop(leader)
	c.Clock.Advance(multiraft.DefaultConfig(1).LeaseDuration()) // long silent: forgotten at once
	// The refusing replica has the lower id: its turn comes first.
	c.Node(refusing).Host.LeaderGone(leader)
	c.Node(other).Host.LeaderGone(leader)
	for tick := 0; c.Leader(1) != other; tick++ {
		neverLeads(t, c, refusing)
		if tick > electionTicks {
			t.Fatalf("no leader %d ticks after the event (election timeout %d)", tick, electionTicks)
		}
		c.Tick(1)
	}
	neverLeads(t, c, refusing)
	c.Put("k", "v2")
	c.WaitValue("k", "v2", other, refusing)
}

// TestTransferLeadersAwayFailsWhenNoneCanTake: a host that is the only
// voter of its shard cannot hand its leadership to anyone, and
// TransferLeadersAway says so instead of reporting the handoff done (the
// node logged "leaderships handed off" while it still led).
func TestTransferLeadersAwayFailsWhenNoneCanTake(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Nodes: 1, Shards: 1})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	err := c.Node(leader).Host.TransferLeadersAway(context.Background())
	if err == nil {
		t.Fatal("TransferLeadersAway of a sole voter's leadership reported the handoff done")
	}
	t.Logf("TransferLeadersAway: %v", err)
	if i, _ := c.Node(leader).Host.Info(1); !i.IsLeader {
		t.Fatal("the sole voter no longer leads shard 1")
	}
}
