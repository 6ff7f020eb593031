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
// order from the request's start, limit keys at a time, as KV.Scan does.
type sortedKV struct {
	*fakeKV
	keys [][]byte // sorted
}

func newSortedKV(n int) *sortedKV {
	s := &sortedKV{fakeKV: &fakeKV{counters: map[string]int64{}}}
	for i := range n {
		s.keys = append(s.keys, fmt.Appendf(nil, "k%03d", i))
	}
	return s
}

func (s *sortedKV) Scan(_ context.Context, r *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	i, _ := slices.BinarySearchFunc(s.keys, r.GetStart(), bytes.Compare)
	out := &concordpb.ScanResponse{}
	for ; i < len(s.keys) && len(out.Kvs) < int(r.GetLimit()); i++ {
		out.Kvs = append(out.Kvs, &concordpb.KeyValue{Key: s.keys[i]})
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
	kv := newSortedKV(30)
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
