package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/hints"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// The reconciler's tests run its rounds on a real hint log (Pebble, in a
// temporary dir) with a fake KV.Reconcile: the shard of a key is its
// first byte ('a' is shard 1, 'b' shard 2, ...; '?' is not known yet).

// fakeKV answers the reconciler's batches as the KV service's checks
// would (grpcapi checkBatch: at most 1,000 ops, DefaultMaxBatchBytes of
// keys and values, one shard), then as answer says (nil: every op
// applied). It records the batches it was sent.
type fakeKV struct {
	mu      sync.Mutex
	batches [][]*concordpb.Op
	answer  func(ctx context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error)
}

func (f *fakeKV) send(ctx context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
	f.mu.Lock()
	f.batches = append(f.batches, ops)
	f.mu.Unlock()
	size := 0
	for _, op := range ops {
		size += len(op.GetKey()) + len(op.GetValue())
		if op.GetKey()[0] != ops[0].GetKey()[0] {
			return nil, status.Errorf(codes.InvalidArgument, "batch keys span shards %d and %d; a batch must stay within one shard", testShardOf(ops[0].GetKey()), testShardOf(op.GetKey()))
		}
	}
	switch {
	case len(ops) > 1000:
		return nil, status.Errorf(codes.InvalidArgument, "batch has %d operations; the limit is 1000", len(ops))
	case size > grpcapi.DefaultMaxBatchBytes:
		return nil, status.Errorf(codes.InvalidArgument, "batch is %d bytes of keys and values; the limit is %d", size, grpcapi.DefaultMaxBatchBytes)
	}
	if f.answer != nil {
		return f.answer(ctx, ops)
	}
	return applyAll(ops), nil
}

// sent returns the batches sent so far.
func (f *fakeKV) sent() [][]*concordpb.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]*concordpb.Op(nil), f.batches...)
}

// sentTo counts the batches sent to shard.
func (f *fakeKV) sentTo(shard ids.ShardID) int {
	n := 0
	for _, b := range f.sent() {
		if testShardOf(b[0].GetKey()) == shard {
			n++
		}
	}
	return n
}

func applyAll(ops []*concordpb.Op) *concordpb.BatchResponse {
	resp := &concordpb.BatchResponse{}
	for range ops {
		resp.Results = append(resp.Results, &concordpb.OpResult{Ok: true})
	}
	return resp
}

func testShardOf(key []byte) ids.ShardID { return ids.ShardID(key[0] - 'a' + 1) }

// syncBuffer is a log destination safe for the reconciler's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testReconciler is a reconciler on its own hint log and clock.
type testReconciler struct {
	*reconciler
	log  *hints.Log
	kv   *fakeKV
	now  time.Time
	logs *syncBuffer
}

