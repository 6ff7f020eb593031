package grpcapi

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storepb"
)

// fillShards gives f keys k00..k(n-1), each in the shard routing puts it in,
// and returns them sorted.
func fillShards(f *fakeNode, n int) []string {
	var all []string
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		s := f.shardOfKey(k)
		f.data[s] = append(f.data[s], &concordpb.KeyValue{Key: []byte(k), Value: []byte("v")})
		all = append(all, k)
	}
	for _, kvs := range f.data {
		slices.SortFunc(kvs, func(a, b *concordpb.KeyValue) int { return bytes.Compare(a.GetKey(), b.GetKey()) })
	}
	return all
}

// TestScanPagesThroughEveryShardInKeyOrder protects the scan contract: each
// page is the next limit keys of the whole range, in order, and next_start
// continues exactly after the last key returned.
func TestScanPagesThroughEveryShardInKeyOrder(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	want := fillShards(f, 30)
	kv := NewKV(f, testLimits)
	var got []string
	start := []byte(nil)
	for page := 0; ; page++ {
		resp, err := kv.Scan(context.Background(), &concordpb.ScanRequest{Start: start, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetKvs()) > 7 {
			t.Fatalf("page %d has %d keys, limit 7", page, len(resp.GetKvs()))
		}
		for _, e := range resp.GetKvs() {
			got = append(got, string(e.GetKey()))
		}
		if !resp.GetMore() {
			break
		}
		last := resp.GetKvs()[len(resp.GetKvs())-1].GetKey()
		if !bytes.Equal(resp.GetNextStart(), append(slices.Clone(last), 0)) {
			t.Fatalf("next_start %q after last key %q", resp.GetNextStart(), last)
		}
		start = resp.GetNextStart()
	}
	if !slices.Equal(got, want) {
		t.Fatalf("scanned\n%v\nwant\n%v", got, want)
	}
}

// TestScanDefaultLimitAndEnd protects the defaults: no limit means 1,000
// (so 30 keys come in one page), and end is exclusive.
func TestScanDefaultLimitAndEnd(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	fillShards(f, 30)
	kv := NewKV(f, testLimits)
	resp, err := kv.Scan(context.Background(), &concordpb.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetKvs()) != 30 || resp.GetMore() || resp.GetNextStart() != nil {
		t.Fatalf("%d keys, more=%v, next_start=%q; want 30, false, none", len(resp.GetKvs()), resp.GetMore(), resp.GetNextStart())
	}
	resp, err = kv.Scan(context.Background(), &concordpb.ScanRequest{Start: []byte("k10"), End: []byte("k20")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetKvs()); n != 10 || string(resp.GetKvs()[0].GetKey()) != "k10" || string(resp.GetKvs()[9].GetKey()) != "k19" {
		t.Fatalf("[k10, k20) gave %d keys: %v", n, resp.GetKvs())
	}
}

// TestMergedScanCutsAtLimit protects the merge itself: more shards' keys
// than limit are cut to the smallest limit keys and reported as more.
func TestMergedScanCutsAtLimit(t *testing.T) {
	kvs := func(keys ...string) (out []*concordpb.KeyValue) {
		for _, k := range keys {
			out = append(out, &concordpb.KeyValue{Key: []byte(k)})
		}
		return out
	}
	resp := mergedScan(4, []shardPage{{kvs: kvs("a", "d")}, {kvs: kvs("b", "c")}}, 3)
	var got []string
	for _, e := range resp.GetKvs() {
		got = append(got, string(e.GetKey()))
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("got %v, want [a b c]", got)
	}
	if !resp.GetMore() || string(resp.GetNextStart()) != "c\x00" || resp.GetHeader().GetServedByNodeId() != 4 {
		t.Fatalf("more=%v next_start=%q served_by=%d", resp.GetMore(), resp.GetNextStart(), resp.GetHeader().GetServedByNodeId())
	}
}

// TestMergedScanStopsAtAShortPage protects the merge of pages that ended
// at their byte bound: a shard's page that ended early (more) after "b"
// says nothing of its keys past "b", so the merge ends at "b" (another
// shard's "c" and "d" wait for the next page, which starts after "b"),
// and reports more though fewer than limit keys came back.
func TestMergedScanStopsAtAShortPage(t *testing.T) {
	kvs := func(keys ...string) (out []*concordpb.KeyValue) {
		for _, k := range keys {
			out = append(out, &concordpb.KeyValue{Key: []byte(k)})
		}
		return out
	}
	resp := mergedScan(4, []shardPage{{kvs: kvs("a", "b"), more: true}, {kvs: kvs("c", "d")}}, 10)
	var got []string
	for _, e := range resp.GetKvs() {
		got = append(got, string(e.GetKey()))
	}
	if !slices.Equal(got, []string{"a", "b"}) || !resp.GetMore() || string(resp.GetNextStart()) != "b\x00" {
		t.Fatalf("got %v more=%v next_start=%q, want [a b], more, \"b\\x00\"", got, resp.GetMore(), resp.GetNextStart())
	}
}

// TestBatchReportsProposalOutcomes protects how a proposal's outcome reaches
// the client: an error code the state machine set (e.g. a session's
// sequence number out of order) and an ambiguous proposal.
func TestBatchReportsProposalOutcomes(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	kv := NewKV(f, testLimits)
	ctx := context.Background()
	f.proposeResult = &storepb.CommandResult{ErrorCode: uint32(codes.FailedPrecondition), ErrorMessage: "seq 3 is behind 5"}
	_, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k")})
	wantStatus(t, err, codes.FailedPrecondition, "seq 3 is behind 5")
	f.proposeResult, f.proposeErr = nil, replica.ErrAmbiguous
	_, err = kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k")})
	wantStatus(t, err, codes.Unknown, "ambiguous: "+replica.ErrAmbiguous.Error())
}

// TestExpiryThroughTheFrontDoor: a Put's ttl_ms reaches the state machine
// in the op, the command carries the leader's stamp (from which the TTL is
// placed) and its value size limit (which results must respect), and a
// Get, linearizable or stale, reports the expiry the read returns.
func TestExpiryThroughTheFrontDoor(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	kv := NewKV(f, testLimits)
	ctx := context.Background()
	if _, err := kv.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v"), TtlMs: 1500}); err != nil {
		t.Fatal(err)
	}
	cmd := f.proposals[0]
	if op := cmd.GetKv().GetOps()[0]; op.GetTtlMs() != 1500 || cmd.GetUnixNanos() == 0 || cmd.GetKv().GetMaxValueBytes() != int64(testLimits.MaxValueBytes) {
		t.Fatalf("proposed %v; want the TTL, a stamp and the value limit", cmd)
	}
	s := f.shardOfKey("k")
	f.data[s] = append(f.data[s], &concordpb.KeyValue{Key: []byte("k"), Value: []byte("v")})
	f.expiry = map[string]int64{"k": 1234}
	for _, c := range []concordpb.Consistency{concordpb.Consistency_LINEARIZABLE, concordpb.Consistency_STALE} {
		resp, err := kv.Get(ctx, &concordpb.GetRequest{Header: &concordpb.RequestHeader{Consistency: c}, Key: []byte("k")})
		if err != nil || !resp.GetFound() || resp.GetExpireAtUnixMs() != 1234 {
			t.Fatalf("%v Get = %v, %v; want expire_at_unix_ms 1234", c, resp, err)
		}
	}
}
