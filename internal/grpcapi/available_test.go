package grpcapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

var availHeader = &concordpb.RequestHeader{Consistency: concordpb.Consistency_AVAILABLE}

// availableKV is a KV service over f with available mode on: a hint log
// of maxBytes on an in-memory engine, held writes counted in held.
func availableKV(t *testing.T, f *fakeNode, maxBytes int64) (*KV, *hints.Log, *[]ids.ShardID) {
	t.Helper()
	eng, err := storage.OpenFS(storage.NewMemFS(), "/data")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	log, err := hints.Open(eng, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	held := &[]ids.ShardID{}
	s := NewKV(f, Limits{MaxKeyBytes: 16, MaxValueBytes: 64}).WithAvailable(log, 50*time.Millisecond, func(shard ids.ShardID, _ bool) {
		*held = append(*held, shard)
	})
	return s, log, held
}

// TestAvailableWriteHeldWhenTheShardCannotCommit: an AVAILABLE Put and
// Delete whose proposal fails with Unavailable, or whose outcome is
// ambiguous, are held (tentative, the shard and this node in the header),
// and an AVAILABLE Get reads the hint; a committed one is answered as
// usual, with nothing held; an ordinary Put that fails is not held.
func TestAvailableWriteHeldWhenTheShardCannotCommit(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, held := availableKV(t, f, 1<<20)
	ctx := context.Background()

	resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
	if err != nil || resp.GetHeader().GetTentative() || log.Count() != 0 {
		t.Fatalf("committed available put: %v, tentative %v, %d hints", err, resp.GetHeader().GetTentative(), log.Count())
	}
	if h := f.proposals[0].GetKv().GetOps()[0]; h.GetTentativeVersion() != 0 {
		t.Fatalf("the ordinary attempt carried tentative_version %d", h.GetTentativeVersion())
	}

	f.failProposals(multiraft.ErrStopped)
	if _, err := s.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); status.Code(err) == codes.OK || log.Count() != 0 {
		t.Fatalf("a linearizable put that failed: %v, %d hints", err, log.Count())
	}
	f.failProposals(multiraft.ErrStopped)
	resp, err = s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v2")})
	if err != nil {
		t.Fatalf("available put with no quorum: %v", err)
	}
	if h := resp.GetHeader(); !h.GetTentative() || h.GetShardId() != uint64(f.shardOfKey("k")) || h.GetServedByNodeId() != 1 {
		t.Fatalf("available put header %v: want tentative, shard %d, served by 1", h, f.shardOfKey("k"))
	}
	if len(*held) != 1 || (*held)[0] != f.shardOfKey("k") {
		t.Fatalf("onHeld calls %v", *held)
	}
	got, err := s.Get(ctx, &concordpb.GetRequest{Header: availHeader, Key: []byte("k")})
	if err != nil || !got.GetFound() || string(got.GetValue()) != "v2" {
		t.Fatalf("available get after a held put: %v %v", got, err)
	}
	if got, err := s.Get(ctx, &concordpb.GetRequest{Key: []byte("k")}); err != nil || got.GetFound() {
		t.Fatalf("a linearizable get saw the held put: %v %v", got, err)
	}

	f.failProposals(replica.ErrAmbiguous)
	if resp, err := s.Delete(ctx, &concordpb.DeleteRequest{Header: availHeader, Key: []byte("k")}); err != nil || !resp.GetHeader().GetTentative() {
		t.Fatalf("available delete with an ambiguous outcome: %v %v", resp, err)
	}
	if got, err := s.Get(ctx, &concordpb.GetRequest{Header: availHeader, Key: []byte("k")}); err != nil || got.GetFound() {
		t.Fatalf("available get after a held delete: %v %v", got, err)
	}
	if h, ok, _ := log.Get([]byte("k")); !ok || h.Kind != hints.Delete || log.Count() != 1 {
		t.Fatalf("hint after the delete: %+v %v, %d hints", h, ok, log.Count())
	}
}

