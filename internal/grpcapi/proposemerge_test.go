package grpcapi

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestLocalWritesMerge protects the merging of write batches at the
// shard's leader: while one proposal is in flight, the batches that arrive
// queue and go as ONE proposal, their ops in arrival order (a later write
// of the same key after the earlier one), each answered with its own
// results; a merged proposal refused whole, or dropped by raft, is
// proposed again part by part, so only a bad part fails; a batch with a
// session never merges.
func TestLocalWritesMerge(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	shard := f.shardOfKey("k")
	keys := keysOfShard(f, shard, 4)
	gate := make(chan struct{})
	f.proposeGate, f.echo = gate, true
	kv := NewKV(f, testLimits)
	kv.pmerge.senders = 1 // one proposal in flight: the rest queue behind it (TestMergeQueueSenders: more)
	put := func(k, v string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v)}
	}
	write := func(h *concordpb.RequestHeader, ops ...*concordpb.Op) chan batchAnswer {
		return sendBatch(kv, h, ops...)
	}
	queued := func() int { return kv.pmerge.waiting(shard) } // -1 until a proposal is taken and in flight
	check := func(name string, ch chan batchAnswer, want ...string) { t.Helper(); checkAnswer(t, name, ch, want...) }
	lastOps := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var ks []string
		for _, op := range f.proposals[len(f.proposals)-1].GetKv().GetOps() {
			ks = append(ks, string(op.GetKey())+"="+string(op.GetValue()))
		}
		return ks
	}

	first := write(nil, put(keys[0], "1"))
	waitFor(t, func() bool { return queued() == 0 }) // taken, and blocked in its proposal
	a := write(nil, put(keys[1], "a"), put(keys[2], "a"))
	waitFor(t, func() bool { return queued() == 1 })
	b := write(nil, put(keys[0], "2")) // the same key again: after the first, in the log's order
	waitFor(t, func() bool { return queued() == 2 })
	c := write(nil, put(keys[3], "c"))
	waitFor(t, func() bool { return queued() == 3 })
	gate <- struct{}{} // the first proposal
	check("first", first, keys[0])
	gate <- struct{}{} // the merged one
	check("a", a, keys[1], keys[2])
	check("b", b, keys[0])
	check("c", c, keys[3])
	if n := f.proposalCount(); n != 2 {
		t.Fatalf("%d proposals for a write and three queued behind it; want 2", n)
	}
	if got, want := fmt.Sprint(lastOps()), fmt.Sprint([]string{keys[1] + "=a", keys[2] + "=a", keys[0] + "=2", keys[3] + "=c"}); got != want {
		t.Fatalf("merged proposal %s, want the parts in arrival order %s", got, want)
	}

	// A bad part: the merged proposal is refused whole (nothing applied),
	// then each part goes alone: the good one applies, the bad one alone
	// gets the error.
	waitFor(t, func() bool { return queued() == -1 }) // the last phase's sender has seen its queue empty
	first = write(nil, put(keys[0], "1"))
	waitFor(t, func() bool { return queued() == 0 })
	good := write(nil, put(keys[1], "g"))
	waitFor(t, func() bool { return queued() == 1 })
	bad := write(nil, put(keys[2], "bad"))
	waitFor(t, func() bool { return queued() == 2 })
	gate <- struct{}{} // the first
	check("first", first, keys[0])
	for range 3 { // the refused merge, then the two parts alone
		gate <- struct{}{}
	}
	check("good", good, keys[1])
	if r := <-bad; status.Code(r.err) != codes.InvalidArgument {
		t.Fatalf("bad part: %v, %v; want InvalidArgument", r.res, r.err)
	}
	if n := f.proposalCount(); n != 6 {
		t.Fatalf("%d proposals, want 6 (2 + the first, the refused merge, two parts alone)", n)
	}

	// Dropped by raft before the log: each part is routed and proposed again.
	waitFor(t, func() bool { return queued() == -1 }) // the last phase's sender has seen its queue empty
	first = write(nil, put(keys[0], "1"))
	waitFor(t, func() bool { return queued() == 0 })
	a = write(nil, put(keys[1], "a"))
	waitFor(t, func() bool { return queued() == 1 })
	b = write(nil, put(keys[2], "b"))
	waitFor(t, func() bool { return queued() == 2 })
	gate <- struct{}{}
	check("first", first, keys[0])
	f.mu.Lock()
	f.dropFirst = 1 // the merged proposal, blocked at the gate until now
	f.mu.Unlock()
	for range 3 {
		gate <- struct{}{}
	}
	check("a after a drop", a, keys[1])
	check("b after a drop", b, keys[2])
	if n := f.proposalCount(); n != 10 {
		t.Fatalf("%d proposals, want 10 (6 + the first, the dropped merge, two parts alone)", n)
	}

	// A session's batch goes alone even while a merged one is in flight.
	waitFor(t, func() bool { return queued() == -1 }) // the last phase's sender has seen its queue empty
	first = write(nil, put(keys[0], "1"))
	waitFor(t, func() bool { return queued() == 0 })
	s := write(&concordpb.RequestHeader{SessionId: 9, Seq: 1}, put(keys[1], "s"))
	p := write(nil, put(keys[2], "p"))
	waitFor(t, func() bool { return queued() == 1 })
	for range 3 {
		gate <- struct{}{}
	}
	check("first", first, keys[0])
	check("session", s, keys[1])
	check("plain", p, keys[2])
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cmd := range f.proposals {
		if cmd.GetKv().GetSessionId() != 0 && len(cmd.GetKv().GetOps()) != 1 {
			t.Fatalf("a session's batch was merged: %v", cmd)
		}
	}
}

