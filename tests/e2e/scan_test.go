package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestScanAcrossShards: 500 keys with random names, spread over 16 shards,
// come back from a scan exactly once each and in byte order; paging with a
// small limit and [start, end) bounds give exactly the expected slices.
func TestScanAcrossShards(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := context.Background()
	cl := c.Client(t)
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	// Random names of 1 to 24 bytes, including the extreme bytes 0x00 and 0xff.
	const alphabet = "\x00\xff-_/.0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	want := map[string]string{}
	for len(want) < 500 {
		k := make([]byte, 1+rng.IntN(24))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		want[string(k)] = fmt.Sprintf("v%d", rng.Uint64())
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := startBurst(ctx, cl, keys, func(k string) string { return want[k] }, 8, 30*time.Second)
	if len(b.wait()) != len(keys) {
		t.Fatalf("writes failed: %v", b.err())
	}
	rt, err := c.RoutingTable(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	shards := map[uint64]bool{}
	for _, k := range keys {
		shards[testcluster.ShardOf(rt, []byte(k))] = true
	}
	if len(shards) != testcluster.DefaultShards {
		t.Fatalf("500 random keys landed in only %d shards", len(shards))
	}

	all, err := cl.Scan(ctx, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "full scan", all, keys, want)

	// Page by page, 7 keys at a time, with the server's next_start.
	var paged []client.KeyValue
	var start []byte
	pages := 0
	for {
		resp, err := cl.ScanPage(ctx, start, nil, 7)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(resp.GetKvs()) > 7 {
			t.Fatalf("page %d has %d keys, limit 7", pages, len(resp.GetKvs()))
		}
		for _, kv := range resp.GetKvs() {
			paged = append(paged, client.KeyValue{Key: kv.GetKey(), Value: kv.GetValue()})
		}
		if !resp.GetMore() {
			break
		}
		if bytes.Compare(resp.GetNextStart(), start) <= 0 {
			t.Fatalf("page %d: next_start %q does not advance past %q", pages, resp.GetNextStart(), start)
		}
		start = resp.GetNextStart()
		if pages > 200 {
			t.Fatal("more than 200 pages of 7 for 500 keys")
		}
	}
	checkScan(t, "paged scan (limit 7)", paged, keys, want)
	t.Logf("paged scan: %d pages of up to 7 keys", pages)

	// [start, end) bounds on existing keys, between keys, and a limit.
	got, err := cl.Scan(ctx, []byte(keys[123]), []byte(keys[321]), 0)
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "scan [keys[123], keys[321])", got, keys[123:321], want)
	got, err = cl.Scan(ctx, []byte(keys[50]+"\x00"), []byte(keys[60]+"\x00"), 0)
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "scan [keys[50]+0x00, keys[60]+0x00)", got, keys[51:61], want)
	got, err = cl.Scan(ctx, []byte(keys[400]), nil, 25)
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "scan from keys[400], limit 25", got, keys[400:425], want)
	got, err = cl.Scan(ctx, []byte(keys[499]+"\x00"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "scan past the last key", got, nil, want)

	// Every node's own replicas hold the same set (stale scans).
	for i := 0; i < c.N(); i++ {
		waitStaleHasAll(t, c, i, want, 30*time.Second)
		got, err := c.StaleScan(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("stale scan of node %d: %d keys, want %d", i, len(got), len(want))
		}
	}
}

// checkScan checks that got holds exactly the keys wantKeys, in order, with
// their values from want.
func checkScan(t *testing.T, what string, got []client.KeyValue, wantKeys []string, want map[string]string) {
	t.Helper()
	gotKeys := make([]string, 0, len(got))
	for _, kv := range got {
		gotKeys = append(gotKeys, string(kv.Key))
	}
	if !slices.Equal(gotKeys, wantKeys) {
		i := 0
		for i < len(gotKeys) && i < len(wantKeys) && gotKeys[i] == wantKeys[i] {
			i++
		}
		t.Fatalf("%s: got %d keys, want %d; they differ from position %d (got %q, want %q)",
			what, len(gotKeys), len(wantKeys), i, at(gotKeys, i), at(wantKeys, i))
	}
	for _, kv := range got {
		if string(kv.Value) != want[string(kv.Key)] {
			t.Fatalf("%s: %q has value %q, want %q", what, kv.Key, kv.Value, want[string(kv.Key)])
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<end>"
}

// TestScanEdges: keys at the edges of the key space (0x00, 0xff, keys of
// --max-key-bytes made of them) come back in byte order with every page
// limit, a limit of exactly the keys left ends the scan (more false) and
// one less leaves exactly one key, a page may start just past a key at the
// size limit, an empty or inverted range is refused (InvalidArgument), and
// a key that expired is in no scan, linearizable or stale.
func TestScanEdges(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client(t)
	const maxKey = 4096 // the default --max-key-bytes
	keys := []string{"\x00", "\x00\x00", "\xff", "\xff\x00", strings.Repeat("\x00", maxKey),
		strings.Repeat("\xff", maxKey), strings.Repeat("\xff", maxKey-1) + "\x00", "\x7f" + strings.Repeat("a", maxKey-1)}
	for i := range 30 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	want := map[string]string{}
	for _, k := range keys {
		want[k] = "v" + k[:1]
		if _, _, err := cl.Put(ctx, []byte(k), []byte(want[k])); err != nil {
			t.Fatalf("put %.8q (%d bytes): %v", k, len(k), err)
		}
	}
	if _, _, err := cl.Put(ctx, []byte("k15x"), []byte("gone"), client.TTL(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	testcluster.WaitFor(t, 10*time.Second, func() error { // past the expiry on the nodes' clocks
		if _, found, err := cl.Get(ctx, []byte("k15x")); err != nil || found {
			return fmt.Errorf("k15x found %v, %v", found, err)
		}
		return nil
	})

	for _, limit := range []uint32{1, 2, 7, uint32(len(keys) - 1), uint32(len(keys)), uint32(len(keys) + 1)} {
		var got []client.KeyValue
		var start []byte
		for pages := 1; ; pages++ {
			resp, err := cl.ScanPage(ctx, start, nil, limit)
			if err != nil {
				t.Fatalf("limit %d, page %d from %.8q: %v", limit, pages, start, err)
			}
			for _, kv := range resp.GetKvs() {
				got = append(got, client.KeyValue{Key: kv.GetKey(), Value: kv.GetValue()})
			}
			left := len(keys) - len(got)
			if resp.GetMore() != (left > 0) {
				t.Fatalf("limit %d, page %d: %d keys, more %v with %d keys left", limit, pages, len(resp.GetKvs()), resp.GetMore(), left)
			}
			if !resp.GetMore() {
				break
			}
			start = resp.GetNextStart()
		}
		checkScan(t, fmt.Sprintf("paged scan, limit %d", limit), got, keys, want)
	}
	// From just past the largest key, at the size limit: nothing.
	last := keys[len(keys)-1]
	got, err := cl.Scan(ctx, []byte(last+"\x00"), nil, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("scan from past the last key (%d bytes) = %d pairs, %v", len(last)+1, len(got), err)
	}
	// [k10, k10) is empty and [k20, k10) inverted: both refused.
	for _, r := range [][2]string{{"k10", "k10"}, {"k20", "k10"}} {
		if _, err := cl.Scan(ctx, []byte(r[0]), []byte(r[1]), 0); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("scan [%s, %s) = %v, want InvalidArgument", r[0], r[1], err)
		}
	}
	for i := range c.N() {
		got, err := c.StaleScan(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["k15x"]; ok {
			t.Fatalf("node %d's stale scan returned the expired key", i)
		}
	}
}
