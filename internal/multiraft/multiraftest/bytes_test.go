package multiraftest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
)

// TestCatchUpBoundedInBytes protects the transport from huge Readys: a
// follower that missed 10 MiB of writes gets them MaxInflightBytes at a
// time, never all in one flush. Before raft's MaxInflightBytes was set, only
// MaxInflightMsgs (256 appends of up to 1 MiB each) bounded a flush, and a
// lagging follower's whole backlog left in one RaftBatch, over the gRPC
// message limit for backlogs past 64 MiB.
func TestCatchUpBoundedInBytes(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	cfg := multiraft.DefaultConfig(1)
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	c.Cut(lagging)
	value := strings.Repeat("v", 256<<10)
	for i := range 40 {
		c.Put(fmt.Sprintf("k%d", i), value)
	}
	var mu sync.Mutex
	most, total := 0, 0
	c.Net.OnFlush(func(from, to ids.NodeID, envs []*concordpb.RaftEnvelope) {
		if from != leader || to != lagging {
			return
		}
		size := 0
		for _, env := range envs {
			var m pb.Message
			if err := proto.Unmarshal(env.GetMessage(), &m); err != nil {
				t.Error(err)
				return
			}
			for _, e := range m.GetEntries() {
				size += len(e.GetData())
			}
		}
		mu.Lock()
		defer mu.Unlock()
		most, total = max(most, size), total+size
	})
	c.Heal(lagging)
	for i := range 40 {
		c.WaitValue(fmt.Sprintf("k%d", i), value, lagging)
	}
	mu.Lock()
	defer mu.Unlock()
	// raft sends while fewer than MaxInflightBytes are unacknowledged, so
	// one more message (at most MaxSizePerMsgBytes here) may go over.
	limit := int(cfg.MaxInflightBytes + cfg.MaxSizePerMsgBytes)
	t.Logf("the leader sent %d bytes of entries to the lagging follower, at most %d in one flush (limit %d)", total, most, limit)
	if most > limit {
		t.Fatalf("one flush carried %d bytes of entries to a lagging follower; the bound is %d", most, limit)
	}
}
