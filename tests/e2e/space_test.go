package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestSpaceAlarm, on real node processes: a node restarted with a
// --reserve-disk-bytes larger than any disk (1 EiB) is low on space, and
// the whole cluster refuses writes that add data: `concord put` exits
// non-zero with the clear error, SET through every node's Redis port
// answers -NOSPACE, while DEL and GET still work and `node list` flags the
// node. Restarted with a reserve of one byte (the guard on, the node not
// low), the alarm clears by itself and writes succeed again.
func TestSpaceAlarm(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client(t)
	if _, _, err := cl.Put(ctx, []byte("doomed"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	rcs := make([]*redis.Client, c.N())
	for i := range rcs {
		rcs[i] = redis.NewClient(&redis.Options{Addr: c.Addr(i), MaxRetries: -1})
		t.Cleanup(func() { rcs[i].Close() })
	}

	const low = 2
	id := nodeIDAt(t, c, c.Addr(low))
	c.Stop(low)
	c.SetNodeArgs(low, fmt.Sprintf("--reserve-disk-bytes=%d", int64(1)<<60))
	c.Start(low)
	c.WaitReady(t, readyTimeout)

	attempt := 0
	testcluster.WaitFor(t, 30*time.Second, func() error {
		attempt++ // a key of its own each time: a put made before the alarm reached its node wrote it
		out, code := concordCLI(t, c, "put", fmt.Sprintf("refused-%d", attempt), "v")
		if code == 0 {
			return fmt.Errorf("concord put succeeded with node %d low on space: %q", id, out)
		}
		want := fmt.Sprintf("no space: node %d has", id)
		if !strings.Contains(out, want) || !strings.Contains(out, "under its --reserve-disk-bytes of 1.0 EiB") || strings.Contains(out, "ambiguous") {
			return fmt.Errorf("concord put: exit %d, %q; want the space alarm's error (%q...)", code, out, want)
		}
		return nil
	})
	for i, rc := range rcs {
		testcluster.WaitFor(t, 30*time.Second, func() error {
			err := rc.Set(ctx, fmt.Sprintf("set-%d", i), "v", 0).Err()
			if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("NOSPACE node %d has", id)) {
				return fmt.Errorf("SET through node %d: %v; want -NOSPACE", i+1, err)
			}
			return nil
		})
	}
	if n, err := rcs[0].Del(ctx, "doomed").Result(); err != nil || n != 1 {
		t.Fatalf("DEL with the space alarm on: %d, %v; want 1", n, err)
	}
	if err := rcs[1].Get(ctx, "doomed").Err(); err != redis.Nil {
		t.Fatalf("GET of the deleted key: %v; want nil", err)
	}
	testcluster.WaitFor(t, 30*time.Second, func() error {
		out, code := concordCLI(t, c, "node", "list", "-o", "json")
		var nodes []struct {
			ID      uint64 `json:"id"`
			DiskLow bool   `json:"disk_low"`
		}
		if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil {
			return fmt.Errorf("node list: exit %d, %v: %q", code, err, out)
		}
		for _, n := range nodes {
			if n.DiskLow != (n.ID == id) {
				return fmt.Errorf("node list shows node %d disk_low %v: %q", n.ID, n.DiskLow, out)
			}
		}
		return nil
	})

	c.Stop(low)
	c.SetNodeArgs(low, "--reserve-disk-bytes=1")
	c.Start(low)
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if out, code := concordCLI(t, c, "put", "after", "v"); code != 0 {
			return fmt.Errorf("concord put after the reserve went back: exit %d, %q", code, out)
		}
		return nil
	})
	for i, rc := range rcs {
		testcluster.WaitFor(t, 30*time.Second, func() error { return rc.Set(ctx, fmt.Sprintf("set-%d", i), "v", 0).Err() })
	}
}

// nodeIDAt is the id of the node serving at addr, by `concord node list`.
func nodeIDAt(t *testing.T, c *testcluster.Cluster, addr string) uint64 {
	t.Helper()
	out, code := concordCLI(t, c, "node", "list", "-o", "json")
	var nodes []struct {
		ID   uint64 `json:"id"`
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil {
		t.Fatalf("node list: exit %d, %v: %q", code, err, out)
	}
	for _, n := range nodes {
		if n.Addr == addr {
			return n.ID
		}
	}
	t.Fatalf("node list shows no node at %s: %q", addr, out)
	return 0
}
