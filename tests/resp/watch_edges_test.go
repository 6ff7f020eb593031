package resp

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestWatchUnwatchInsideMulti: in Redis, UNWATCH inside MULTI is queued
// like any command (+QUEUED; processCommand runs only EXEC, DISCARD, MULTI,
// WATCH, QUIT and RESET at once), so EXEC still checks the keys watched
// before MULTI and answers null when one changed; the queued UNWATCH's
// "OK" is then part of EXEC's array. Concord runs UNWATCH at once
// (inMulti), which forgets the watched keys in the middle of the
// transaction: EXEC then applies although a watched key changed.
func TestWatchUnwatchInsideMulti(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	a, other := client(t, c, 0), client(t, c, 1)
	k := keysInOneShard(t, c, "wunw:", 1)[0]
	must(other.Set(ctx, k, "v0", 0).Result())(t, "SET")

	cn := a.Conn()
	t.Cleanup(func() { _ = cn.Close() })
	must(cn.Do(ctx, "WATCH", k).Result())(t, "WATCH")
	must(other.Set(ctx, k, "theirs", 0).Result())(t, "SET by another client")

	must(cn.Do(ctx, "MULTI").Result())(t, "MULTI")
	if v, err := cn.Do(ctx, "UNWATCH").Result(); err != nil || v != "QUEUED" {
		t.Errorf("UNWATCH inside MULTI: %v, %v; Redis queues it (QUEUED)", v, err)
	}
	must(cn.Do(ctx, "SET", k, "mine").Result())(t, "SET queued")
	v, err := cn.Do(ctx, "EXEC").Result()
	if !errors.Is(err, redis.Nil) {
		t.Errorf("EXEC after the watched key changed (UNWATCH queued inside MULTI): %v, %v; want a null reply", v, err)
	}
	if got := must(other.Get(ctx, k).Result())(t, "GET"); got != "theirs" {
		t.Errorf("watched key = %q after EXEC; the transaction applied although the key changed after WATCH (want %q)", got, "theirs")
	}
}

// TestWatchValueEdges: values a by-value comparison could get wrong must
// not abort an unchanged transaction (an empty string, binary bytes, a key
// with an expiry, a key watched again in a second WATCH, through a node
// that forwards EXEC), and a change must abort with the RESP2 null too.
func TestWatchValueEdges(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	other := client(t, c, 0)
	k := keysInOneShard(t, c, "wedge:", 4)
	for node := range 3 { // whichever node leads, EXEC is forwarded from one of them
		for _, proto := range []int{2, 3} {
			rc := client(t, c, node, func(o *redis.Options) { o.Protocol = proto })
			cn := rc.Conn()
			must(other.Set(ctx, k[0], "", 0).Result())(t, "SET empty")
			must(other.Set(ctx, k[1], "\x00\xff\r\n\x00", 0).Result())(t, "SET binary")
			must(other.Set(ctx, k[2], "ttl", time.Hour).Result())(t, "SET EX")
			must(other.Del(ctx, k[3]).Result())(t, "DEL")
			must(cn.Do(ctx, "WATCH", k[0], k[1], k[0]).Result())(t, "WATCH")
			must(cn.Do(ctx, "WATCH", k[2], k[1], k[3]).Result())(t, "WATCH again")
			_, err := cn.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k[3], "applied", 0)
				return nil
			})
			if err != nil {
				t.Errorf("node %d RESP%d: EXEC with nothing changed: %v", node, proto, err)
			}
			must(other.Del(ctx, k[3]).Result())(t, "DEL")
			// Now a change: the empty string becomes absent.
			must(cn.Do(ctx, "WATCH", k[0], k[1]).Result())(t, "WATCH")
			must(other.Del(ctx, k[0]).Result())(t, "DEL")
			must(cn.Do(ctx, "MULTI").Result())(t, "MULTI")
			must(cn.Do(ctx, "SET", k[3], "x").Result())(t, "SET")
			if err := cn.Do(ctx, "EXEC").Err(); !errors.Is(err, redis.Nil) {
				t.Errorf("node %d RESP%d: EXEC after an empty watched value was deleted: %v, want null", node, proto, err)
			}
			if n := must(other.Exists(ctx, k[3]).Result())(t, "EXISTS"); n != 0 {
				t.Errorf("node %d RESP%d: the aborted transaction applied", node, proto)
			}
			_ = cn.Close()
		}
	}
}
