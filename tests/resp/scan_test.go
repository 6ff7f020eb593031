package resp

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestScanGuarantees checks SCAN's promises (docs/redis.md) on real nodes
// with long keys (up to --max-key-bytes, 64 KiB, with 0x00 and 0xff bytes)
// and a 2 MiB output buffer limit: a key present for the whole scan is
// returned, once, in byte order, though keys are added and deleted between
// pages and every shard's leader moves mid-scan; expired keys never
// appear; another node refuses the cursor (ERR invalid cursor); KEYS past
// the limit answers an error and the connection stays usable. Before,
// SCAN pages of long keys passed the output buffer limit and the node
// closed the connection, and KEYS did too.
func TestScanGuarantees(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{ExtraArgs: []string{"--max-key-bytes=65536", "--redis-output-buffer-limit=2097152"}})
	ctx := ctxT(t)
	r0, r1, r2 := client(t, c, 0), client(t, c, 1), client(t, c, 2)
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	key := func(prefix string, n int) string { // prefix, then n random bytes of 0x00, 0xff, a-c
		b := []byte(prefix)
		for range n {
			b = append(b, "\x00\xffabc"[rng.IntN(5)])
		}
		return string(b)
	}
	stable := map[string]bool{}
	for i := 0; len(stable) < 90; i++ {
		n := 1 + rng.IntN(16)
		if i%2 == 0 {
			n = 65536 - 1 // at --max-key-bytes
		}
		stable[key("s", n)] = true
	}
	for k := range stable {
		must(r0.Set(ctx, k, "v", 0).Result())(t, "SET stable")
	}
	// Keys that expired before the scan: never returned.
	for i := range 20 {
		must(r0.Set(ctx, fmt.Sprintf("e%02d", i), "v", time.Millisecond).Result())(t, "SET PX 1")
	}
	testcluster.WaitFor(t, 10*time.Second, func() error {
		if n := must(r1.Exists(ctx, "e00", "e19").Result())(t, "EXISTS"); n != 0 {
			return fmt.Errorf("%d of the expiring keys still exist", n)
		}
		return nil
	})

	// SCAN on node 1, 100 keys a page (with 45 keys of 64 KiB, pages end
	// at their byte bound first): between pages, churn keys come and go,
	// and after the first page every shard's leader moves.
	var seen []string
	cur, pages := uint64(0), 0
	for {
		keys, next, err := r1.Scan(ctx, cur, "", 100).Result()
		if err != nil {
			t.Fatalf("SCAN %d (page %d): %v", cur, pages, err)
		}
		seen = append(seen, keys...)
		if pages++; next == 0 {
			break
		}
		if pages == 1 {
			// The cursor is node 1's: node 2, which has issued its own
			// (as many), refuses it.
			for c2 := uint64(0); ; {
				_, n2, err := r2.Scan(ctx, c2, "", 7).Result()
				if err != nil {
					t.Fatalf("SCAN on node 2: %v", err)
				}
				if c2 = n2; c2 == 0 {
					break
				}
			}
			wantErr(t, "node 1's cursor on node 2", r2.Scan(ctx, next, "", 7).Err(), "ERR invalid cursor")
		}
		if pages == 1 {
			moveLeaders(t, ctx, c)
		}
		churn := key("s", 1+rng.IntN(4))
		if !stable[churn] {
			must(r0.Set(ctx, churn, "c", 0).Result())(t, "SET churn")
			must(r0.Del(ctx, churn).Result())(t, "DEL churn")
		}
		must(r0.Set(ctx, key("n", 1+rng.IntN(8)), "new", 0).Result())(t, "SET new")
		cur = next
	}
	for i, k := range seen {
		if i > 0 && bytes.Compare([]byte(seen[i-1]), []byte(k)) >= 0 {
			t.Fatalf("SCAN returned %.20q before %.20q: not in byte order, or twice", seen[i-1], k)
		}
		if strings.HasPrefix(k, "e") {
			t.Fatalf("SCAN returned the expired key %q", k)
		}
	}
	got := map[string]bool{}
	for _, k := range seen {
		got[k] = true
	}
	for k := range stable {
		if !got[k] {
			t.Fatalf("SCAN (%d pages) missed %.20q (%d bytes), present for the whole scan", pages, k, len(k))
		}
	}
	t.Logf("SCAN: %d keys in %d pages", len(seen), pages)

	// The keys are 2.9 MiB: KEYS * refuses, and the connection goes on.
	wantErr(t, "KEYS * past the output buffer limit", r1.Keys(ctx, "*").Err(), "ERR KEYS matches more than 2097152 bytes")
	if keys := must(r1.Keys(ctx, "e*").Result())(t, "KEYS e* on the same connection"); len(keys) != 0 {
		t.Fatalf("KEYS e* = %q: expired keys", keys)
	}
	if n := must(r1.DBSize(ctx).Result())(t, "DBSIZE"); n < int64(len(stable)) {
		t.Fatalf("DBSIZE = %d, want at least %d", n, len(stable))
	}
}

// moveLeaders asks every user shard's leadership to move to another voter,
// and fails the test unless at least one moved.
func moveLeaders(t *testing.T, ctx context.Context, c *testcluster.Cluster) {
	t.Helper()
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t)
	moved := 0
	for _, sr := range rt.GetShards() {
		for _, r := range sr.GetShard().GetReplicas() {
			if r.GetNodeId() == sr.GetLeaderNodeId() {
				continue
			}
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := cl.TransferLeader(tctx, sr.GetShard().GetShardId(), r.GetNodeId())
			cancel()
			if err == nil {
				moved++
			}
			break
		}
	}
	if moved == 0 {
		t.Fatalf("no shard's leadership moved (of %d)", len(rt.GetShards()))
	}
	t.Logf("moved the leadership of %d of %d shards", moved, len(rt.GetShards()))
}

// TestFlushLongKeys: FLUSHDB deletes keys of 64 KiB (--max-key-bytes'
// cap) in one shard: each page's deletes fit one batch (8 MiB of keys).
// Before, a page of 1,000 keys of 64 KiB in one shard was one batch of
// 64 MiB, refused as too large: FLUSHDB failed and deleted nothing.
func TestFlushLongKeys(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Nodes: 1, Shards: 1,
		ExtraArgs: []string{"--max-key-bytes=65536", "--redis-enable-flush"}})
	ctx := ctxT(t)
	rc := client(t, c, 0)
	long := strings.Repeat("k", 65536-3)
	for i := range 200 { // 12.5 MiB of keys
		must(rc.Set(ctx, fmt.Sprintf("%s%03d", long, i), "v", 0).Result())(t, "SET")
	}
	must(rc.FlushDB(ctx).Result())(t, "FLUSHDB")
	if n := must(rc.DBSize(ctx).Result())(t, "DBSIZE"); n != 0 {
		t.Fatalf("DBSIZE after FLUSHDB = %d", n)
	}
}
