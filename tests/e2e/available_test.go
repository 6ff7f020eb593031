package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

// reconcileTimeout bounds how long a healed node may take to reconcile
// what it holds: its reconciler backs off up to 30 s while cut off, and
// an election may come first.
const reconcileTimeout = 90 * time.Second

// isolate cuts node i off from the other nodes of c, both ways (the
// fault API), and returns the heal. Clients still reach every node.
func isolate(t *testing.T, c *testcluster.Cluster, i int) (heal func()) {
	t.Helper()
	admin := func(j int, f func(context.Context, concordpb.AdminClient) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f(ctx, concordpb.NewAdminClient(c.Conn(j))); err != nil {
			t.Fatalf("admin call to node %d: %v", j, err)
		}
	}
	for j := range c.N() {
		var reach []string
		for p := range c.N() {
			if j != i && p != i && p != j {
				reach = append(reach, c.Addr(p))
			}
		}
		admin(j, func(ctx context.Context, a concordpb.AdminClient) error {
			_, err := a.Partition(ctx, &concordpb.PartitionRequest{Reachable: reach})
			return err
		})
	}
	return func() {
		t.Helper()
		for j := range c.N() {
			admin(j, func(ctx context.Context, a concordpb.AdminClient) error {
				_, err := a.Heal(ctx, &concordpb.HealRequest{})
				return err
			})
		}
	}
}

// metric reads the value of the sample named exactly name (with its
// labels) from node i's /metrics; -1 if the node does not report it.
func metric(t *testing.T, c *testcluster.Cluster, i int, name string) float64 {
	t.Helper()
	v, err := c.Metric(i, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// startAvailableCluster starts 3 nodes with the fault API and /metrics,
// and returns clients of node 1 alone and node 3 alone.
func startAvailableCluster(t *testing.T) (c *testcluster.Cluster, c1, c3 *client.Client) {
	c = startCluster(t, testcluster.Options{Shards: 2, FaultInjection: true, HTTP: true})
	c1, c3 = c.NodeClient(t, 0), c.NodeClient(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := c1.Put(ctx, []byte("warm"), []byte("up")); err != nil {
		t.Fatal(err)
	}
	// A node holds writes only once it knows the cluster's version allows
	// versions (from a heartbeat answer): until then it fails them.
	c.WaitClusterVersion(t, version.Versions, 30*time.Second)
	return c, c1, c3
}

// waitReconciled polls until node i holds no tentative writes and
// key reads want (nil: absent) linearizably through cl.
func waitReconciled(t *testing.T, c *testcluster.Cluster, i int, cl *client.Client, key []byte, want []byte) {
	t.Helper()
	testcluster.WaitFor(t, reconcileTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, found, err := cl.Get(ctx, key)
		if err != nil {
			return err
		}
		if found != (want != nil) || string(v) != string(want) {
			return fmt.Errorf("%s reads %q (found %v), want %q", key, v, found, want)
		}
		if n := metric(t, c, i, "concord_tentative_writes"); n != 0 {
			return fmt.Errorf("node %d holds %v tentative writes", i+1, n)
		}
		return nil
	})
}

// TestAvailableWritesHeldAndReconciled: node 3 cut off from the others
// holds an available put (tentative), reads it back with an available
// get, while a linearizable read through node 1 does not see it; once
// healed it reconciles it, and node 1 reads it. Then an available delete
// held the same way removes the key once reconciled.
func TestAvailableWritesHeldAndReconciled(t *testing.T) {
	c, c1, c3 := startAvailableCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := []byte("avail-k")

	heal := isolate(t, c, 2)
	tentative, err := c3.PutAvailable(ctx, k, []byte("v1"))
	if err != nil || !tentative {
		t.Fatalf("available put on the cut-off node: tentative %v, err %v; want tentative", tentative, err)
	}
	if n := metric(t, c, 2, "concord_tentative_writes"); n != 1 {
		t.Fatalf("node 3 reports %v tentative writes, want 1", n)
	}
	if v, found, err := c3.Get(ctx, k, client.Available()); err != nil || !found || string(v) != "v1" {
		t.Fatalf("available get on node 3: %q %v %v; want v1", v, found, err)
	}
	if v, found, err := c1.Get(ctx, k); err != nil || found {
		t.Fatalf("linearizable get via node 1 while node 3 is cut off: %q %v %v; want not found", v, found, err)
	}
	heal()
	waitReconciled(t, c, 2, c1, k, []byte("v1"))
	if n := metric(t, c, 2, `concord_reconciled_total{outcome="applied"}`); n < 1 {
		t.Fatalf("node 3 counts %v applied reconciled writes, want at least 1", n)
	}

	heal = isolate(t, c, 2)
	tentative, err = c3.DeleteAvailable(ctx, k)
	if err != nil || !tentative {
		t.Fatalf("available delete on the cut-off node: tentative %v, err %v; want tentative", tentative, err)
	}
	if v, found, err := c3.Get(ctx, k, client.Available()); err != nil || found {
		t.Fatalf("available get on node 3 after its held delete: %q %v %v; want not found", v, found, err)
	}
	if v, found, err := c1.Get(ctx, k); err != nil || !found || string(v) != "v1" {
		t.Fatalf("linearizable get via node 1 while the delete is held: %q %v %v; want v1", v, found, err)
	}
	heal()
	waitReconciled(t, c, 2, c1, k, nil)
}

// TestAvailableLastWriterWins: a tentative put held by cut-off node 3,
// then a linearizable put of the same key through node 1: once node 3
// reconciles, its older write is superseded and the key keeps the
// linearizable value (an acknowledged linearizable write never vanishes).
func TestAvailableLastWriterWins(t *testing.T) {
	c, c1, c3 := startAvailableCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := []byte("avail-lww")

	heal := isolate(t, c, 2)
	if tentative, err := c3.PutAvailable(ctx, k, []byte("A")); err != nil || !tentative {
		t.Fatalf("available put on the cut-off node: tentative %v, err %v; want tentative", tentative, err)
	}
	if _, _, err := c1.Put(ctx, k, []byte("B")); err != nil {
		t.Fatalf("linearizable put via node 1: %v", err)
	}
	heal()
	waitReconciled(t, c, 2, c1, k, []byte("B"))
	if n := metric(t, c, 2, `concord_reconciled_total{outcome="superseded"}`); n < 1 {
		t.Fatalf("node 3 counts %v superseded reconciled writes, want at least 1", n)
	}
}