// TestAvailableWriteDefiniteRefusalNotHeld: a refusal that says the write
// can never commit as it is (the space alarm's, a bad key, a refusal by
// the state machine), a deadline that is the caller's own, a cluster below
// version.Versions and a full hint log all answer the commit attempt's
// error, with nothing held.
func TestAvailableWriteDefiniteRefusalNotHeld(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, held := availableKV(t, f, 1<<20)
	ctx := context.Background()
	put := func(key, value string) error {
		_, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte(key), Value: []byte(value)})
		return err
	}
	noHints := func(what string, err error, want codes.Code) {
		t.Helper()
		if status.Code(err) != want {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		if log.Count() != 0 || len(*held) != 0 {
			t.Fatalf("%s: %d hints held", what, log.Count())
		}
	}
	s.SetNoSpace("node 2 is low")
	noHints("space alarm", put("k", "v"), codes.ResourceExhausted)
	s.SetNoSpace("")
	noHints("empty key", put("", "v"), codes.InvalidArgument)
	noHints("key too long", put(strings.Repeat("k", 17), "v"), codes.InvalidArgument)
	f.proposeResult = &storepb.CommandResult{ErrorCode: uint32(codes.FailedPrecondition), ErrorMessage: "refused"}
	noHints("refused by the state machine", put("k", "v"), codes.FailedPrecondition)

	f.failProposals(multiraft.ErrStopped)
	f.clusterVersion.Store(uint32(version.Versions - 1))
	noHints("cluster below version.Versions", put("k", "v"), codes.Unavailable)
	f.clusterVersion.Store(0)

	f.failProposals(context.DeadlineExceeded)
	dctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-dctx.Done()
	_, err := s.Put(dctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
	noHints("the caller's deadline", err, codes.DeadlineExceeded)

	full, flog, _ := availableKV(t, f, 0)
	f.failProposals(multiraft.ErrStopped)
	_, err = full.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
	if status.Code(err) != codes.Unavailable || flog.Count() != 0 {
		t.Fatalf("put with a full hint log: %v, %d hints; want the commit attempt's Unavailable", err, flog.Count())
	}
}

// TestAvailableRefusedWhereItDoesNotApply: AVAILABLE on a Put with a ttl
// or return_prev, a CompareAndSwap or a Batch that writes is refused
// (InvalidArgument) before anything is proposed; a read-only Batch with
// AVAILABLE reads each key's hint or, without one, the replica.
func TestAvailableRefusedWhereItDoesNotApply(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, _ := availableKV(t, f, 1<<20)
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "available mode takes a plain Put or Delete") {
			t.Fatalf("%s: %v, want InvalidArgument (available mode takes ...)", what, err)
		}
	}
	_, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v"), TtlMs: 1000})
	refused("put with ttl", err)
	_, err = s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v"), ReturnPrev: true})
	refused("put with return_prev", err)
	_, err = s.CompareAndSwap(ctx, &concordpb.CompareAndSwapRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v"), ExpectAbsent: true})
	refused("cas", err)
	_, err = s.Batch(ctx, &concordpb.BatchRequest{Header: availHeader, Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}}})
	refused("writing batch", err)
	if len(f.proposals) != 0 || log.Count() != 0 {
		t.Fatalf("%d proposals, %d hints for refused requests", len(f.proposals), log.Count())
	}

	f.failProposals(multiraft.ErrStopped)
	if _, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("a"), Value: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	f.data[f.shardOfKey("b")] = []*concordpb.KeyValue{{Key: []byte("b"), Value: []byte("replica")}}
	for _, key := range []string{"a", "b"} {
		resp, err := s.Batch(ctx, &concordpb.BatchRequest{Header: availHeader, Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_GET, Key: []byte(key)}}})
		if err != nil {
			t.Fatalf("available read-only batch of %s: %v", key, err)
		}
		want := map[string]string{"a": "held", "b": "replica"}[key]
		if r := resp.GetResults()[0]; !r.GetOk() || string(r.GetValue()) != want {
			t.Fatalf("available read-only batch of %s: %v, want %q", key, r, want)
		}
	}
}

// TestReconcileSendsTentativeVersion: a client's op carrying
// tentative_version is refused; the node's reconciler's (Reconcile) is
// proposed, alone, with it.
func TestReconcileSendsTentativeVersion(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.echo = true
	s, _, _ := availableKV(t, f, 1<<20)
	ctx := context.Background()
	op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v"), TentativeVersion: 42}
	_, err := s.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{op}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tentative_version is set only by Concord nodes") {
		t.Fatalf("client batch with tentative_version: %v", err)
	}
	if len(f.proposals) != 0 {
		t.Fatal("a client's tentative_version was proposed")
	}
	if _, err := s.Reconcile(ctx, []*concordpb.Op{op}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if len(f.proposals) != 1 || f.proposals[0].GetKv().GetOps()[0].GetTentativeVersion() != 42 {
		t.Fatalf("Reconcile proposed %v", f.proposals)
	}
	f.clusterVersion.Store(uint32(version.Versions - 1))
	if _, err := s.Reconcile(ctx, []*concordpb.Op{op}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Reconcile below version.Versions: %v", err)
	}
}

