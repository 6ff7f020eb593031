package resp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

// TestAvailableSetThroughIsolatedNode: under CONCORD.CONSISTENCY
// available, a plain SET sent to a node cut off from the others (no
// quorum for any shard) answers OK as a tentative write, the node's GET
// reads it back, CLIENT INFO and INFO count it, and once the partition
// heals the node's reconciler commits it: a linearizable GET through
// another node sees it.
func TestAvailableSetThroughIsolatedNode(t *testing.T) {
	c := startCluster(t, testcluster.Options{FaultInjection: true, HTTP: true})
	waitVersions(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n1 := client(t, c, 0)
	// CONCORD.CONSISTENCY is the connection's: one connection, not a pool.
	n3 := client(t, c, 2).Conn()
	defer n3.Close()
	must(n3.Do(ctx, "CONCORD.CONSISTENCY", "available").Result())(t, "CONCORD.CONSISTENCY available")

	heal := isolateNode(t, ctx, c, 2)
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	setCtx, setCancel := context.WithTimeout(ctx, 10*time.Second)
	defer setCancel()
	if got := must(n3.Set(setCtx, "avail-k", "v1", 0).Result())(t, "SET through the isolated node"); got != "OK" {
		t.Fatalf("SET answered %q, want OK", got)
	}
	// go-redis still parses the line (it skips fields it does not know).
	must(n3.ClientInfo(ctx).Result())(t, "CLIENT INFO parsed by go-redis")
	line := must(n3.Do(ctx, "CLIENT", "INFO").Text())(t, "CLIENT INFO")
	if !strings.Contains(line, " tentative=1") {
		t.Errorf("CLIENT INFO %q does not count the tentative SET", line)
	}
	if v := must(n3.Get(ctx, "avail-k").Result())(t, "GET on the isolated node"); v != "v1" {
		t.Errorf("the isolated node's GET reads %q, want v1 (its tentative write)", v)
	}
	repl := must(n3.Info(ctx, "replication").Result())(t, "INFO replication")
	if !strings.Contains(repl, "concord_tentative_writes_held:1\r\n") {
		t.Errorf("INFO replication of the isolated node does not hold one tentative write:\n%s", repl)
	}

	heal()
	healed = true
	testcluster.WaitFor(t, 90*time.Second, func() error {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		defer gcancel()
		v, err := n1.Get(gctx, "avail-k").Result()
		if err != nil {
			return err
		}
		if v != "v1" {
			return fmt.Errorf("node 1 reads %q", v)
		}
		return nil
	})
}

// isolateNode cuts node i off from the other nodes, both ways, with
// CONCORD.FAULT PARTITION, and returns the heal.
func isolateNode(t *testing.T, ctx context.Context, c *testcluster.Cluster, i int) (heal func()) {
	t.Helper()
	for j := range c.N() {
		args := []any{"CONCORD.FAULT", "PARTITION"}
		for p := range c.N() {
			if j != i && p != i && p != j {
				args = append(args, c.Addr(p))
			}
		}
		must(client(t, c, j).Do(ctx, args...).Result())(t, fmt.Sprintf("partition of node %d", j+1))
	}
	return func() {
		t.Helper()
		for j := range c.N() {
			must(client(t, c, j).Do(ctx, "CONCORD.FAULT", "HEAL").Result())(t, fmt.Sprintf("heal of node %d", j+1))
		}
	}
}

// waitVersions waits until every node knows that the cluster's version
// allows versions: until then a node fails an available write it cannot
// commit rather than hold it.
func waitVersions(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	c.WaitClusterVersion(t, version.Versions, 30*time.Second)
}
