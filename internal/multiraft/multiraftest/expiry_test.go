package multiraftest_test

import (
	"context"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/expiry"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// stored reports whether node still stores key of shard, expired or not.
func stored(t *testing.T, c *multiraftest.Cluster, node ids.NodeID, shard ids.ShardID, key string) bool {
	t.Helper()
	var found bool
	err := c.Node(node).Engine.Read(func(r storage.Reader) error {
		_, closer, err := r.Get(keys.User(uint64(shard), []byte(key)))
		if err == nil {
			found = true
			return closer.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// racingHost is the leader's host as the sweep sees it, except that just
// before the sweep proposes its deletions (having read the index) it re-sets
// a key through raft: the re-set applies before the deletion does.
type racingHost struct {
	expiry.Host
	reset    *concordpb.Op
	proposed []*concordpb.Op
}

func (h *racingHost) Propose(ctx context.Context, shard ids.ShardID, cmd *storepb.Command) (*storepb.CommandResult, error) {
	h.proposed = cmd.GetKv().GetOps()
	put := &storepb.Command{UnixNanos: time.Now().UnixNano(), Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: []*concordpb.Op{h.reset}}}}
	if _, err := h.Host.Propose(ctx, shard, put); err != nil {
		return nil, err
	}
	return h.Host.Propose(ctx, shard, cmd)
}

// TestExpiredKeysSweptOnEveryReplica: a key put with a TTL reads as absent on
// every replica once the TTL has passed, before any sweep; a sweep round on
// the leader then deletes it on every replica through raft, while a key that
// was re-set (without a TTL) after the round read the index, but before its
// deletion applied, survives the deletion.
func TestExpiredKeysSweptOnEveryReplica(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	const shard = 1
	leader := c.WaitLeader(shard)
	ttl := 200 * time.Millisecond
	start := time.Now()
	c.Await(c.ProposeAt(leader, shard, start.UnixNano(),
		&concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("gone"), Value: []byte("v"), TtlMs: ttl.Milliseconds()},
		&concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("reset"), Value: []byte("v"), TtlMs: ttl.Milliseconds()}))
	all := []ids.NodeID{1, 2, 3}
	c.WaitValue("gone", "v", all...)
	c.RunUntil("the TTL to pass", 100_000, func() bool { return time.Since(start) > ttl })

	for _, n := range all {
		if _, found := c.Get(n, "gone"); found {
			t.Fatalf("node %d reads the expired key", n)
		}
		if !stored(t, c, n, shard, "gone") {
			t.Fatalf("node %d deleted the key before any sweep", n)
		}
	}

	h := &racingHost{Host: c.Node(leader).Host,
		reset: &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("reset"), Value: []byte("again")}}
	type outcome struct {
		deleted int
		err     error
	}
	done := make(chan outcome, 1)
	// Begun: the ticks start once the sweep's first proposal reached the
	// leader; they go on until the leader's engine shows the deletion, and
	// then the sweep, which needs no tick to end, is waited for: ticking
	// until the sweep's goroutine ended could spend the budget while Go's
	// scheduler kept it off the CPU.
	ended := multiraftest.Begin(func(ctx context.Context) {
		n, err := expiry.Sweep(ctx, h, time.Now(), expiry.MaxKeysPerShard, true)
		done <- outcome{n, err}
	})
	c.RunUntil("the sweep round", 1000, func() bool { return !stored(t, c, leader, shard, "gone") || isClosed(ended) })
	out := await(t, done, "the sweep round")
	if out.err != nil || out.deleted != 1 {
		t.Fatalf("sweep deleted %d keys, err %v; want 1 (only the key not re-set)", out.deleted, out.err)
	}
	if len(h.proposed) != 2 {
		t.Fatalf("the sweep proposed %v; want both expired keys", h.proposed)
	}
	c.RunUntil("the expired key deleted on every replica", 1000, func() bool {
		for _, n := range all {
			if stored(t, c, n, shard, "gone") {
				return false
			}
		}
		return true
	})
	c.WaitValue("reset", "again", all...)
}

// TestExpiryIndexTravelsInSnapshots: a follower caught up by snapshot holds
// the key's expiry and the shard's expiry index (which the sweep reads,
// should it lead): both are in the shard's state span.
func TestExpiryIndexTravelsInSnapshots(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	c.Cut(lagging)
	ttl := time.Hour
	c.Await(c.ProposeAt(leader, 1, time.Now().UnixNano(),
		&concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("t"), Value: []byte("v"), TtlMs: ttl.Milliseconds()}))
	gap := putPastTruncation(t, c, leader)
	c.Heal(lagging)
	c.WaitValue("k19", "v", lagging)
	if idx := truncated(t, c, lagging); idx < gap {
		t.Fatalf("the lagging follower's log starts after %d, want a snapshot at or beyond %d", idx, gap)
	}
	var expired []kv.ExpiredKey
	var expireAt int64
	err := c.Node(lagging).Engine.Read(func(r storage.Reader) (err error) {
		if _, expireAt, _, err = kv.Get(r, 1, []byte("t"), 0); err != nil {
			return err
		}
		expired, err = kv.Expired(r, 1, time.Now().Add(2*ttl).UnixMilli(), 10)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if expireAt == 0 || len(expired) != 1 || string(expired[0].Key) != "t" || expired[0].AtMs != expireAt {
		t.Fatalf("after the snapshot: expiry %d, index %v; want the key's expiry and its index entry", expireAt, expired)
	}
}
