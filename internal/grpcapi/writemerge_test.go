package grpcapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// TestForwardedWritesMerge protects the merging of forwarded write
// batches: while one is in flight to the leader, the batches that arrive
// queue and go out as ONE proposal, each answered with its own results;
// a merged batch the leader refuses whole is sent again part by part, so
// only the bad part fails; a batch with a session never merges.
func TestForwardedWritesMerge(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	shard := f2.shardOfKey("k")
	keys := keysOfShard(f2, shard, 4)
	gate := make(chan struct{})
	f2.proposeGate, f2.echo = gate, true
	serve(t, f2, f1)
	kv1 := NewKV(f1, testLimits)
	put := func(k string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte("v")}
	}
	write := func(h *concordpb.RequestHeader, ops ...*concordpb.Op) chan batchAnswer {
		return sendBatch(kv1, h, ops...)
	}
	queued := func() int { return kv1.wmerge.waiting(shard) } // -1 until a batch is taken and in flight
	check := func(name string, ch chan batchAnswer, want ...string) { t.Helper(); checkAnswer(t, name, ch, want...) }

	first := write(nil, put(keys[0]))
	waitFor(t, func() bool { return queued() == 0 }) // taken, and blocked in the leader's proposal
	a := write(nil, put(keys[1]), put(keys[2]))
	b := write(nil, put(keys[3]))
	c := write(nil, put(keys[0]))
	waitFor(t, func() bool { return queued() == 3 })
	gate <- struct{}{} // the first batch
	gate <- struct{}{} // the merged one
	check("first", first, keys[0])
	check("a", a, keys[1], keys[2])
	check("b", b, keys[3])
	check("c", c, keys[0])
	if n := f2.proposalCount(); n != 2 {
		t.Fatalf("%d proposals at the leader for a write and three queued behind it; want 2", n)
	}

	// A bad part: the merged batch is refused whole, then each part goes
	// alone: the good ones apply, the bad one alone gets the error.
	waitFor(t, func() bool { return queued() == -1 }) // the first phase's sender has seen its queue empty
	first = write(nil, put(keys[0]))
	waitFor(t, func() bool { return queued() == 0 })
	good := write(nil, put(keys[1]))
	bad := write(nil, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(keys[2]), Value: []byte("bad")})
	waitFor(t, func() bool { return queued() == 2 })
	gate <- struct{}{} // the first
	close(gate)        // the refused merge, and the parts alone however many
	check("first", first, keys[0])
	check("good", good, keys[1])
	if r := <-bad; status.Code(r.err) != codes.InvalidArgument {
		t.Fatalf("bad part: %v, %v; want InvalidArgument", r.res, r.err)
	}
	// The two parts, sent alone, may meet at the leader and merge there
	// (proposemerge.go): refused whole again, then each proposed alone.
	if n := f2.proposalCount(); n != 6 && n != 7 {
		t.Fatalf("%d proposals, want 6 (2 + the first, the refused merge, two parts alone) or 7 (their merge at the leader refused too)", n)
	}

	if writeMergeable(&concordpb.RequestHeader{SessionId: 1, Seq: 1}) || writeMergeable(&concordpb.RequestHeader{Hops: 1}) ||
		!writeMergeable(&concordpb.RequestHeader{}) {
		t.Fatal("only a client's write batch without a session merges")
	}
}

// keysOfShard returns n keys that f routes to shard.
func keysOfShard(f *fakeNode, shard ids.ShardID, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("x%d", i); f.shardOfKey(k) == shard {
			keys = append(keys, k)
		}
	}
	return keys
}

// batchAnswer is what a Batch call returned.
type batchAnswer struct {
	res []*concordpb.OpResult
	err error
}

// sendBatch calls kv.Batch on a goroutine of its own; the answer arrives
// on the channel.
func sendBatch(kv *KV, h *concordpb.RequestHeader, ops ...*concordpb.Op) chan batchAnswer {
	ch := make(chan batchAnswer, 1)
	go func() {
		resp, err := kv.Batch(context.Background(), &concordpb.BatchRequest{Header: h, Ops: ops})
		ch <- batchAnswer{resp.GetResults(), err}
	}()
	return ch
}

// checkAnswer fails unless the answer on ch has one result per wanted key,
// each the echo of that key (fakeNode.echo).
func checkAnswer(t *testing.T, name string, ch chan batchAnswer, want ...string) {
	t.Helper()
	a := <-ch
	if a.err != nil || len(a.res) != len(want) {
		t.Fatalf("%s: %v, %v; want results %v", name, a.res, a.err, want)
	}
	for i, k := range want {
		if string(a.res[i].GetValue()) != k {
			t.Fatalf("%s: result %d is for %q, want %q", name, i, a.res[i].GetValue(), k)
		}
	}
}

