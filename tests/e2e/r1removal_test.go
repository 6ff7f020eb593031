package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestOneReplicaNodeRemovalDrains: with one replica per shard, `node
// remove` moves every replica of the node off it and marks it removed. A
// move passes through two voters, and its last step (two voters to the
// leader alone) was refused by the shard's leader as "fewer than a
// majority", so the shards stayed on two voters and the node stayed
// leaving for good. Every key written before stays readable.
func TestOneReplicaNodeRemovalDrains(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Nodes: 2, Replicas: 1, Shards: 4})
	cl := newTestClient(t, c.Addr(0))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := seqKeys("r1-", 40)
	for _, k := range keys {
		if _, _, err := cl.Put(ctx, []byte(k), []byte(valueOf(k))); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	var id uint64
	stateOf := func(want string) func() error {
		return func() error {
			nodes, err := nodeList(t, c)
			if err != nil {
				return err
			}
			at := atAddr(nodes, c.Addr(1))
			if len(at) == 0 {
				return fmt.Errorf("no node at %s", c.Addr(1))
			}
			if id = at[0].ID; at[0].State != want {
				return fmt.Errorf("node %d is %q with %d replicas, want %q", id, at[0].State, at[0].Replicas, want)
			}
			return nil
		}
	}
	testcluster.WaitFor(t, 60*time.Second, stateOf("up"))
	exited := c.ExpectExit(1)
	if out, err := cli(t, c, "node", "remove", strconv.FormatUint(id, 10)); err != nil || !strings.Contains(out, "leaving") {
		t.Fatalf("node remove %d: %q, %v; want it leaving", id, out, err)
	}
	testcluster.WaitFor(t, 90*time.Second, stateOf("removed"))
	exited(30 * time.Second)
	for _, k := range keys {
		v, found, err := cl.Get(ctx, []byte(k))
		if err != nil || !found || string(v) != valueOf(k) {
			t.Fatalf("get %s after the removal: %q, %v, %v; want %q", k, v, found, err, valueOf(k))
		}
	}
}
