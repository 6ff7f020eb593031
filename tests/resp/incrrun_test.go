package resp

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

// TestPipelinedIncrsOfOneKeyCoalesced protects INCR runs end to end (a
// leader proposes a run of pipelined INCRs of one key as one op,
// kv.Coalesce, once the cluster's version allows it): on a real cluster
// that raised its version, pipelines of INCRs through every node (the
// key's leader and nodes that forward) each answer the value they made,
// one after another; four clients pipelining at once get every value
// from 1 to the total exactly once; an overflow partway answers the
// INCRs before it and refuses those after, and a value that is not an
// integer refuses them all; every replica holds the final value; and the
// leaders report the saved ops in concord_incrs_coalesced_total.
func TestPipelinedIncrsOfOneKeyCoalesced(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{HTTP: true})
	ctx := ctxT(t)
	// Every node has learned a cluster version that allows INCR runs.
	testcluster.WaitFor(t, 30*time.Second, func() error {
		for i := range 3 {
			if v := scrapeCounter(t, c.HTTPAddr(i), "concord_cluster_version"); v < int(version.IncrRepeat) {
				return fmt.Errorf("node %d at cluster version %d", i, v)
			}
		}
		return nil
	})

	const n = 400
	key := "incrrun:one"
	total := int64(0)
	for node := range 3 {
		pipe := client(t, c, node).Pipeline()
		cmds := make([]*redis.IntCmd, n)
		for j := range cmds {
			cmds[j] = pipe.Incr(ctx, key)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("node %d: pipeline: %v", node, err)
		}
		for j, cmd := range cmds {
			if v, err := cmd.Result(); err != nil || v != total+int64(j)+1 {
				t.Fatalf("node %d: INCR %d answered %d, %v; want %d", node, j, v, err, total+int64(j)+1)
			}
		}
		total += n
	}

	// Four clients at once, one key: each value made exactly once.
	shared := "incrrun:shared"
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe := client(t, c, w%3).Pipeline()
			cmds := make([]*redis.IntCmd, n)
			for j := range cmds {
				cmds[j] = pipe.Incr(ctx, shared)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, cmd := range cmds {
				seen[cmd.Val()]++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for v := int64(1); v <= 4*n; v++ {
		if seen[v] != 1 {
			t.Fatalf("value %d answered %d times to four pipelining clients, want once (%d distinct values)", v, seen[v], len(seen))
		}
	}

	// Overflow partway, and a value that is not an integer.
	rc := client(t, c, 1)
	edge := "incrrun:edge"
	must(rc.Set(ctx, edge, strconv.FormatInt(math.MaxInt64-3, 10), 0).Result())(t, "SET")
	pipe := rc.Pipeline()
	over := make([]*redis.IntCmd, 8)
	for j := range over {
		over[j] = pipe.Incr(ctx, edge)
	}
	_, _ = pipe.Exec(ctx)
	for j, cmd := range over {
		v, err := cmd.Result()
		switch {
		case j < 3 && (err != nil || v != math.MaxInt64-2+int64(j)):
			t.Fatalf("INCR %d below the bound: %d, %v; want %d", j, v, err, math.MaxInt64-2+int64(j))
		case j >= 3 && (err == nil || !strings.Contains(err.Error(), "overflow")):
			t.Fatalf("INCR %d past the bound: %d, %v; want an overflow error", j, v, err)
		}
	}
	text := "incrrun:text"
	must(rc.Set(ctx, text, "abc", 0).Result())(t, "SET")
	pipe = rc.Pipeline()
	bad := make([]*redis.IntCmd, 5)
	for j := range bad {
		bad[j] = pipe.Incr(ctx, text)
	}
	_, _ = pipe.Exec(ctx)
	for j, cmd := range bad {
		if _, err := cmd.Result(); err == nil || !strings.Contains(err.Error(), "not an integer") {
			t.Fatalf("INCR %d of a text value: %v, want not an integer", j, err)
		}
	}

	want := map[string]string{key: strconv.FormatInt(total, 10), shared: strconv.Itoa(4 * n),
		edge: strconv.FormatInt(math.MaxInt64, 10), text: "abc"}
	testcluster.WaitFor(t, 30*time.Second, func() error {
		for i := range 3 {
			for k, v := range want {
				r, err := c.StaleGet(ctx, i, []byte(k))
				if err != nil {
					return err
				}
				if string(r.GetValue()) != v {
					return fmt.Errorf("node %d's replica holds %s=%q, want %q", i, k, r.GetValue(), v)
				}
			}
		}
		return nil
	})

	coalesced := 0
	for i := range 3 {
		coalesced += scrapeCounter(t, c.HTTPAddr(i), "concord_incrs_coalesced_total")
	}
	if coalesced < n {
		t.Fatalf("concord_incrs_coalesced_total sums to %d over the nodes after %d pipelined INCRs, want at least %d", coalesced, 7*n, n)
	}
	t.Logf("%d INCRs coalesced", coalesced)
}
