package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

// readyTimeout bounds how long a fresh or restarted cluster may take to elect
// a leader for every shard. Generous: several clusters share two cores.
const readyTimeout = 60 * time.Second

// startCluster starts a 3-node cluster and waits until it serves.
func startCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	c := testcluster.New(t, opts)
	c.WaitReady(t, readyTimeout)
	return c
}

// burst writes keys from several goroutines, each key once with value
// val(key), and records which writes were acknowledged.
type burst struct {
	acked  atomic.Int64
	failed atomic.Int64
	done   chan struct{}

	mu       sync.Mutex
	ackedKV  map[string]string // guarded by mu
	firstErr error             // guarded by mu
}

// startBurst writes keys with workers goroutines. Each Put gets perPut to
// finish (the client retries within it). The burst ends when every key was
// tried or ctx ends.
func startBurst(ctx context.Context, cl *client.Client, keys []string, val func(string) string, workers int, perPut time.Duration) *burst {
	b := &burst{done: make(chan struct{}), ackedKV: map[string]string{}}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				k, v := keys[i], val(keys[i])
				pctx, cancel := context.WithTimeout(ctx, perPut)
				_, _, err := cl.Put(pctx, []byte(k), []byte(v))
				cancel()
				b.mu.Lock()
				if err == nil {
					b.ackedKV[k] = v
					b.acked.Add(1)
				} else {
					b.failed.Add(1)
					if b.firstErr == nil {
						b.firstErr = fmt.Errorf("put %q: %w", k, err)
					}
				}
				b.mu.Unlock()
			}
		}()
	}
	go func() {
		wg.Wait()
		close(b.done)
	}()
	return b
}

// wait waits for the burst to end and returns the acknowledged writes.
func (b *burst) wait() map[string]string {
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ackedKV
}

func (b *burst) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.firstErr
}

// waitAcked polls until at least n writes of b were acknowledged.
func waitAcked(t *testing.T, b *burst, n int64, timeout time.Duration) {
	t.Helper()
	testcluster.WaitFor(t, timeout, func() error {
		if got := b.acked.Load(); got < n {
			return fmt.Errorf("%d writes acknowledged (%d failed, first error %v), waiting for %d", got, b.failed.Load(), b.err(), n)
		}
		return nil
	})
}

// seqKeys returns n keys prefix0000000 ... in order.
func seqKeys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%07d", prefix, i)
	}
	return out
}

func valueOf(k string) string { return "value-of-" + k }

// missing compares what a node holds with want and describes the difference,
// or returns nil if every key of want is there with its value.
func missing(got, want map[string]string) error {
	var absent, wrong []string
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			absent = append(absent, k)
		case g != v:
			wrong = append(wrong, fmt.Sprintf("%s=%q (want %q)", k, g, v))
		}
	}
	if len(absent) == 0 && len(wrong) == 0 {
		return nil
	}
	sort.Strings(absent)
	sort.Strings(wrong)
	return fmt.Errorf("%d of %d keys missing (e.g. %s), %d with a wrong value (e.g. %s)",
		len(absent), len(want), sample(absent), len(wrong), sample(wrong))
}

func sample(s []string) string {
	if len(s) > 5 {
		return strings.Join(s[:5], ", ") + ", ..."
	}
	return strings.Join(s, ", ")
}

// waitStaleHasAll polls until node i's own replicas hold every key of want
// with its value, and returns how long that took. Each poll first checks that
// node i serves stale reads of every shard from a local replica (a node
// without one forwards, which would make the check vacuous), then compares a
// stale scan of node i with want.
func waitStaleHasAll(t *testing.T, c *testcluster.Cluster, i int, want map[string]string, timeout time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	return testcluster.WaitFor(t, timeout, func() error {
		if err := servedLocally(ctx, c, i, want); err != nil {
			return err
		}
		got, err := c.StaleScan(ctx, i)
		if err != nil {
			return fmt.Errorf("stale scan of node %d: %w", i, err)
		}
		if err := missing(got, want); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		return nil
	})
}

// servedLocally checks, for one key of want in each shard, that a stale read
// sent to node i is answered by node i itself.
func servedLocally(ctx context.Context, c *testcluster.Cluster, i int, want map[string]string) error {
	id, err := c.NodeID(ctx, i)
	if err != nil {
		return err
	}
	rt, err := c.RoutingTable(ctx, i)
	if err != nil {
		return err
	}
	probe := map[uint64]string{}
	for k := range want {
		if s := testcluster.ShardOf(rt, []byte(k)); probe[s] == "" {
			probe[s] = k
		}
	}
	for s, k := range probe {
		resp, err := c.StaleGet(ctx, i, []byte(k))
		if err != nil {
			return fmt.Errorf("stale get %q on node %d: %w", k, i, err)
		}
		if by := resp.GetHeader().GetServedByNodeId(); by != id {
			return fmt.Errorf("node %d (id %d) has no replica of shard %d yet: its stale read of %q was served by node %d", i, id, s, k, by)
		}
	}
	return nil
}
