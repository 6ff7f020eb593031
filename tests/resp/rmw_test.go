package resp

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestReadModifyWrite covers the commands built on the state machine's
// read-modify-write ops, their errors, SET's conditions, and expiry.
func TestReadModifyWrite(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	rc := client(t, c, 0)
	r2 := client(t, c, 2, resp2)

	t.Run("counters", func(t *testing.T) {
		if n := must(rc.Incr(ctx, "c:n").Result())(t, "INCR"); n != 1 {
			t.Errorf("INCR of an absent key = %d", n)
		}
		if n := must(rc.IncrBy(ctx, "c:n", 41).Result())(t, "INCRBY"); n != 42 {
			t.Errorf("INCRBY = %d", n)
		}
		if n := must(r2.Decr(ctx, "c:n").Result())(t, "DECR"); n != 41 {
			t.Errorf("DECR = %d", n)
		}
		if n := must(r2.DecrBy(ctx, "c:n", 50).Result())(t, "DECRBY"); n != -9 {
			t.Errorf("DECRBY = %d", n)
		}
		if f := must(rc.IncrByFloat(ctx, "c:f", 1.5).Result())(t, "INCRBYFLOAT"); f != 1.5 {
			t.Errorf("INCRBYFLOAT = %v", f)
		}
		if f := must(rc.IncrByFloat(ctx, "c:f", -0.25).Result())(t, "INCRBYFLOAT"); f != 1.25 {
			t.Errorf("INCRBYFLOAT = %v", f)
		}
		must(rc.Set(ctx, "c:s", "abc", 0).Result())(t, "SET")
		wantErr(t, "INCR of text", rc.Incr(ctx, "c:s").Err(), "ERR value is not an integer or out of range")
		wantErr(t, "INCRBYFLOAT of text", rc.IncrByFloat(ctx, "c:s", 1).Err(), "ERR value is not a valid float")
		wantErr(t, "INCRBY bad arg", rc.Do(ctx, "INCRBY", "c:n", "x").Err(), "ERR value is not an integer or out of range")
		must(rc.Set(ctx, "c:max", "9223372036854775807", 0).Result())(t, "SET")
		wantErr(t, "INCR overflow", rc.Incr(ctx, "c:max").Err(), "ERR increment or decrement would overflow")
		if v := must(rc.Get(ctx, "c:max").Result())(t, "GET"); v != "9223372036854775807" {
			t.Errorf("a failed INCR changed the value to %q", v)
		}
	})

	t.Run("INCRBYFLOAT reads and adds as Redis", func(t *testing.T) {
		// Once the cluster's version carries the increment as text, every
		// node (leader or forwarder) answers as redis-server 7.0.15 does
		// (its answers, one key, these increments in this order).
		awaitIncrFloatText(t, c)
		for i := range c.N() {
			node := client(t, c, i)
			k := fmt.Sprintf("c:lf%d", i)
			steps := []struct{ incr, want, err string }{
				{"3.0000000000000001", "3.0000000000000001", ""}, // 17 digits: a double would add 3
				{"0x10", "19.0000000000000001", ""},              // strtold reads hexadecimal
				{"1e400", "1" + strings.Repeat("0", 19) + "28188068394758651458", ""},
				{"-1e400", "0", ""}, // past a double's range, within a long double's; 19 was lost in the sum
				{"0.33333333333333333333", "0.33333333333333333", ""},
				{"inf", "", "ERR increment would produce NaN or Infinity"},
				{"1e5000", "", "ERR value is not a valid float"},
				{" 1", "", "ERR value is not a valid float"},
			}
			for _, s := range steps {
				got, err := node.Do(ctx, "INCRBYFLOAT", k, s.incr).Text()
				if s.err != "" {
					wantErr(t, "INCRBYFLOAT "+s.incr, err, s.err)
					continue
				}
				if err != nil || !strings.HasPrefix(got, s.want) {
					t.Errorf("node %d: INCRBYFLOAT %s = %.60s, %v; want %s", i, s.incr, got, err, s.want)
				}
			}
			if v := must(node.Get(ctx, k).Result())(t, "GET"); v != "0.33333333333333333" {
				t.Errorf("node %d: after the failed increments the value is %q", i, v)
			}
			must(node.Set(ctx, k, "inf", 0).Result())(t, "SET")
			wantErr(t, "INCRBYFLOAT of a stored inf", node.IncrByFloat(ctx, k, 1).Err(), "ERR increment would produce NaN or Infinity")
		}
	})

	t.Run("concurrent INCR is atomic", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 4 {
			node := client(t, c, i%c.N())
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					if err := node.Incr(ctx, "c:race").Err(); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("INCR: %v", err)
		}
		if v := must(rc.Get(ctx, "c:race").Result())(t, "GET"); v != "100" {
			t.Errorf("100 concurrent INCRs through three nodes left %q", v)
		}
	})

	t.Run("strings", func(t *testing.T) {
		if n := must(rc.Append(ctx, "a:k", "Hello").Result())(t, "APPEND"); n != 5 {
			t.Errorf("APPEND = %d", n)
		}
		if n := must(rc.Append(ctx, "a:k", " World").Result())(t, "APPEND"); n != 11 {
			t.Errorf("APPEND = %d", n)
		}
		if n := must(rc.SetRange(ctx, "a:k", 6, "Redis").Result())(t, "SETRANGE"); n != 11 {
			t.Errorf("SETRANGE = %d", n)
		}
		if n := must(rc.SetRange(ctx, "a:pad", 3, "x").Result())(t, "SETRANGE"); n != 4 {
			t.Errorf("SETRANGE with padding = %d", n)
		}
		if v := must(rc.Get(ctx, "a:pad").Result())(t, "GET"); v != "\x00\x00\x00x" {
			t.Errorf("SETRANGE padding = %q", v)
		}
		wantErr(t, "SETRANGE negative", rc.SetRange(ctx, "a:k", -1, "x").Err(), "ERR offset is out of range")
		if v := must(rc.Get(ctx, "a:k").Result())(t, "GET"); v != "Hello Redis" {
			t.Errorf("after APPEND and SETRANGE: %q", v)
		}
		if v := must(rc.GetSet(ctx, "a:k", "new").Result())(t, "GETSET"); v != "Hello Redis" {
			t.Errorf("GETSET = %q", v)
		}
		if v := must(rc.GetDel(ctx, "a:k").Result())(t, "GETDEL"); v != "new" {
			t.Errorf("GETDEL = %q", v)
		}
		if _, err := rc.GetDel(ctx, "a:k").Result(); err != redis.Nil {
			t.Errorf("GETDEL of a deleted key: %v", err)
		}
		if ok := must(rc.SetNX(ctx, "a:nx", "1", 0).Result())(t, "SETNX"); !ok {
			t.Errorf("SETNX of an absent key = false")
		}
		if ok := must(rc.SetNX(ctx, "a:nx", "2", 0).Result())(t, "SETNX"); ok {
			t.Errorf("SETNX of a present key = true")
		}
		if _, err := rc.SetXX(ctx, "a:xx", "1", 0).Result(); err != nil {
			t.Errorf("SET XX of an absent key: %v", err)
		}
		if n := must(rc.Exists(ctx, "a:xx").Result())(t, "EXISTS"); n != 0 {
			t.Errorf("SET XX created an absent key")
		}
		if _, err := rc.SetArgs(ctx, "a:nx", "3", redis.SetArgs{Mode: "NX"}).Result(); err != redis.Nil {
			t.Errorf("SET NX of a present key: %v, want nil reply", err)
		}
		if v := must(rc.SetArgs(ctx, "a:nx", "4", redis.SetArgs{Mode: "XX", Get: true}).Result())(t, "SET XX GET"); v != "1" {
			t.Errorf("SET XX GET = %q", v)
		}
		if v := must(rc.Get(ctx, "a:nx").Result())(t, "GET"); v != "4" {
			t.Errorf("after SET XX GET: %q", v)
		}
		if ok := must(rc.MSetNX(ctx, "a:one", "1").Result())(t, "MSETNX"); !ok {
			t.Errorf("MSETNX of one absent key = false")
		}
	})

	t.Run("expiry", func(t *testing.T) {
		must(rc.Set(ctx, "e:k", "v", time.Hour).Result())(t, "SET EX")
		if ttl := must(rc.TTL(ctx, "e:k").Result())(t, "TTL"); ttl < 59*time.Minute || ttl > time.Hour {
			t.Errorf("TTL = %v", ttl)
		}
		if ttl := must(rc.PTTL(ctx, "e:k").Result())(t, "PTTL"); ttl < 59*time.Minute || ttl > time.Hour {
			t.Errorf("PTTL = %v", ttl)
		}
		if ok := must(rc.Persist(ctx, "e:k").Result())(t, "PERSIST"); !ok {
			t.Errorf("PERSIST = false")
		}
		if ttl := must(rc.TTL(ctx, "e:k").Result())(t, "TTL"); ttl != -1 {
			t.Errorf("TTL after PERSIST = %v, want -1", ttl)
		}
		if ttl := must(rc.TTL(ctx, "e:none").Result())(t, "TTL"); ttl != -2 {
			t.Errorf("TTL of an absent key = %v, want -2", ttl)
		}
		if ok := must(rc.Expire(ctx, "e:k", time.Hour).Result())(t, "EXPIRE"); !ok {
			t.Errorf("EXPIRE = false")
		}
		if ok := must(rc.ExpireNX(ctx, "e:k", time.Minute).Result())(t, "EXPIRE NX"); ok {
			t.Errorf("EXPIRE NX on a key with a TTL = true")
		}
		if ok := must(rc.ExpireGT(ctx, "e:k", 2*time.Hour).Result())(t, "EXPIRE GT"); !ok {
			t.Errorf("EXPIRE GT with a later time = false")
		}
		at := time.Now().Add(3 * time.Hour).Truncate(time.Second)
		must(rc.ExpireAt(ctx, "e:k", at).Result())(t, "EXPIREAT")
		if got := must(rc.ExpireTime(ctx, "e:k").Result())(t, "EXPIRETIME"); got != time.Duration(at.Unix())*time.Second {
			t.Errorf("EXPIRETIME = %v, want %v", got, at.Unix())
		}
		if ok := must(rc.Expire(ctx, "e:none", time.Hour).Result())(t, "EXPIRE absent"); ok {
			t.Errorf("EXPIRE of an absent key = true")
		}
		if v := must(rc.GetEx(ctx, "e:k", 0).Result())(t, "GETEX"); v != "v" {
			t.Errorf("GETEX = %q", v)
		}
		if v := must(rc.Do(ctx, "GETEX", "e:k", "PERSIST").Text())(t, "GETEX PERSIST"); v != "v" {
			t.Errorf("GETEX PERSIST = %q", v)
		}
		if ttl := must(rc.TTL(ctx, "e:k").Result())(t, "TTL"); ttl != -1 {
			t.Errorf("TTL after GETEX PERSIST = %v", ttl)
		}
		must(rc.Do(ctx, "SET", "e:keep", "1", "EX", 3600).Result())(t, "SET EX")
		must(rc.Do(ctx, "SET", "e:keep", "2", "KEEPTTL").Result())(t, "SET KEEPTTL")
		if ttl := must(rc.TTL(ctx, "e:keep").Result())(t, "TTL"); ttl < 59*time.Minute {
			t.Errorf("TTL after SET KEEPTTL = %v", ttl)
		}
		must(rc.Set(ctx, "e:keep", "3", 0).Result())(t, "SET")
		if ttl := must(rc.TTL(ctx, "e:keep").Result())(t, "TTL"); ttl != -1 {
			t.Errorf("a plain SET kept the TTL: %v", ttl)
		}
		must(rc.Do(ctx, "PSETEX", "e:short", 300, "v").Result())(t, "PSETEX")
		must(rc.SetEx(ctx, "e:setex", "v", time.Hour).Result())(t, "SETEX")
		testcluster.WaitFor(t, 10*time.Second, func() error {
			if n, err := rc.Exists(ctx, "e:short").Result(); err != nil || n != 0 {
				return fmt.Errorf("key set with PSETEX 300 still exists (%d, %v)", n, err)
			}
			return nil
		})
		if ok := must(rc.Expire(ctx, "e:setex", -time.Second).Result())(t, "EXPIRE negative"); !ok {
			t.Errorf("EXPIRE with a negative time = false")
		}
		if n := must(rc.Exists(ctx, "e:setex").Result())(t, "EXISTS"); n != 0 {
			t.Errorf("EXPIRE with a negative time did not delete the key")
		}
	})

	t.Run("multi", func(t *testing.T) {
		keys := keysInOneShard(t, c, "rmwtx:", 2)
		pipe := rc.TxPipeline()
		incr := pipe.IncrBy(ctx, keys[0], 5)
		pipe.Set(ctx, keys[1], "text", 0)
		bad := pipe.Incr(ctx, keys[1])
		app := pipe.Append(ctx, keys[1], "!")
		_, err := pipe.Exec(ctx)
		// As in Redis, an op that fails at EXEC fails alone.
		if incr.Val() != 5 || app.Val() != 5 {
			t.Errorf("EXEC: INCRBY %d, APPEND %d (err %v)", incr.Val(), app.Val(), err)
		}
		wantErr(t, "INCR of text in EXEC", bad.Err(), "ERR value is not an integer")
	})
}

