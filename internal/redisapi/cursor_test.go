package redisapi

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// sortedKV is a keyspace of fixed keys that Scan pages through in byte
// order from the request's start as KV.Scan does: a page ends after limit
// keys, or after the key that brings it to max_bytes (0: 64 MiB).
type sortedKV struct {
	*fakeKV
	keys [][]byte // sorted
}

// newSortedKV holds n keys "k000", "k001", ..., each padded to size bytes
// (if longer).
func newSortedKV(n, size int) *sortedKV {
	s := &sortedKV{fakeKV: &fakeKV{counters: map[string]int64{}}}
	for i := range n {
		k := fmt.Appendf(nil, "k%03d", i)
		if len(k) < size {
			k = append(k, bytes.Repeat([]byte{'.'}, size-len(k))...)
		}
		s.keys = append(s.keys, k)
	}
	return s
}

func (s *sortedKV) Scan(_ context.Context, r *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	maxBytes := int(r.GetMaxBytes())
	if maxBytes == 0 {
		maxBytes = 64 << 20
	}
	i, _ := slices.BinarySearchFunc(s.keys, r.GetStart(), bytes.Compare)
	out := &concordpb.ScanResponse{}
	for size := 0; i < len(s.keys) && len(out.Kvs) < int(r.GetLimit()) && size < maxBytes; i++ {
		out.Kvs = append(out.Kvs, &concordpb.KeyValue{Key: s.keys[i]})
		size += len(s.keys[i])
	}
	if i < len(s.keys) {
		out.More, out.NextStart = true, append(slices.Clone(s.keys[i-1]), 0)
	}
	return out, nil
}

// scanPage sends SCAN with args on c and returns the cursor and keys, or
// the error text.
func scanPage(c *sockClient, args ...string) (cursor string, keys []string, errText string) {
	c.t.Helper()
	c.send(encode("SCAN " + strings.Join(args, " ")))
	v := c.reply()
	if v.Type == '-' {
		return "", nil, v.Str
	}
	if len(v.Elems) != 2 {
		c.t.Fatalf("SCAN %v answered %v", args, v)
	}
	for _, k := range v.Elems[1].Elems {
		keys = append(keys, k.Str)
	}
	return v.Elems[0].Str, keys, ""
}

// TestScanCursorOfAnotherNodeIsRefused protects the cursor check: a cursor
// is an id in the issuing node's table, so a node that did not issue it
// (another node, or this one after a restart) must refuse it with
// ERR invalid cursor, not continue some other scan. Before, every node
// numbered its cursors 1, 2, 3...: node B took node A's cursor 1 for its
// own cursor 1 and went on from B's position, and the client, believing
// it had continued its scan, silently missed the keys in between.
func TestScanCursorOfAnotherNodeIsRefused(t *testing.T) {
	kv := newSortedKV(30, 0)
	a := serveOnSocket(t, New(kv, Config{}))
	b := serveOnSocket(t, New(kv, Config{}))
	restarted := serveOnSocket(t, New(kv, Config{})) // a node's new process

	curA, keys, e := scanPage(a, "0", "COUNT", "10")
	if e != "" || len(keys) != 10 || curA == "0" {
		t.Fatalf("SCAN 0 COUNT 10 on A = %s %v %s", curA, keys, e)
	}
	// B and the restarted node issue cursors of their own scans.
	for _, c := range []*sockClient{b, restarted} {
		if cur, keys, e := scanPage(c, "0", "COUNT", "20"); e != "" || len(keys) != 20 || cur == "0" {
			t.Fatalf("SCAN 0 COUNT 20 = %s %v %s", cur, keys, e)
		}
	}
	for name, c := range map[string]*sockClient{"another node": b, "a restarted node": restarted} {
		if cur, keys, e := scanPage(c, curA, "COUNT", "100"); !strings.HasPrefix(e, "ERR invalid cursor") {
			t.Errorf("%s took A's cursor %s: answered cursor %s and %v (error %q), want ERR invalid cursor", name, curA, cur, keys, e)
		}
	}
	// A itself continues its scan where it left off.
	if cur, keys, e := scanPage(a, curA, "COUNT", "100"); e != "" || cur != "0" || len(keys) != 20 || keys[0] != "k010" {
		t.Fatalf("SCAN %s on A = %s %v %s; want k010..k029 and cursor 0", curA, cur, keys, e)
	}
}

