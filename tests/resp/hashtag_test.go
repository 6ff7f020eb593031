package resp

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestHashTags: a new cluster hashes keys by their Redis Cluster hash tag,
// every descriptor says so, and so keys that share a tag share a shard on
// every node: MSETNX, MULTI/EXEC and WATCH span them, as in Redis Cluster,
// while keys with different tags still get CROSSSLOT.
func TestHashTags(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	tab := routingTable(t, c)
	for _, d := range tab.Shards() {
		if d.GetKeyHash() != routing.KeyHashTags {
			t.Fatalf("shard %d's descriptor has key_hash %d, want %d (hash tags)", d.GetShardId(), d.GetKeyHash(), routing.KeyHashTags)
		}
	}
	// A tag whose keys' whole-key hashes fall in different shards, and a
	// second tag of another shard.
	var tag string
	var keys []string
	for i := 0; tag == ""; i++ {
		cand := fmt.Sprintf("acct:%d", i)
		ks := []string{"{" + cand + "}:balance", "{" + cand + "}:log", "audit:{" + cand + "}"}
		if routing.Hash([]byte(ks[0]))/(1<<60) != routing.Hash([]byte(ks[1]))/(1<<60) {
			tag, keys = cand, ks
		}
	}
	other := ""
	for i := 0; other == ""; i++ {
		k := fmt.Sprintf("{other:%d}:x", i)
		if tab.Lookup([]byte(k)).GetShardId() != tab.Lookup([]byte(keys[0])).GetShardId() {
			other = k
		}
	}
	for _, k := range keys[1:] {
		if tab.Lookup([]byte(k)).GetShardId() != tab.Lookup([]byte(keys[0])).GetShardId() {
			t.Fatalf("%q and %q (tag %q) are in different shards", k, keys[0], tag)
		}
	}

	rc := client(t, c, 0)
	if ok := must(rc.MSetNX(ctx, keys[0], "100", keys[1], "opened").Result())(t, "MSETNX of one tag"); !ok {
		t.Fatalf("MSETNX over one tag = 0")
	}
	if _, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.DecrBy(ctx, keys[0], 30)
		p.Append(ctx, keys[1], ",paid 30")
		p.Set(ctx, keys[2], "1", 0)
		return nil
	}); err != nil {
		t.Fatalf("MULTI/EXEC over one tag: %v", err)
	}
	err := rc.Watch(ctx, func(tx *redis.Tx) error {
		n := must(tx.Get(ctx, keys[0]).Int())(t, "GET in Watch")
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, keys[0], n-20, 0)
			p.Append(ctx, keys[1], ",paid 20")
			return nil
		})
		return err
	}, keys[0], keys[1])
	if err != nil {
		t.Fatalf("WATCH/MULTI/EXEC over one tag: %v", err)
	}
	for i := range 3 { // every node routes by the tag (forwarding included)
		r := client(t, c, i)
		if v := must(r.MGet(ctx, keys[0], keys[1], keys[2]).Result())(t, "MGET"); fmt.Sprint(v) != "[50 opened,paid 30,paid 20 1]" {
			t.Errorf("node %d: MGET %v = %v", i, keys, v)
		}
	}
	wantErr(t, "MSETNX over two tags", rc.MSetNX(ctx, keys[0], "x", other, "y").Err(), "CROSSSLOT")
}