// TestExpiryWithNodeKilled: keys with TTLs expire on schedule across the
// cluster while a node is down, keys without stay, and the restarted node
// serves the same answers.
func TestExpiryWithNodeKilled(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	rc := client(t, c, 1)
	pipe := rc.Pipeline()
	for i := range 100 {
		pipe.Set(ctx, fmt.Sprintf("x:short:%d", i), "v", 2*time.Second)
		pipe.Set(ctx, fmt.Sprintf("x:long:%d", i), "v", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline of SETs: %v", err)
	}
	c.Kill(0)
	// Through the survivors: the short keys go, the long ones stay.
	testcluster.WaitFor(t, 60*time.Second, func() error {
		for _, node := range []*redis.Client{client(t, c, 1), client(t, c, 2)} {
			keys, err := node.Keys(ctx, "x:*").Result()
			if err != nil {
				return err
			}
			if len(keys) != 100 {
				return fmt.Errorf("KEYS x:* = %d keys, want the 100 without TTL", len(keys))
			}
		}
		return nil
	})
	c.Start(0)
	c.WaitReady(t, readyTimeout)
	r0 := client(t, c, 0)
	testcluster.WaitFor(t, 30*time.Second, func() error {
		n, err := r0.Exists(ctx, "x:short:7", "x:long:7").Result()
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("EXISTS short and long key through the restarted node = %d, want 1", n)
		}
		return nil
	})
	conn := r0.Conn()
	defer conn.Close()
	must(conn.Do(ctx, "CONCORD.CONSISTENCY", "stale").Result())(t, "stale")
	testcluster.WaitFor(t, 30*time.Second, func() error {
		_, err := conn.Get(ctx, "x:short:3").Result()
		if !errors.Is(err, redis.Nil) {
			return fmt.Errorf("stale GET of an expired key on the restarted node: %v", err)
		}
		if v, err := conn.Get(ctx, "x:long:3").Result(); err != nil || v != "v" {
			return fmt.Errorf("stale GET of a kept key on the restarted node: %q, %v", v, err)
		}
		return nil
	})
}
