package testcluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/localcluster"
)

func TestMain(m *testing.M) { Main(m) }

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "concord")); err != nil {
		t.Fatalf("module root %s has no cmd/concord: %v", root, err)
	}
}

// TestNodesGuardOffUnlessAsked: the harness's nodes run with the disk
// space guard off (--reserve-disk-bytes=0), so that a test host with
// little free disk does not fail tests with NOSPACE; a test that asks for
// a reserve gets it, and a flag in ExtraArgs or SetNodeArgs comes later
// and wins.
func TestNodesGuardOffUnlessAsked(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want []string // the command line's --reserve-disk-bytes flags, in order
	}{
		{Options{}, []string{"--reserve-disk-bytes=0"}},
		{Options{ReserveDiskBytes: -1}, []string{"--reserve-disk-bytes=-1"}},
		{Options{ReserveDiskBytes: 1 << 20}, []string{"--reserve-disk-bytes=1048576"}},
		{Options{ExtraArgs: []string{"--reserve-disk-bytes=7"}}, []string{"--reserve-disk-bytes=0", "--reserve-disk-bytes=7"}},
	} {
		lc, err := localcluster.New(launchConfig("concord", tc.opts, t.TempDir(), nil))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range lc.Args(0) {
			if strings.HasPrefix(a, "--reserve-disk-bytes") {
				got = append(got, a)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v: node flags %q; want %q", tc.opts, got, tc.want)
		}
	}
}

// TestLifecycle exercises the harness itself against a real cluster: start,
// serve, graceful stop, restart, kill, wipe, and the helpers.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	c := New(t, Options{Nodes: 3, Shards: 4})
	c.WaitReady(t, 60*time.Second)
	ctx := context.Background()
	cl := c.Client(t)
	if _, _, err := cl.Put(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}

	ids := map[uint64]bool{}
	for i := 0; i < c.N(); i++ {
		id, err := c.NodeID(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
		if c.PID(i) == 0 || !c.Running(i) {
			t.Fatalf("node %d should be running", i)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("want 3 distinct node ids, got %v", ids)
	}
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	k := KeyInShard(rt, 3, "k")
	if ShardOf(rt, k) != 3 {
		t.Fatalf("KeyInShard gave %q, which is in shard %d", k, ShardOf(rt, k))
	}
	if l := c.LeaderOf(t, 3, 10*time.Second); l < 0 || l >= c.N() {
		t.Fatalf("LeaderOf gave %d", l)
	}

	c.Stop(0) // fails the test unless the node exits cleanly
	if c.Running(0) || c.PID(0) != 0 {
		t.Fatal("node 0 still running after Stop")
	}
	mark := c.LogMark(0)
	c.Start(0)
	c.WaitReady(t, 30*time.Second)
	WaitFor(t, 10*time.Second, func() error {
		resp, err := c.StaleGet(ctx, 0, []byte("a"))
		if err != nil {
			return err
		}
		if string(resp.GetValue()) != "1" {
			return os.ErrNotExist
		}
		return nil
	})
	if since := c.LogSince(0, mark); len(since) == 0 {
		t.Fatal("LogSince is empty after a restart")
	}

	c.Kill(1)
	if c.Running(1) {
		t.Fatal("node 1 still running after Kill")
	}
	c.Wipe(1)
	if _, err := os.Stat(c.DataDir(1)); !os.IsNotExist(err) {
		t.Fatalf("data dir of node 1 still there after Wipe: %v", err)
	}
	c.Start(1)
	WaitFor(t, 60*time.Second, func() error {
		_, err := c.NodeID(ctx, 1)
		return err
	})
	kv, err := c.StaleScan(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if kv["a"] != "1" {
		t.Fatalf("stale scan of node 2: %v", kv)
	}
}
