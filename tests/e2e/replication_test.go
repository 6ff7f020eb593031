package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestEveryWriteReachesEveryReplica: 200 writes through the client become
// visible in every node's own replicas (stale reads sent to that node alone,
// answered by that node).
func TestEveryWriteReachesEveryReplica(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	want := map[string]string{}
	keys := seqKeys("rep-", 200)
	start := time.Now()
	b := startBurst(ctx, cl, keys, valueOf, 4, 20*time.Second)
	acked := b.wait()
	if len(acked) != len(keys) {
		t.Fatalf("%d of %d writes failed on a healthy cluster; first error: %v", len(keys)-len(acked), len(keys), b.err())
	}
	t.Logf("200 writes in %v", time.Since(start).Round(time.Millisecond))
	for _, k := range keys {
		want[k] = valueOf(k)
	}

	for i := 0; i < c.N(); i++ {
		id, err := c.NodeID(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		// Raw stale gets sent to node i alone: each must be answered by
		// node i from its replica.
		d := testcluster.WaitFor(t, 30*time.Second, func() error {
			for _, k := range keys {
				resp, err := c.StaleGet(ctx, i, []byte(k))
				if err != nil {
					return fmt.Errorf("stale get %q on node %d: %w", k, i, err)
				}
				if by := resp.GetHeader().GetServedByNodeId(); by != id {
					t.Fatalf("stale get %q sent to node %d (id %d) was served by node id %d", k, i, id, by)
				}
				if !resp.GetFound() || string(resp.GetValue()) != want[k] {
					return fmt.Errorf("node %d: %q found=%v value=%q, want %q", i, k, resp.GetFound(), resp.GetValue(), want[k])
				}
			}
			return nil
		})
		t.Logf("node %d: all 200 values read from its own replicas (polled %v)", i, d.Round(time.Millisecond))

		// The client given node i alone, with Stale: the same values.
		ncl := c.NodeClient(t, i)
		for _, k := range keys {
			v, found, err := ncl.Get(ctx, []byte(k), client.Stale())
			if err != nil || !found || string(v) != want[k] {
				t.Fatalf("client(%s).Get(%q, Stale) = %q, %v, %v; want %q", c.Addr(i), k, v, found, err, want[k])
			}
		}

		// And the CLI: concord get --stale --endpoints <node i>.
		for _, k := range keys[:3] {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			out, err := exec.CommandContext(cctx, testcluster.Binary(t), "get", k, "--stale", "--endpoints", c.Addr(i)).CombinedOutput()
			cancel()
			if err != nil || strings.TrimSpace(string(out)) != want[k] {
				t.Fatalf("concord get %s --stale --endpoints %s: %v, output %q; want %q", k, c.Addr(i), err, out, want[k])
			}
		}
	}
}