// TestForwardedHeaderNeverAvailable: a request is never forwarded with
// AVAILABLE (the next node would hold it too).
func TestForwardedHeaderNeverAvailable(t *testing.T) {
	h := forwardedHeader(&concordpb.RequestHeader{Consistency: concordpb.Consistency_AVAILABLE, SessionId: 3, Seq: 4})
	if h.GetConsistency() != concordpb.Consistency_LINEARIZABLE || h.GetHops() != 1 || h.GetSessionId() != 3 {
		t.Fatalf("forwarded header %v", h)
	}
	if h := forwardedHeader(&concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE}); h.GetConsistency() != concordpb.Consistency_STALE {
		t.Fatalf("a stale read forwarded as %v", h.GetConsistency())
	}
}

// TestAvailableReadLinearizableWhenTheShardAnswers: an AVAILABLE Get (and
// a read-only Batch) of a key this node holds no hint of is linearizable
// (a ReadIndex round) when the shard answers within the available
// timeout, so a healthy cluster reads its own writes through any node;
// when the shard cannot answer (Unavailable) it falls back to the local
// replica, as STALE; a definite error is returned as it is.
func TestAvailableReadLinearizableWhenTheShardAnswers(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, _, _ := availableKV(t, f, 1<<20)
	ctx := context.Background()
	shard := f.shardOfKey("k")
	f.data = map[ids.ShardID][]*concordpb.KeyValue{shard: {{Key: []byte("k"), Value: []byte("v")}}}
	rounds := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.readIndex)
	}
	get := func(what string, wantRounds int) {
		t.Helper()
		before := rounds()
		got, err := s.Get(ctx, &concordpb.GetRequest{Header: availHeader, Key: []byte("k")})
		if err != nil || !got.GetFound() || string(got.GetValue()) != "v" {
			t.Fatalf("%s: %v %v", what, got, err)
		}
		if n := rounds() - before; n != wantRounds {
			t.Fatalf("%s: %d ReadIndex rounds, want %d", what, n, wantRounds)
		}
		b, err := s.Batch(ctx, &concordpb.BatchRequest{Header: availHeader, Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_GET, Key: []byte("k")}}})
		if err != nil || !b.GetResults()[0].GetOk() || string(b.GetResults()[0].GetValue()) != "v" {
			t.Fatalf("%s, batch: %v %v", what, b, err)
		}
	}
	get("shard answers", 1)
	f.readIndexErr = status.Error(codes.Unavailable, "no leader")
	get("shard cannot answer: stale", 1) // the round was tried, then the local replica read
	f.readIndexErr = status.Error(codes.PermissionDenied, "no")
	if _, err := s.Get(ctx, &concordpb.GetRequest{Header: availHeader, Key: []byte("k")}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a definite error: %v, want it returned", err)
	}
}

// failProposals makes the fake's proposals fail with err (nil: succeed),
// under its lock: a merge queue's sender reads it on its own goroutine.
func (f *fakeNode) failProposals(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposeErr = err
	if err != nil {
		f.proposeResult = nil
	}
}

