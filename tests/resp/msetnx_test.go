package resp

import (
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestMSetNX protects MSETNX's all-or-nothing over keys of one
// shard (alone, inside MULTI, and racing another MSETNX over the same keys
// through other nodes) and its CROSSSLOT refusal across shards. WATCH,
// which shares MSETNX's OP_CHECK, has TestWatch.
func TestMSetNX(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	rc := client(t, c, 0)

	t.Run("one shard", func(t *testing.T) {
		k := keysInOneShard(t, c, "nx:", 3)
		if ok := must(rc.MSetNX(ctx, k[0], "a", k[1], "b").Result())(t, "MSETNX absent keys"); !ok {
			t.Fatalf("MSETNX of absent keys = 0, want 1")
		}
		if v := must(rc.MGet(ctx, k[0], k[1]).Result())(t, "MGET"); v[0] != "a" || v[1] != "b" {
			t.Errorf("after MSETNX: %v", v)
		}
		// k[1] exists: nothing is set, not even the absent k[2].
		if ok := must(rc.MSetNX(ctx, k[2], "c", k[1], "x").Result())(t, "MSETNX one present"); ok {
			t.Errorf("MSETNX with a present key = 1, want 0")
		}
		if n := must(rc.Exists(ctx, k[2]).Result())(t, "EXISTS"); n != 0 {
			t.Errorf("a refused MSETNX set the absent key")
		}
		if v := must(rc.Get(ctx, k[1]).Result())(t, "GET"); v != "b" {
			t.Errorf("a refused MSETNX changed the present key to %q", v)
		}
		// The same key twice: every key is checked first, the last value wins.
		dup := keysInOneShard(t, c, "nxdup:", 1)[0]
		if ok := must(rc.MSetNX(ctx, dup, "1", dup, "2").Result())(t, "MSETNX duplicate"); !ok {
			t.Errorf("MSETNX k 1 k 2 of an absent k = 0")
		}
		if v := must(rc.Get(ctx, dup).Result())(t, "GET"); v != "2" {
			t.Errorf("MSETNX k 1 k 2 left %q, want 2", v)
		}
		wantErr(t, "MSETNX odd arguments", rc.Do(ctx, "MSETNX", k[0], "v", k[1]).Err(),
			"ERR wrong number of arguments for 'msetnx' command")
	})

	t.Run("across shards", func(t *testing.T) {
		a := keysInOneShard(t, c, "nxx:", 1)[0]
		b := keyInOtherShard(t, c, a)
		wantErr(t, "MSETNX across shards", rc.MSetNX(ctx, a, "1", b, "2").Err(), "CROSSSLOT")
		if n := must(rc.Exists(ctx, a, b).Result())(t, "EXISTS"); n != 0 {
			t.Errorf("a CROSSSLOT MSETNX stored %d keys", n)
		}
	})

	t.Run("in multi", func(t *testing.T) {
		k := keysInOneShard(t, c, "nxm:", 4)
		must(rc.Set(ctx, k[0], "old", 0).Result())(t, "SET")
		pipe := rc.TxPipeline()
		set1 := pipe.Set(ctx, k[1], "1", 0)
		refused := pipe.MSetNX(ctx, k[2], "2", k[0], "new")
		set3 := pipe.Set(ctx, k[3], "3", 0)
		applied := pipe.MSetNX(ctx, k[2], "2")
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("EXEC: %v", err)
		}
		if set1.Val() != "OK" || refused.Val() || set3.Val() != "OK" || !applied.Val() {
			t.Errorf("EXEC replies: %q, %v, %q, %v; want OK, false, OK, true", set1.Val(), refused.Val(), set3.Val(), applied.Val())
		}
		if v := must(rc.MGet(ctx, k[0], k[1], k[2], k[3]).Result())(t, "MGET"); fmt.Sprint(v) != "[old 1 2 3]" {
			t.Errorf("after EXEC: %v, want [old 1 2 3]", v)
		}
	})

	t.Run("racing", func(t *testing.T) {
		// Two clients, through different nodes, MSETNX the same two keys
		// in opposite orders: each round exactly one wins, both keys.
		// Per-key SETNX could leave one key to each.
		r1, r2 := client(t, c, 1), client(t, c, 2)
		for round := range 20 {
			k := keysInOneShard(t, c, fmt.Sprintf("nxr%d:", round), 2)
			var wg sync.WaitGroup
			var won [2]bool
			for i, r := range []*redis.Client{r1, r2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v := fmt.Sprint(i)
					a, b := k[i], k[1-i]
					ok, err := r.MSetNX(ctx, a, v, b, v).Result()
					if err != nil {
						t.Errorf("MSETNX racing: %v", err)
					}
					won[i] = ok
				}()
			}
			wg.Wait()
			v := must(rc.MGet(ctx, k[0], k[1]).Result())(t, "MGET")
			if won[0] == won[1] || v[0] != v[1] {
				t.Fatalf("round %d: winners %v, keys %v; want one winner owning both keys", round, won, v)
			}
		}
	})

}