func newTestReconciler(t *testing.T) *testReconciler {
	t.Helper()
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	l, err := hints.Open(eng, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testReconciler{log: l, kv: &fakeKV{}, now: time.Unix(1000, 0), logs: &syncBuffer{}}
	tr.reconciler = &reconciler{reconciled: newReconcileCounter(), env: reconcileEnv{
		hints:   l,
		allowed: func() bool { return true },
		shardOf: func(key []byte) (ids.ShardID, bool) { return testShardOf(key), key[0] != '?' },
		send: func(ctx context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
			return tr.kv.send(ctx, ops)
		},
		now: func() time.Time { return tr.now },
		log: slog.New(slog.NewTextHandler(tr.logs, nil)),
	}}
	return tr
}

func (tr *testReconciler) hold(t *testing.T, key string, value []byte) hints.Hint {
	t.Helper()
	h, _, err := tr.log.Hold([]byte(key), hints.Put, value)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// held reports whether key has a hint, and its version.
func (tr *testReconciler) held(t *testing.T, key string) (uint64, bool) {
	t.Helper()
	h, ok, err := tr.log.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return h.Version, ok
}

// counted returns concord_reconciled_total{outcome}.
func (tr *testReconciler) counted(t *testing.T, outcome string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.reconciled)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestReconcileRemovesOnlyOnTheAnswer: a hint is removed once its shard
// answered the batch (applied or superseded, as the answer says), and
// kept while it answers with an error.
func TestReconcileRemovesOnlyOnTheAnswer(t *testing.T) {
	tr := newTestReconciler(t)
	tr.hold(t, "a1", []byte("x"))
	tr.hold(t, "a2", []byte("y"))
	tr.kv.answer = func(context.Context, []*concordpb.Op) (*concordpb.BatchResponse, error) {
		return nil, status.Error(codes.Unavailable, "no leader")
	}
	tr.round(context.Background())
	if tr.log.Count() != 2 || len(tr.kv.sent()) != 1 {
		t.Fatalf("after an error: %d hints held (want 2), %d batches sent (want 1)", tr.log.Count(), len(tr.kv.sent()))
	}
	tr.now = tr.now.Add(reconcileBackoffMin)
	tr.kv.answer = func(_ context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
		resp := applyAll(ops)
		resp.Results[1].Ok = false // a2: the shard held a newer version
		return resp, nil
	}
	tr.round(context.Background())
	if tr.log.Count() != 0 || tr.counted(t, "applied") != 1 || tr.counted(t, "superseded") != 1 {
		t.Fatalf("after the answer: %d hints held, applied %v, superseded %v; want 0, 1, 1",
			tr.log.Count(), tr.counted(t, "applied"), tr.counted(t, "superseded"))
	}
}

// TestReconcileGroupsByShard: each batch holds the keys of one shard,
// carrying each hint's version; a key whose shard is not known waits.
func TestReconcileGroupsByShard(t *testing.T) {
	tr := newTestReconciler(t)
	want := map[string]uint64{}
	for _, k := range []string{"a1", "b1", "a2", "c1", "b2"} {
		want[k] = tr.hold(t, k, []byte("v-"+k)).Version
	}
	tr.hold(t, "?1", []byte("unrouted"))
	tr.round(context.Background())
	shards := map[ids.ShardID]int{}
	for _, b := range tr.kv.sent() {
		shards[testShardOf(b[0].GetKey())]++
		for _, op := range b {
			k := string(op.GetKey())
			if testShardOf(op.GetKey()) != testShardOf(b[0].GetKey()) || op.GetTentativeVersion() != want[k] || string(op.GetValue()) != "v-"+k {
				t.Fatalf("batch %v: op %q at version %d value %q (want version %d)", b, k, op.GetTentativeVersion(), op.GetValue(), want[k])
			}
		}
	}
	if len(shards) != 3 || shards[1] != 1 || shards[2] != 1 || shards[3] != 1 {
		t.Fatalf("batches by shard %v, want one to each of 1, 2, 3", shards)
	}
	if _, ok := tr.held(t, "?1"); !ok || tr.log.Count() != 1 {
		t.Fatalf("hints left %d; the unrouted one held: %v", tr.log.Count(), ok)
	}
}

// TestReconcileKeepsANewerHint: a tentative write of a key taken while
// its older hint was being reconciled stays, for the next round.
func TestReconcileKeepsANewerHint(t *testing.T) {
	tr := newTestReconciler(t)
	tr.hold(t, "a1", []byte("old"))
	tr.hold(t, "a2", []byte("other"))
	var newer hints.Hint
	tr.kv.answer = func(_ context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
		if newer.Version == 0 {
			newer = tr.hold(t, "a1", []byte("new"))
		}
		return applyAll(ops), nil
	}
	tr.round(context.Background())
	if v, ok := tr.held(t, "a1"); !ok || v != newer.Version {
		t.Fatalf("the newer hint of a1 (version %d) went: held %v at %d", newer.Version, ok, v)
	}
	if _, ok := tr.held(t, "a2"); ok {
		t.Fatal("a2 held after its shard answered")
	}
	tr.round(context.Background())
	last := tr.kv.sent()[len(tr.kv.sent())-1]
	if tr.log.Count() != 0 || len(last) != 1 || string(last[0].GetValue()) != "new" || last[0].GetTentativeVersion() != newer.Version {
		t.Fatalf("next round: %d hints left, last batch %v", tr.log.Count(), last)
	}
}

// TestReconcileCutsLargeGroups: nine 1 MiB hints of one shard are more
// than one batch may carry (8 MiB): no batch the KV service gets is over
// reconcileBatchBytes, and all are reconciled within a few rounds. With
// today's bounds the page (reconcilePageMem) already keeps a round's group
// within one batch; TestCutBatches tests the cutting itself.
func TestReconcileCutsLargeGroups(t *testing.T) {
	tr := newTestReconciler(t)
	for i := range 9 {
		tr.hold(t, fmt.Sprintf("a%d", i), bytes.Repeat([]byte{'v'}, 1<<20))
	}
	tr.round(context.Background())
	// The round's page held what fits in reconcilePageMem (3 of them), not
	// 9 MiB at once.
	if got := 9 - tr.log.Count(); got != 3 {
		t.Fatalf("the first round reconciled %d hints of 1 MiB, want 3 (a page of at most %d bytes)", got, reconcilePageMem)
	}
	for range 8 {
		tr.round(context.Background())
	}
	if tr.log.Count() != 0 || tr.counted(t, "applied") != 9 {
		t.Fatalf("%d hints left, %v applied, after batches %d", tr.log.Count(), tr.counted(t, "applied"), len(tr.kv.sent()))
	}
	for _, b := range tr.kv.sent() {
		size := 0
		for _, op := range b {
			size += len(op.GetKey()) + len(op.GetValue())
		}
		if size > reconcileBatchBytes {
			t.Fatalf("a batch of %d bytes, over %d", size, reconcileBatchBytes)
		}
	}
}

func TestCutBatches(t *testing.T) {
	var group []hints.Hint
	for i := range 600 {
		group = append(group, hints.Hint{Key: []byte(fmt.Sprintf("k%03d", i))})
	}
	big := hints.Hint{Key: []byte("big"), Value: make([]byte, reconcileBatchBytes+1)}
	group = append(group, big, big)
	var got []int
	for _, b := range cutBatches(group) {
		got = append(got, len(b))
	}
	// 600 small ones by the op bound, then each oversized hint alone.
	if fmt.Sprint(got) != "[256 256 88 1 1]" {
		t.Fatalf("batches of %v", got)
	}
}

// TestReconcileDropsAHintThatCanNeverApply: a hint refused alone as
// invalid (its value over a limit lowered since it was held) is dropped,
// with an ERROR naming its key, counted as refused; the others of its
// batch are reconciled.
func TestReconcileDropsAHintThatCanNeverApply(t *testing.T) {
	tr := newTestReconciler(t)
	tr.hold(t, "a1", []byte("ok"))
	tr.hold(t, "a2-too-big", []byte("0123456789"))
	tr.hold(t, "a3", []byte("ok"))
	tr.kv.answer = func(_ context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
		for _, op := range ops {
			if len(op.GetValue()) > 4 {
				return nil, status.Errorf(codes.InvalidArgument, "value is %d bytes; the limit is 4 (--max-value-bytes)", len(op.GetValue()))
			}
		}
		return applyAll(ops), nil
	}
	// Refused by the leader but valid under this node's own limits (a
	// leader behind in a rolling restart that raises them): kept.
	tr.env.invalid = func(hints.Hint) error { return nil }
	tr.round(context.Background())
	if tr.log.Count() != 1 || tr.counted(t, "refused") != 0 || tr.counted(t, "applied") != 2 {
		t.Fatalf("refused elsewhere, valid here: %d hints left, refused %v, applied %v; want 1, 0, 2", tr.log.Count(), tr.counted(t, "refused"), tr.counted(t, "applied"))
	}
	// Over this node's own limits too (lowered since it was held): dropped.
	tr.env.invalid = func(h hints.Hint) error {
		if len(h.Value) > 4 {
			return fmt.Errorf("value of %d bytes, limit 4", len(h.Value))
		}
		return nil
	}
	delete(tr.backoff, 1)
	tr.round(context.Background())
	if tr.log.Count() != 0 || tr.counted(t, "refused") != 1 || tr.counted(t, "applied") != 2 {
		t.Fatalf("%d hints left, refused %v, applied %v; want 0, 1, 2", tr.log.Count(), tr.counted(t, "refused"), tr.counted(t, "applied"))
	}
	if logs := tr.logs.String(); !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, `a2-too-big`) || !strings.Contains(logs, "--max-value-bytes") {
		t.Fatalf("no ERROR naming the key and the refusal:\n%s", logs)
	}
	if _, ok := tr.backoff[1]; ok {
		t.Fatal("the shard backs off after a group that was answered")
	}
}

// TestReconcileKeepsHintsOnOtherErrors: only InvalidArgument that says
// the op is bad drops a hint; every other error of a single op keeps it
// and backs its shard off, even for a hint over this node's own limits
// (which a refusal for good would drop): the refusal decides
// (grpcapi.RefusedForGood, whose TestReconcileRefusals produces each).
func TestReconcileKeepsHintsOnOtherErrors(t *testing.T) {
	for _, err := range []error{
		status.Error(codes.Unavailable, "no leader"),
		status.Error(codes.DeadlineExceeded, "deadline"),
		status.Error(codes.ResourceExhausted, "the cluster is low on space"),
		status.Error(codes.Unknown, "ambiguous: it may have applied"),
		status.Error(codes.Canceled, "ambiguous: request canceled after it was proposed"),
		status.Error(codes.FailedPrecondition, "this node is of another cluster"),
		status.Error(codes.Internal, "boom"),
		status.Error(codes.InvalidArgument, `key "a1" does not belong to shard 1`),
		status.Error(codes.InvalidArgument, "operation 0: tentative_version is set only by Concord nodes (available mode's reconciler), once the cluster version allows it (8, version.Versions)"),
		status.Error(codes.InvalidArgument, "operation 0 has a field this server does not know (a newer client's or node's)"),
	} {
		t.Run(status.Code(err).String(), func(t *testing.T) {
			tr := newTestReconciler(t)
			tr.hold(t, "a1", []byte("x"))
			tr.env.invalid = func(hints.Hint) error { return errors.New("over this node's limits too") }
			tr.kv.answer = func(context.Context, []*concordpb.Op) (*concordpb.BatchResponse, error) { return nil, err }
			tr.round(context.Background())
			if _, ok := tr.held(t, "a1"); !ok || tr.counted(t, "refused") != 0 {
				t.Fatalf("%v: the hint went (refused %v)", err, tr.counted(t, "refused"))
			}
			if tr.due(1) {
				t.Fatalf("%v: the shard does not back off", err)
			}
		})
	}
}

// TestReconcileBackoffPerShard: a shard whose group failed waits 1 s,
// doubling to 30 s, reset when it succeeds; meanwhile the other shards
// are reconciled every round.
func TestReconcileBackoffPerShard(t *testing.T) {
	tr := newTestReconciler(t)
	fail := true
	tr.kv.answer = func(_ context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
		if testShardOf(ops[0].GetKey()) == 1 && fail {
			return nil, status.Error(codes.Unavailable, "no quorum")
		}
		return applyAll(ops), nil
	}
	tr.hold(t, "a-dead", []byte("x"))
	var waits []time.Duration
	for i := range 7 {
		tr.hold(t, fmt.Sprintf("b%d", i), []byte("y"))
		tr.round(context.Background())
		if _, ok := tr.held(t, fmt.Sprintf("b%d", i)); ok {
			t.Fatalf("round %d: shard 2's hint not reconciled while shard 1 backs off", i)
		}
		if tr.kv.sentTo(1) != i+1 {
			t.Fatalf("round %d: %d batches sent to shard 1 in backoff, want %d", i, tr.kv.sentTo(1), i+1)
		}
		// A round within the backoff leaves shard 1 alone, not shard 2.
		tr.hold(t, fmt.Sprintf("b%d-again", i), []byte("y"))
		tr.round(context.Background())
		if _, ok := tr.held(t, fmt.Sprintf("b%d-again", i)); ok || tr.kv.sentTo(1) != i+1 {
			t.Fatalf("round %d within the backoff: shard 2 reconciled %v, batches to shard 1 %d", i, !ok, tr.kv.sentTo(1))
		}
		b := tr.backoff[1]
		waits = append(waits, b.wait)
		tr.now = b.until
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("backoffs %v, want %v", waits, want)
	}
	fail = false
	tr.round(context.Background())
	if _, ok := tr.backoff[1]; ok || tr.log.Count() != 0 {
		t.Fatalf("after shard 1 succeeded: backoff %v, %d hints left", tr.backoff[1], tr.log.Count())
	}
}

// TestReconcilePassesPagesOfShardsInBackoff: with pages of a backed-off
// shard's hints ahead of another shard's, the round reads past them to
// the other's (within reconcileSkipPages).
func TestReconcilePassesPagesOfShardsInBackoff(t *testing.T) {
	tr := newTestReconciler(t)
	tr.kv.answer = func(_ context.Context, ops []*concordpb.Op) (*concordpb.BatchResponse, error) {
		if testShardOf(ops[0].GetKey()) == 1 {
			return nil, status.Error(codes.Unavailable, "no quorum")
		}
		return applyAll(ops), nil
	}
	for i := range 3 * reconcilePage {
		tr.hold(t, fmt.Sprintf("a%04d", i), nil)
	}
	tr.hold(t, "b1", []byte("y"))
	tr.round(context.Background()) // the first page: shard 1 fails and backs off
	if tr.kv.sentTo(1) != 1 {
		t.Fatalf("%d batches to shard 1, want 1", tr.kv.sentTo(1))
	}
	tr.round(context.Background())
	if _, ok := tr.held(t, "b1"); ok || tr.kv.sentTo(1) != 1 {
		t.Fatalf("the next round: shard 2's hint reconciled %v, %d batches to shard 1 (want 1)", !ok, tr.kv.sentTo(1))
	}
}

// TestReconcilerStopsPromptly: stopping cancels a round whose shard does
// not answer, and the round tries no other shard.
func TestReconcilerStopsPromptly(t *testing.T) {
	tr := newTestReconciler(t)
	entered := make(chan struct{}, 10)
	tr.kv.answer = func(ctx context.Context, _ []*concordpb.Op) (*concordpb.BatchResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	for _, k := range []string{"a1", "b1", "c1"} {
		tr.hold(t, k, []byte("x"))
	}
	stopC := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.run(stopC)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no round began")
	}
	stopped := time.Now()
	close(stopC)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the reconciler did not stop within 2 s of the node's stop")
	}
	if took := time.Since(stopped); took > time.Second || len(tr.kv.sent()) != 1 || tr.log.Count() != 3 {
		t.Fatalf("stopped in %v after %d batches with %d hints held; want under 1 s, 1, 3", took, len(tr.kv.sent()), tr.log.Count())
	}
}