// TestAvailableWriteQueuedBehindAProposalNeverProposedOnceHeld: an
// AVAILABLE write that waits in the leader's merge queue behind a
// proposal in flight, and is held when its attempt times out, is never
// proposed afterwards (it would apply behind writes made after its
// tentative answer, at a newer version); a write taken by the sender
// before its waiter gave up is proposed as before.
func TestAvailableWriteQueuedBehindAProposalNeverProposedOnceHeld(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	f.echo = true
	s, log, _ := availableKV(t, f, 1<<20)
	f.proposeGate = make(chan struct{})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { // no session: it goes through the merge queue, and its proposal blocks
		_, err := s.Put(ctx, &concordpb.PutRequest{Key: []byte("k"), Value: []byte("first")})
		first <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.proposing.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first put was not proposed")
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("held")})
	if err != nil || !resp.GetHeader().GetTentative() || log.Count() != 1 {
		t.Fatalf("available put queued behind a blocked proposal: %v %v, %d hints; want held", resp, err, log.Count())
	}
	f.proposeGate <- struct{}{} // the first proposal goes through
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	close(f.proposeGate)
	// The sender finds the held write abandoned: nothing more is proposed.
	// A later write of the key's shard queues behind whatever the sender
	// still does, so when it is answered the sender is done.
	if a := <-sendBatch(s, nil, &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("later")}); a.err != nil {
		t.Fatal(a.err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.proposals {
		for _, op := range p.GetKv().GetOps() {
			if string(op.GetValue()) == "held" {
				t.Fatalf("the held write was proposed after it was held: %v", p)
			}
		}
	}
	if len(f.proposals) != 2 {
		t.Fatalf("%d proposals, want the first put and the later one", len(f.proposals))
	}
}

// TestAvailableAttemptWithinTheCallersDeadline: a caller whose deadline
// is shorter than the node's --available-timeout still gets its write
// held (the attempt takes three quarters of what is left), not the
// deadline's error.
func TestAvailableAttemptWithinTheCallersDeadline(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, _ := availableKV(t, f, 1<<20)
	s.avail.timeout = time.Minute
	f.proposeGate = make(chan struct{}) // proposals never finish
	t.Cleanup(func() { close(f.proposeGate) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
	if err != nil || !resp.GetHeader().GetTentative() || log.Count() != 1 {
		t.Fatalf("available put with a 2 s deadline and a 1 min available timeout: %v %v, %d hints; want held", resp, err, log.Count())
	}
}

// TestCommittedAvailableWriteDropsTheOlderHint: a write of a key that
// commits through a node holding an older hint of it removes the hint, so
// the node's available reads answer the committed write, and the older
// write is not reconciled over it.
func TestCommittedAvailableWriteDropsTheOlderHint(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, _ := availableKV(t, f, 1<<20)
	ctx := context.Background()
	f.failProposals(multiraft.ErrStopped)
	if resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("old")}); err != nil || !resp.GetHeader().GetTentative() {
		t.Fatalf("held put: %v %v", resp, err)
	}
	f.mu.Lock()
	f.proposeErr, f.proposeResult = nil, &storepb.CommandResult{Results: []*concordpb.OpResult{{}}}
	f.mu.Unlock()
	if resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("new")}); err != nil || resp.GetHeader().GetTentative() {
		t.Fatalf("committed put: %v %v", resp, err)
	}
	if _, held, _ := log.Get([]byte("k")); held || log.Count() != 0 {
		t.Fatalf("the older hint is still held after a newer write of the key committed (%d hints)", log.Count())
	}
}

// TestAvailableBatchOfHintedKeysReadsNothing: a read-only AVAILABLE batch
// whose every key this node holds a hint of answers from the hints
// without a read (a node cut off, with no replica, still answers it); a
// batch mixing hinted and other keys reads only the others.
func TestAvailableBatchOfHintedKeysReadsNothing(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1) // one shard: every key in it
	s, _, _ := availableKV(t, f, 1<<20)
	ctx := context.Background()
	f.failProposals(multiraft.ErrStopped)
	for _, k := range []string{"a", "b"} {
		if resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte(k), Value: []byte("held-" + k)}); err != nil || !resp.GetHeader().GetTentative() {
			t.Fatalf("held put %s: %v %v", k, resp, err)
		}
	}
	f.data[f.shardOfKey("c")] = []*concordpb.KeyValue{{Key: []byte("c"), Value: []byte("replica")}}
	get := func(keys ...string) []*concordpb.OpResult {
		t.Helper()
		var ops []*concordpb.Op
		for _, k := range keys {
			ops = append(ops, &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte(k)})
		}
		resp, err := s.Batch(ctx, &concordpb.BatchRequest{Header: availHeader, Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()
	}
	f.mu.Lock()
	f.readIndex = nil
	f.mu.Unlock()
	res := get("a", "b")
	if string(res[0].GetValue()) != "held-a" || string(res[1].GetValue()) != "held-b" {
		t.Fatalf("hinted keys: %v", res)
	}
	f.mu.Lock()
	rounds := len(f.readIndex)
	f.mu.Unlock()
	if rounds != 0 {
		t.Fatalf("a batch of hinted keys made %d ReadIndex rounds, want none", rounds)
	}
	res = get("a", "c", "b")
	if string(res[0].GetValue()) != "held-a" || string(res[1].GetValue()) != "replica" || string(res[2].GetValue()) != "held-b" {
		t.Fatalf("mixed batch: %v", res)
	}
}

