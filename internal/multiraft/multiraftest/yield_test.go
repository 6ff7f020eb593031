package multiraftest_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// turnLog records, per node, what its loop did in order: "append" when a
// Flush sent a MsgApp carrying entries, "yield" when it yielded to the
// senders, "sync" for a synced storage commit.
type turnLog struct {
	mu     sync.Mutex
	events map[ids.NodeID][]string
}

func (l *turnLog) add(node ids.NodeID, ev string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[node] = append(l.events[node], ev)
}

func (l *turnLog) of(node ids.NodeID) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events[node])
}

// syncObserver reports synced commits to a turnLog.
type syncObserver struct {
	node ids.NodeID
	log  *turnLog
}

func (o syncObserver) Commit(synced bool, _ time.Duration, _, _ int) {
	if synced {
		o.log.add(o.node, "sync")
	}
}
func (syncObserver) LeaderChange()                {}
func (syncObserver) Reads(uint64, uint64, uint64) {}

// TestLeaderYieldsToSendersBeforeItsFsync protects a put's latency: a
// leader's appends to its followers, which may leave before its own fsync,
// must be handed to the senders before that fsync starts, because the
// followers' acks are what a commit waits for. So the loop yields after
// flushing them and before committing; a follower, which sends nothing
// before its fsync, never yields.
func TestLeaderYieldsToSendersBeforeItsFsync(t *testing.T) {
	log := &turnLog{events: map[ids.NodeID][]string{}}
	c := multiraftest.New(t, multiraftest.Options{Nodes: 3, Shards: 1, Configure: func(cfg *multiraft.Config) {
		node := cfg.NodeID
		cfg.Observer = syncObserver{node, log}
		cfg.YieldToSenders = func() { log.add(node, "yield") }
	}})
	shard := ids.ShardID(1)
	leader := c.WaitLeader(shard)
	c.Net.OnFlush(func(from, _ ids.NodeID, envs []*concordpb.RaftEnvelope) {
		for _, env := range envs {
			var m pb.Message
			if err := proto.Unmarshal(env.GetMessage(), &m); err == nil && m.GetType() == pb.MsgApp && len(m.GetEntries()) > 0 {
				log.add(from, "append")
				return
			}
		}
	})
	before := map[ids.NodeID]int{}
	for _, n := range c.Nodes() {
		before[n.ID] = len(log.of(n.ID))
	}
	for i := range 3 {
		c.Put(fmt.Sprintf("k%d", i), "v")
	}
	c.Net.OnFlush(nil)

	// Each put: its appends, to both followers, then the yield, then the
	// leader's synced commit.
	got := log.of(leader)[before[leader]:]
	want := slices.Repeat([]string{"append", "append", "yield", "sync"}, 3)
	if !slices.Equal(got, want) {
		t.Errorf("leader's turns: %v, want %v", got, want)
	}
	for _, n := range c.Nodes() {
		if n.ID == leader {
			continue
		}
		if got := log.of(n.ID)[before[n.ID]:]; slices.Contains(got, "yield") || !slices.Contains(got, "sync") {
			t.Errorf("follower %d's turns: %v, want synced commits and no yield", n.ID, got)
		}
	}
}