// TestForwardedWritesAbsorbed protects absorption at a forwarding node
// (sendOneWriteMerged): a PUT a later PUT of the same key overwrites is
// not forwarded, its result is the blank one, the node counts it; a
// forwarded batch refused whole once absorbed is sent again as it came, so
// the error is the batch's own.
func TestForwardedWritesAbsorbed(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	shard := f2.shardOfKey("k")
	keys := keysOfShard(f2, shard, 2)
	f2.echo = true
	serve(t, f2, f1)
	kv1 := NewKV(f1, testLimits)
	put := func(k, v string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v)}
	}
	proposed := func() []string {
		f2.mu.Lock()
		defer f2.mu.Unlock()
		var ks []string
		for _, op := range f2.proposals[len(f2.proposals)-1].GetKv().GetOps() {
			ks = append(ks, string(op.GetKey())+"="+string(op.GetValue()))
		}
		return ks
	}
	checkAnswer(t, "absorbed", sendBatch(kv1, nil, put(keys[0], "1"), put(keys[1], "x"), put(keys[0], "2")), "", keys[1], keys[0])
	if got, want := fmt.Sprint(proposed()), fmt.Sprint([]string{keys[1] + "=x", keys[0] + "=2"}); got != want {
		t.Fatalf("the leader proposed %s, want %s", got, want)
	}
	if n := kv1.WritesAbsorbed(); n != 1 {
		t.Fatalf("forwarder's WritesAbsorbed = %d, want 1", n)
	}
	if r := <-sendBatch(kv1, nil, put(keys[0], "v"), put(keys[0], "bad")); status.Code(r.err) != codes.InvalidArgument {
		t.Fatalf("refused batch: %v, %v; want InvalidArgument", r.res, r.err)
	}
	if got, want := fmt.Sprint(proposed()), fmt.Sprint([]string{keys[0] + "=v", keys[0] + "=bad"}); got != want {
		t.Fatalf("last proposal %s, want the batch as it came %s", got, want)
	}
	if n := kv1.WritesAbsorbed(); n != 1 {
		t.Fatalf("WritesAbsorbed = %d after a refused batch, want still 1", n)
	}
}

// TestMergedWriteReplyTooLargeIsAmbiguous protects at-most-once for
// merged forwards: gRPC answers ResourceExhausted for a reply larger than
// the forward's message limit, after the leader applied the merged batch.
// That is no refusal: the parts must not be sent again alone (each would
// apply a second time, an INCR counted twice), and each gets an ambiguous
// answer (Unknown). Small limits stand in for the 64 MiB ones.
func TestMergedWriteReplyTooLargeIsAmbiguous(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
	shard := f2.shardOfKey("k")
	keys := keysOfShard(f2, shard, 32)
	withStateMachine(t, f2)
	gate := make(chan struct{})
	f2.proposeGate = gate
	// A part of 8 INCRs answers in ~110 bytes; three merged, ~270.
	f1.dialOpts = []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(200))}
	serve(t, f2, f1)
	kv1 := NewKV(f1, testLimits)
	part := func(i int) []*concordpb.Op {
		var ops []*concordpb.Op
		for _, k := range keys[8*i : 8*i+8] {
			ops = append(ops, incrBy(k, 1))
		}
		return ops
	}
	queued := func() int { return kv1.wmerge.waiting(shard) }

	first := sendBatch(kv1, nil, part(0)...)
	waitFor(t, func() bool { return queued() == 0 }) // taken, and blocked in the leader's proposal
	var parts []chan batchAnswer
	for i := 1; i <= 3; i++ {
		parts = append(parts, sendBatch(kv1, nil, part(i)...))
	}
	waitFor(t, func() bool { return queued() == 3 })
	close(gate) // the first, the merged batch, and any parts sent again alone
	if a := <-first; a.err != nil || len(a.res) != 8 {
		t.Fatalf("the first batch, alone: %v, %v; want 8 results", a.res, a.err)
	}
	for i, ch := range parts {
		a := <-ch
		if status.Code(a.err) != codes.Unknown || !strings.Contains(a.err.Error(), "ambiguous") {
			t.Errorf("part %d of the merged batch whose reply was too large: %v, %v; want Unknown, ambiguous", i+1, a.res, a.err)
		}
	}
	proposed := map[string]int{}
	f2.mu.Lock()
	for _, cmd := range f2.proposals {
		for _, op := range cmd.GetKv().GetOps() {
			proposed[string(op.GetKey())]++
		}
	}
	n := len(f2.proposals)
	f2.mu.Unlock()
	for _, k := range keys {
		if proposed[k] != 1 {
			t.Errorf("key %s was proposed (and applied) %d times, want once", k, proposed[k])
		}
	}
	if n != 2 {
		t.Errorf("%d proposals at the leader, want 2 (the first batch, the merged one)", n)
	}
}
