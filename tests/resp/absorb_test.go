package resp

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestPipelinedSetsOfOneKeyAbsorbed protects write absorption end to end
// (kv.Absorb, at the leader's merged proposal and at a forwarding node):
// pipelines of many SETs of one key through every node (so through the
// shard's leader and through nodes that forward) each answer OK, a GET
// after each returns its last value, and every replica holds that value;
// SETs mixed with commands that read the key (GET, APPEND, INCR, SET GET)
// answer as run one by one; a plain SET after one with a TTL clears the
// TTL and one with a TTL after a plain SET keeps its own; and the nodes
// report the dropped writes in concord_writes_absorbed_total.
func TestPipelinedSetsOfOneKeyAbsorbed(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{HTTP: true})
	ctx := ctxT(t)
	const sets = 500
	key := "absorb:one"
	for node := range 3 {
		rc := client(t, c, node)
		pipe := rc.Pipeline()
		var cmds []*redis.StatusCmd
		for j := range sets {
			cmds = append(cmds, pipe.Set(ctx, key, fmt.Sprintf("%d-%d", node, j), 0))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("node %d: pipeline: %v", node, err)
		}
		for j, cmd := range cmds {
			if v, err := cmd.Result(); err != nil || v != "OK" {
				t.Fatalf("node %d: SET %d answered %q, %v", node, j, v, err)
			}
		}
		last := fmt.Sprintf("%d-%d", node, sets-1)
		for other := range 3 {
			if got := must(client(t, c, other).Get(ctx, key).Result())(t, "GET"); got != last {
				t.Fatalf("GET through node %d after node %d's pipeline: %q, want %q", other, node, got, last)
			}
		}
		// Every replica applied the same (absorbed) entries.
		testcluster.WaitFor(t, 30*time.Second, func() error {
			for i := range 3 {
				r, err := c.StaleGet(ctx, i, []byte(key))
				if err != nil {
					return err
				}
				if string(r.GetValue()) != last {
					return fmt.Errorf("node %d's replica holds %q, want %q", i, r.GetValue(), last)
				}
			}
			return nil
		})
	}

	rc := client(t, c, 1)
	pipe := rc.Pipeline()
	k := "absorb:mixed"
	set1 := pipe.Set(ctx, k, "a", 0)
	get1 := pipe.Get(ctx, k)
	pipe.Set(ctx, k, "b", 0)
	app := pipe.Append(ctx, k, "x")
	pipe.Set(ctx, k, "7", 0)
	pipe.Set(ctx, k, "8", 0)
	incr := pipe.Incr(ctx, k)
	pipe.Set(ctx, k, "c", 0)
	prev := pipe.SetArgs(ctx, k, "d", redis.SetArgs{Get: true})
	pipe.Set(ctx, k, "e", 0)
	pipe.Set(ctx, k, "f", 0)
	ttlKey, ttlKey2 := "absorb:ttl", "absorb:ttl2"
	pipe.Set(ctx, ttlKey, "t", time.Hour)
	pipe.Set(ctx, ttlKey, "u", 0)
	pipe.Set(ctx, ttlKey2, "t", 0)
	pipe.Set(ctx, ttlKey2, "u", time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if set1.Val() != "OK" || get1.Val() != "a" || app.Val() != 2 || incr.Val() != 9 || prev.Val() != "c" {
		t.Fatalf("mixed pipeline: SET %q, GET %q (want a), APPEND %d (want 2), INCR %d (want 9), SET GET %q (want c)",
			set1.Val(), get1.Val(), app.Val(), incr.Val(), prev.Val())
	}
	if got := must(rc.Get(ctx, k).Result())(t, "GET"); got != "f" {
		t.Fatalf("after the mixed pipeline: %q, want f", got)
	}
	if ttl := must(rc.TTL(ctx, ttlKey).Result())(t, "TTL"); ttl != -1 {
		t.Fatalf("a SET without EX after one with EX: TTL %v, want none (-1)", ttl)
	}
	if ttl := must(rc.TTL(ctx, ttlKey2).Result())(t, "TTL"); ttl < 59*time.Minute {
		t.Fatalf("a SET with EX 3600 after a plain one: TTL %v", ttl)
	}

	absorbed := 0
	for i := range 3 {
		absorbed += scrapeCounter(t, c.HTTPAddr(i), "concord_writes_absorbed_total")
	}
	// 3 pipelines of 500 SETs in write chains of at most 64 commands:
	// up to 3 × (500 - 8) writes left out, wherever they merged; fewer
	// when the node reads a pipeline in several pieces (each its own
	// chains), but never none.
	if absorbed < sets {
		t.Fatalf("concord_writes_absorbed_total sums to %d over the nodes, want at least %d", absorbed, sets)
	}
	t.Logf("%d writes absorbed", absorbed)
}

// scrapeCounter reads an unlabelled counter from a node's /metrics.
func scrapeCounter(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, v)
			}
			return int(f)
		}
	}
	t.Fatalf("%s not on %s/metrics", name, addr)
	return 0
}