// TestCommittedBatchDropsTheOlderHintOnlyIfItWrote: any client write of a
// key committed through a node holding an older hint of it (a SET with
// options or an INCR over RESP, which go linearizable) drops the hint if
// it wrote the key; a conditional write that did not apply leaves it.
func TestCommittedBatchDropsTheOlderHintOnlyIfItWrote(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, _ := availableKV(t, f, 1<<20)
	ctx := context.Background()
	hold := func(k string) {
		t.Helper()
		f.failProposals(multiraft.ErrStopped)
		if resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte(k), Value: []byte("held")}); err != nil || !resp.GetHeader().GetTentative() {
			t.Fatalf("held put: %v %v", resp, err)
		}
		f.mu.Lock()
		f.proposeErr = nil
		f.mu.Unlock()
	}
	answer := func(r *concordpb.OpResult) {
		f.mu.Lock()
		f.proposeResult = &storepb.CommandResult{Results: []*concordpb.OpResult{r}}
		f.mu.Unlock()
	}
	hold("k")
	answer(&concordpb.OpResult{}) // NX not met
	if _, err := s.Batch(ctx, &concordpb.BatchRequest{Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("nx"),
		Condition: concordpb.Condition_CONDITION_NX}}}); err != nil {
		t.Fatal(err)
	}
	if log.Count() != 1 {
		t.Fatal("a conditional put that did not apply dropped the hint")
	}
	answer(&concordpb.OpResult{Ok: true, IntValue: 1})
	if _, err := s.Batch(ctx, &concordpb.BatchRequest{Header: &concordpb.RequestHeader{SessionId: 7, Seq: 1},
		Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1}}}); err != nil {
		t.Fatal(err)
	}
	if log.Count() != 0 {
		t.Fatal("a committed INCR of the key left the older hint")
	}
}

// TestAvailableWriteNotHeldWhileHoldingIsOff: with HoldOnlyWhile saying
// no (the node is leaving the cluster), an AVAILABLE write its shard
// cannot commit fails as an ordinary write would, and nothing is held;
// once it says yes again, the same write is held.
func TestAvailableWriteNotHeldWhileHoldingIsOff(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, held := availableKV(t, f, 1<<20)
	leaving := true
	s.HoldOnlyWhile(func() bool { return !leaving })
	ctx := context.Background()

	f.failProposals(multiraft.ErrStopped)
	resp, err := s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
	if status.Code(err) != codes.Unavailable || log.Count() != 0 || len(*held) != 0 {
		t.Fatalf("available put on a leaving node with no quorum: %v (header %v), %d hints, onHeld %v; want Unavailable, nothing held",
			err, resp.GetHeader(), log.Count(), *held)
	}
	f.failProposals(multiraft.ErrStopped)
	if _, err := s.Delete(ctx, &concordpb.DeleteRequest{Header: availHeader, Key: []byte("k")}); status.Code(err) != codes.Unavailable || log.Count() != 0 {
		t.Fatalf("available delete on a leaving node with no quorum: %v, %d hints; want Unavailable, nothing held", err, log.Count())
	}

	leaving = false
	f.failProposals(multiraft.ErrStopped)
	resp, err = s.Put(ctx, &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
	if err != nil || !resp.GetHeader().GetTentative() || log.Count() != 1 {
		t.Fatalf("available put once holding is on again: %v, tentative %v, %d hints", err, resp.GetHeader().GetTentative(), log.Count())
	}
}

// TestHoldsInProgressCountedFromBeforeTheCheck: a write past its ordinary
// attempt counts in HoldsInProgress from before its HoldOnlyWhile check
// until its Hold returned, then in the log's count. A node reports the
// sum after its own state, so a write that passed the check before the
// node learned it is leaving is never missing from a report that says
// it knew (else the node could be removed with the write not yet held).
func TestHoldsInProgressCountedFromBeforeTheCheck(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	s, log, _ := availableKV(t, f, 1<<20)
	inCheck, release := make(chan struct{}), make(chan struct{})
	s.HoldOnlyWhile(func() bool {
		close(inCheck)
		<-release
		return true
	})
	f.failProposals(multiraft.ErrStopped)
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(context.Background(), &concordpb.PutRequest{Header: availHeader, Key: []byte("k"), Value: []byte("v")})
		done <- err
	}()
	<-inCheck
	if n := s.HoldsInProgress(); n != 1 || log.Count() != 0 {
		t.Fatalf("during the check: HoldsInProgress %d, log count %d; want 1 and 0", n, log.Count())
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("available put: %v", err)
	}
	if n := s.HoldsInProgress(); n != 0 || log.Count() != 1 {
		t.Fatalf("after the hold: HoldsInProgress %d, log count %d; want 0 and 1", n, log.Count())
	}
}