// TestCursorTableBoundedInBytes protects the cursor table's memory: it
// keeps the newest cursors within maxCursorBytes of continuation keys as
// well as maxCursors. Before, only the count was bounded: 16,384 cursors
// after keys of 64 KiB (--max-key-bytes' cap) held 1 GiB, for any client
// that called SCAN 16,384 times.
func TestCursorTableBoundedInBytes(t *testing.T) {
	t.Parallel()
	var tab cursorTable
	tab.m = map[uint64][]byte{}
	start := bytes.Repeat([]byte{'k'}, 64<<10+1) // a key at the cap, and its 0
	var ids []uint64
	for range maxCursors {
		ids = append(ids, tab.put(start)) // one slice: the test holds 64 KiB
	}
	held := 0
	for _, v := range tab.m {
		held += len(v)
	}
	if held > maxCursorBytes {
		t.Fatalf("the table holds %d cursors, %d bytes of keys; the bound is %d", len(tab.m), held, maxCursorBytes)
	}
	if _, ok := tab.get(ids[len(ids)-1]); !ok {
		t.Fatal("the newest cursor was forgotten")
	}
	if _, ok := tab.get(ids[0]); ok {
		t.Fatal("the oldest cursor was kept past the byte bound")
	}
	// Short keys: the count bounds the table, and the newest are kept.
	for range maxCursors {
		ids = append(ids, tab.put([]byte("k")))
	}
	if len(tab.m) != maxCursors {
		t.Fatalf("after %d cursors of short keys the table holds %d, want %d", maxCursors, len(tab.m), maxCursors)
	}
	if _, ok := tab.get(ids[len(ids)-maxCursors]); !ok {
		t.Fatal("one of the newest maxCursors cursors was forgotten")
	}
}

// TestKeyspaceRepliesWithinTheOutputBufferLimit protects SCAN and KEYS on
// long keys: a SCAN page is cut to fit the connection's output buffer
// limit (with a cursor to go on), and KEYS whose matches would pass it
// answers an error, the connection staying usable. Before, SCAN asked for
// pages of up to 64 MiB of keys and KEYS gathered up to 10,000 keys (640
// MiB at 64 KiB each): the reply passed the limit and the node closed the
// connection unanswered, having held it all first.
func TestKeyspaceRepliesWithinTheOutputBufferLimit(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	kv := newSortedKV(100, 64<<10) // 6.4 MiB of keys
	c := serveOnSocket(t, New(kv, Config{OutputBufferLimit: limit}))

	cur, pages, seen := "0", 0, []string{}
	for {
		next, keys, e := scanPage(c, cur, "COUNT", "10000")
		if e != "" {
			t.Fatalf("SCAN %s COUNT 10000: %s", cur, e)
		}
		seen = append(seen, keys...)
		if pages++; next == "0" {
			break
		}
		cur = next
	}
	if len(seen) != len(kv.keys) || pages < 7 {
		t.Fatalf("SCAN returned %d keys in %d pages, want all %d in pages of at most %d bytes", len(seen), pages, len(kv.keys), limit)
	}
	for i, k := range seen {
		if k != string(kv.keys[i]) {
			t.Fatalf("SCAN's key %d is %.8q, want %.8q", i, k, kv.keys[i])
		}
	}

	c.send(encode("KEYS *"))
	if v := c.reply(); v.Type != '-' || !strings.Contains(v.Str, "use SCAN") {
		t.Fatalf("KEYS * over 6.4 MiB of keys (limit 1 MiB) = %.80v, want an error", v)
	}
	c.send(encode("KEYS k00*")) // 10 keys, 640 KiB: within the limit
	if v := c.reply(); len(v.Elems) != 10 {
		t.Fatalf("KEYS k00* = %d keys (%.80v), want 10", len(v.Elems), v)
	}
}