// TestRemovedNodeLogsItsLostHints: a node stopped for its removal says,
// as an ERROR, how many tentative writes it held (they are lost).
func TestRemovedNodeLogsItsLostHints(t *testing.T) {
	tr := newTestReconciler(t)
	tr.hold(t, "a1", []byte("x"))
	tr.hold(t, "b1", []byte("y"))
	n := &Node{hints: tr.log, log: tr.env.log, failed: make(chan struct{})}
	n.failRemoved()
	select {
	case <-n.Failed():
	default:
		t.Fatal("the node did not stop")
	}
	if logs := tr.logs.String(); !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "holding 2 tentative writes") || !strings.Contains(logs, "lost") {
		t.Fatalf("no ERROR saying 2 tentative writes are lost:\n%s", logs)
	}
}

// TestRoundReportsWaiting: a round that finds hints only of shards
// backing off says so (the loop then starts no round for each write held
// until its next tick: each would read pages for nothing); one that sends,
// or finds no hint, does not.
func TestRoundReportsWaiting(t *testing.T) {
	tr := newTestReconciler(t)
	if tr.round(context.Background()) {
		t.Fatal("an empty log: waiting")
	}
	tr.hold(t, "a1", []byte("x"))
	tr.backoff = map[ids.ShardID]shardBackoff{1: {wait: time.Second, until: tr.now.Add(time.Hour)}}
	if !tr.round(context.Background()) {
		t.Fatal("only a shard backing off: not waiting")
	}
	delete(tr.backoff, 1)
	if tr.round(context.Background()) {
		t.Fatal("a round that sent: waiting")
	}
	if tr.log.Count() != 0 {
		t.Fatalf("%d hints left", tr.log.Count())
	}
}