// TestLocalWritesAbsorbed protects write absorption at the leader
// (kv.Absorb in proposeOneMerged): in a merged proposal, PUTs a later PUT
// of the same key overwrites are left out of the command, each part still
// gets one result per op (the dropped ones the blank result of a blind
// PUT), the node counts them; and an absorbed command refused whole is
// proposed again unabsorbed, so the error is the one the parts would get.
func TestLocalWritesAbsorbed(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	shard := f.shardOfKey("k")
	keys := keysOfShard(f, shard, 2)
	gate := make(chan struct{})
	f.proposeGate, f.echo = gate, true
	kv := NewKV(f, testLimits)
	kv.pmerge.senders = 1
	put := func(k, v string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v)}
	}
	queued := func() int { return kv.pmerge.waiting(shard) }
	proposed := func(i int) []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var ks []string
		for _, op := range f.proposals[i].GetKv().GetOps() {
			ks = append(ks, string(op.GetKey())+"="+string(op.GetValue()))
		}
		return ks
	}
	first := sendBatch(kv, nil, put(keys[0], "1"))
	waitFor(t, func() bool { return queued() == 0 })
	a := sendBatch(kv, nil, put(keys[0], "a1"), put(keys[1], "x"), put(keys[0], "a2"))
	waitFor(t, func() bool { return queued() == 1 })
	b := sendBatch(kv, nil, put(keys[0], "b"))
	waitFor(t, func() bool { return queued() == 2 })
	gate <- struct{}{}
	checkAnswer(t, "first", first, keys[0])
	gate <- struct{}{}
	checkAnswer(t, "a", a, "", keys[1], "") // the dropped PUTs' results are blank
	checkAnswer(t, "b", b, keys[0])
	if got, want := fmt.Sprint(proposed(1)), fmt.Sprint([]string{keys[1] + "=x", keys[0] + "=b"}); got != want {
		t.Fatalf("merged proposal %s, want %s (both earlier PUTs of %s absorbed)", got, want, keys[0])
	}
	if n := kv.WritesAbsorbed(); n != 2 {
		t.Fatalf("WritesAbsorbed = %d, want 2", n)
	}

	// Refused whole once absorbed: proposed again as it came.
	waitFor(t, func() bool { return queued() == -1 })
	bad := sendBatch(kv, nil, put(keys[0], "v"), put(keys[0], "bad"))
	gate <- struct{}{} // absorbed: [bad], refused
	gate <- struct{}{} // alone, unabsorbed: refused
	if r := <-bad; status.Code(r.err) != codes.InvalidArgument {
		t.Fatalf("refused batch: %v, %v; want InvalidArgument", r.res, r.err)
	}
	if got, want := fmt.Sprint(proposed(2), proposed(3)), fmt.Sprint([]string{keys[0] + "=bad"}, []string{keys[0] + "=v", keys[0] + "=bad"}); got != want {
		t.Fatalf("proposals %s, want %s", got, want)
	}
	if n := kv.WritesAbsorbed(); n != 2 {
		t.Fatalf("WritesAbsorbed = %d after a refused command, want still 2", n)
	}
}

// TestMergedWriteAllocations bounds what a write batch proposed through
// the merge queue allocates: 21 objects here, of which the fake node's
// routing table and result take 10, the proposal's context, command and
// header 6, and the queued item 5 (itself with its answer, its channel,
// the queue's slice, the sender's start). It was 24: the queue's fit and
// send are now fixed when the service is made (an add allocated two
// closures), and an answer is part of its item (it was an object of its
// own).
func TestMergedWriteAllocations(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.echo = true
	shard := f.shardOfKey("k")
	keys := keysOfShard(f, shard, 1)
	kv := NewKV(f, testLimits)
	req := &concordpb.BatchRequest{Header: &concordpb.RequestHeader{}, Ops: []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte(keys[0]), Value: []byte("v")}}}
	n := testing.AllocsPerRun(200, func() {
		if _, err := kv.Batch(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations per merged write batch", n)
	if n > 21 {
		t.Errorf("%.0f allocations per merged write batch, want at most 21", n)
	}
}
