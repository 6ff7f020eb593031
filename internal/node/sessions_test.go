package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/version"
)

// TestSessionExpiryLimitFollowsVersion: a leader bounds its expiry
// commands only once every replica applies the bound; before, a replica
// of an older binary would read every record and expire another set.
func TestSessionExpiryLimitFollowsVersion(t *testing.T) {
	for v := version.Unknown; v <= version.Binary; v++ {
		want := uint32(0)
		if v >= version.BoundedSessionExpiry {
			want = kv.MaxSessionsPerExpiry
		}
		if got := sessionExpiryLimit(v); got != want {
			t.Errorf("at cluster version %d the limit is %d, want %d", v, got, want)
		}
	}
}

// sessionRecords counts the session records of shard on n.
func sessionRecords(t *testing.T, n *Node, shard ids.ShardID) int {
	t.Helper()
	lo, hi := keys.SessionSpan(uint64(shard))
	count := 0
	err := n.eng.Read(func(r storage.Reader) error {
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			count++
		}
		return it.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return count
}

// openSessions writes one PUT in each of sessions first..first+n-1
// through n's KV service, polling until the shard has a leader.
func openSessions(t *testing.T, n *Node, first, count uint64) {
	t.Helper()
	svc := grpcapi.NewKV(n.backend(), grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20})
	for s := first; s < first+count; s++ {
		req := &concordpb.PutRequest{Header: &concordpb.RequestHeader{SessionId: s, Seq: 1}, Key: []byte("k"), Value: []byte("v")}
		waitFor(t, 20*time.Second, func() error {
			_, err := svc.Put(context.Background(), req)
			return err
		})
	}
}

// ledUserShard is the user shard n leads (a solo node of one shard).
func ledUserShard(t *testing.T, n *Node) ids.ShardID {
	t.Helper()
	for _, info := range n.host.Infos() {
		if info.IsLeader && info.Shard != routing.MetaShard {
			return info.Shard
		}
	}
	t.Fatal("the node leads no user shard")
	return 0
}

// TestSessionExpiryPassInBoundedCommands protects the proposer's loop of
// bounded expiry on a real node: a pass over 25 records 10 at a time is
// three commands, each resuming where the last stopped, which keep every
// live session and, with a TTL they are all past, expire every one; at a
// version without the bound a pass is one command.
func TestSessionExpiryPassInBoundedCommands(t *testing.T) {
	n := startSolo(t)
	waitFor(t, 20*time.Second, func() error {
		if v := n.backend().ClusterVersion(); !v.Allows(version.BoundedSessionExpiry) {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	openSessions(t, n, 1, 25)
	shard := ledUserShard(t, n)
	if got := sessionRecords(t, n, shard); got != 25 {
		t.Fatalf("%d session records, want 25", got)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		ttl        time.Duration
		limit      uint32
		cmds, left int
	}{
		{time.Hour, 10, 3, 25},      // all live: a whole pass, nothing deleted
		{time.Nanosecond, 10, 3, 0}, // all idle: every one deleted
	} {
		cmds, err := n.expireShardSessions(ctx, shard, tc.ttl, tc.limit)
		if err != nil || cmds != tc.cmds {
			t.Fatalf("TTL %v, limit %d: %d commands (%v), want %d", tc.ttl, tc.limit, cmds, err, tc.cmds)
		}
		if got := sessionRecords(t, n, shard); got != tc.left {
			t.Fatalf("TTL %v, limit %d: %d session records left, want %d", tc.ttl, tc.limit, got, tc.left)
		}
	}
	openSessions(t, n, 100, 25)
	if cmds, err := n.expireShardSessions(ctx, shard, time.Nanosecond, 0); err != nil || cmds != 1 {
		t.Fatalf("unbounded: %d commands (%v), want 1", cmds, err)
	}
	if got := sessionRecords(t, n, shard); got != 0 {
		t.Fatalf("unbounded: %d session records left, want 0", got)
	}
}
