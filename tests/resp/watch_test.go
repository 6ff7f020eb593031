package resp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestWatch protects WATCH's optimistic locking: EXEC applies nothing and
// answers null when a watched key's value changed, appeared, vanished or
// expired since WATCH, through any node; it applies when nothing changed,
// and after UNWATCH, DISCARD, RESET or an EXEC the keys are no longer
// watched. Counters incremented by go-redis's Watch helper from several
// nodes lose no increment.
func TestWatch(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	a, other := client(t, c, 0), client(t, c, 1) // a watches; other writes through another node

	// conn pins one connection of a: WATCH and EXEC must share it.
	conn := func(t *testing.T) *redis.Conn {
		cn := a.Conn()
		t.Cleanup(func() { _ = cn.Close() })
		return cn
	}
	// exec runs MULTI, SET key value, EXEC on cn and reports whether the
	// transaction applied (false: EXEC answered null).
	exec := func(t *testing.T, cn *redis.Conn, key, value string) bool {
		t.Helper()
		_, err := cn.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, value, 0)
			return nil
		})
		if errors.Is(err, redis.TxFailedErr) {
			return false
		}
		if err != nil {
			t.Fatalf("MULTI/EXEC: %v", err)
		}
		return true
	}
	get := func(t *testing.T, key string) string {
		t.Helper()
		v, err := other.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return "(nil)"
		}
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v
	}
	watchCmd := func(cn *redis.Conn, keys ...string) error {
		args := []any{"WATCH"}
		for _, k := range keys {
			args = append(args, k)
		}
		return cn.Do(ctx, args...).Err()
	}
	watch := func(t *testing.T, cn *redis.Conn, keys ...string) {
		t.Helper()
		if err := watchCmd(cn, keys...); err != nil {
			t.Fatalf("WATCH %v: %v", keys, err)
		}
	}

	t.Run("unchanged applies", func(t *testing.T) {
		k := keysInOneShard(t, c, "w1:", 2)
		must(other.Set(ctx, k[0], "v0", 0).Result())(t, "SET")
		cn := conn(t)
		watch(t, cn, k[0], k[1]) // one present, one absent
		if !exec(t, cn, k[0], "mine") {
			t.Fatal("EXEC aborted although no watched key changed")
		}
		if v := get(t, k[0]); v != "mine" {
			t.Errorf("after EXEC: %q, want mine", v)
		}
	})

	for _, tc := range []struct {
		name   string
		before string // "" = absent when watched
		change func(key string) error
	}{
		{"changed", "v0", func(k string) error { return other.Set(ctx, k, "theirs", 0).Err() }},
		{"deleted", "v0", func(k string) error { return other.Del(ctx, k).Err() }},
		{"created", "", func(k string) error { return other.Set(ctx, k, "theirs", 0).Err() }},
		{"appended", "v0", func(k string) error { return other.Append(ctx, k, "x").Err() }},
	} {
		t.Run(tc.name+" aborts", func(t *testing.T) {
			k := keysInOneShard(t, c, "w2"+tc.name+":", 2)
			if tc.before != "" {
				must(other.Set(ctx, k[0], tc.before, 0).Result())(t, "SET")
			}
			cn := conn(t)
			watch(t, cn, k[0])
			if err := tc.change(k[0]); err != nil {
				t.Fatal(err)
			}
			want := get(t, k[0])
			// The transaction writes another key of the shard: it must
			// not apply either.
			_, err := cn.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k[1], "tx", 0)
				p.Set(ctx, k[0], "tx", 0)
				return nil
			})
			if !errors.Is(err, redis.TxFailedErr) {
				t.Fatalf("EXEC after a watched key was %s: %v, want redis.TxFailedErr (null reply)", tc.name, err)
			}
			if v := get(t, k[0]); v != want {
				t.Errorf("watched key after the aborted EXEC: %q, want %q", v, want)
			}
			if v := get(t, k[1]); v != "(nil)" {
				t.Errorf("the aborted transaction wrote %q to another key", v)
			}
			// EXEC forgot the watch: the next transaction applies.
			if !exec(t, cn, k[0], "again") {
				t.Errorf("a transaction after an aborted EXEC aborted: the watch outlived EXEC")
			}
		})
	}

	t.Run("expired aborts", func(t *testing.T) {
		k := keysInOneShard(t, c, "w3:", 1)[0]
		must(other.Set(ctx, k, "short", 300*time.Millisecond).Result())(t, "SET PX")
		cn := conn(t)
		watch(t, cn, k)
		for get(t, k) != "(nil)" {
			time.Sleep(20 * time.Millisecond)
		}
		if exec(t, cn, k, "late") {
			t.Errorf("EXEC applied although the watched key expired after WATCH")
		}
		if v := get(t, k); v != "(nil)" {
			t.Errorf("the aborted transaction wrote %q", v)
		}
	})

	t.Run("unwatch discard reset", func(t *testing.T) {
		k := keysInOneShard(t, c, "w4:", 1)[0]
		for _, forget := range []func(cn *redis.Conn) error{
			func(cn *redis.Conn) error { return cn.Do(ctx, "UNWATCH").Err() },
			func(cn *redis.Conn) error {
				_, err := cn.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, "MULTI")
					p.Do(ctx, "DISCARD")
					return nil
				})
				return err
			},
			func(cn *redis.Conn) error { return cn.Do(ctx, "RESET").Err() },
		} {
			cn := conn(t)
			watch(t, cn, k)
			if err := forget(cn); err != nil {
				t.Fatal(err)
			}
			must(other.Set(ctx, k, "theirs", 0).Result())(t, "SET")
			if !exec(t, cn, k, "mine") {
				t.Errorf("EXEC aborted on a key no longer watched")
			}
		}
	})

	t.Run("empty transaction", func(t *testing.T) {
		k := keysInOneShard(t, c, "w5:", 1)[0]
		cn := conn(t)
		watch(t, cn, k)
		if err := cn.Process(ctx, redis.NewStatusCmd(ctx, "MULTI")); err != nil {
			t.Fatal(err)
		}
		v, err := cn.Do(ctx, "EXEC").Result()
		if err != nil || fmt.Sprint(v) != "[]" {
			t.Errorf("EXEC of nothing with an unchanged watched key: %v, %v; want []", v, err)
		}
		watch(t, cn, k)
		must(other.Set(ctx, k, "theirs", 0).Result())(t, "SET")
		must(cn.Do(ctx, "MULTI").Result())(t, "MULTI")
		if err := cn.Do(ctx, "EXEC").Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("EXEC of nothing after a watched key changed: %v, want a null reply", err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		k := keysInOneShard(t, c, "w6:", 1)[0]
		o := keyInOtherShard(t, c, k)
		cn := conn(t)
		wantErr(t, "WATCH across shards", watchCmd(cn, k, o), "CROSSSLOT")
		watch(t, cn, k)
		wantErr(t, "WATCH of a second shard", watchCmd(cn, o), "CROSSSLOT")
		_, err := cn.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, o, "x", 0)
			return nil
		})
		wantErr(t, "EXEC outside the watched shard", err, "CROSSSLOT")
		if v := get(t, o); v != "(nil)" {
			t.Errorf("a refused EXEC wrote %q", v)
		}
		many := make([]string, 257)
		for i := range many {
			many[i] = fmt.Sprintf("w6many:%d", i)
		}
		wantErr(t, "WATCH of 257 keys", watchCmd(cn, many...), "ERR WATCH: at most 256 keys")
		must(cn.Do(ctx, "MULTI").Result())(t, "MULTI")
		wantErr(t, "WATCH inside MULTI", cn.Do(ctx, "WATCH", k).Err(), "ERR WATCH inside MULTI is not allowed")
		must(cn.Do(ctx, "DISCARD").Result())(t, "DISCARD")
		watch(t, cn, k)
		if info := must(cn.Do(ctx, "CLIENT", "INFO").Text())(t, "CLIENT INFO"); !strings.Contains(info, " watch=1 ") {
			t.Errorf("CLIENT INFO with one watched key: %q, want watch=1", info)
		}
	})

	t.Run("counter", func(t *testing.T) {
		// The pattern WATCH exists for: read, compute, write back inside
		// MULTI, retry on a null EXEC. Clients on every node race on one
		// counter; a check that let a stale write through loses increments.
		const clients, each = 6, 15
		k := keysInOneShard(t, c, "w7:", 1)[0]
		var wg sync.WaitGroup
		var retries sync.Map
		for i := range clients {
			rc := client(t, c, i%3)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					for attempt := 0; ; attempt++ {
						err := rc.Watch(ctx, func(tx *redis.Tx) error {
							n, err := tx.Get(ctx, k).Int()
							if err != nil && !errors.Is(err, redis.Nil) {
								return err
							}
							_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
								p.Set(ctx, k, strconv.Itoa(n+1), 0)
								return nil
							})
							return err
						}, k)
						if err == nil {
							break
						}
						if !errors.Is(err, redis.TxFailedErr) || attempt > 1000 {
							t.Errorf("client %d: %v", i, err)
							return
						}
						retries.Store(i, attempt+1)
					}
				}
			}()
		}
		wg.Wait()
		if v := get(t, k); v != strconv.Itoa(clients*each) {
			t.Fatalf("counter = %s after %d increments", v, clients*each)
		}
		n := 0
		retries.Range(func(any, any) bool { n++; return true })
		t.Logf("%d of %d clients retried at least once", n, clients)
	})
}
