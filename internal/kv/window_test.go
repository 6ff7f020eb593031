package kv

import (
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// winCmd is a KV command of windowed session id: seq with the client's floor.
func winCmd(id, seq, floor uint64, now int64, ops ...*concordpb.Op) *storepb.Command {
	return &storepb.Command{UnixNanos: now, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: id, Seq: seq, SessionFloor: floor, Ops: ops}}}
}

func (f *fixture) win(id, seq, floor uint64, now int64, ops ...*concordpb.Op) *storepb.CommandResult {
	f.t.Helper()
	return f.apply(wholeRange, winCmd(id, seq, floor, now, ops...))
}

// TestWindowRetriesAnsweredOutOfOrder protects at-most-once in a window:
// seqs apply in any order, and a retry of any seq at or above the floor is
// answered with its first result and applies nothing.
func TestWindowRetriesAnsweredOutOfOrder(t *testing.T) {
	f := newFixture(t)
	first := map[uint64]*storepb.CommandResult{}
	for _, seq := range []uint64{3, 1, 2, 5} {
		first[seq] = f.win(7, seq, 1, int64(seq), putPrev("k", "v"+string(rune('0'+seq))))
	}
	f.value("k", []byte("v5"))
	for _, seq := range []uint64{1, 5, 2, 3} {
		retry := f.win(7, seq, 1, 10, putPrev("k", "retry"), del("j"))
		if !proto.Equal(retry, first[seq]) {
			t.Fatalf("retry of %d answered %v, first answer was %v", seq, retry, first[seq])
		}
	}
	f.value("k", []byte("v5"))
	if r := f.one(first[1]); !r.GetOk() || string(r.GetValue()) != "v3" {
		t.Fatalf("seq 1 (applied after 3) answered %v, want previous v3", r)
	}
}

// TestWindowFloorForgetsAndRefuses protects the floor: the results below
// it are dropped from the record, and a seq below it (a stale duplicate of
// a request the client has its answer for) is refused without a write.
func TestWindowFloorForgetsAndRefuses(t *testing.T) {
	f := newFixture(t)
	for seq := uint64(1); seq <= 4; seq++ {
		f.win(7, seq, 1, 1, put("k", "old"))
	}
	f.win(7, 6, 4, 2, put("k", "v6")) // the client has answers below 4
	rec := sessionRecord(t, f, 7)
	if rec.GetFloor() != 4 || len(rec.GetWindow()) != 2 || rec.GetWindow()[0].GetSeq() != 4 || rec.GetWindow()[1].GetSeq() != 6 {
		t.Fatalf("record after floor 4: %v, want floor 4 and seqs 4, 6", rec)
	}
	for _, seq := range []uint64{1, 3} {
		res := f.win(7, seq, 1, 3, put("k", "stale"))
		if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition || len(res.GetResults()) != 0 {
			t.Fatalf("seq %d below the floor: %v, want FailedPrecondition", seq, res)
		}
	}
	f.value("k", []byte("v6"))
	if f.win(7, 5, 2, 4, put("k", "v5")).GetErrorCode() != 0 { // a lower floor moves nothing back
		t.Fatal("seq 5 between floor and top refused")
	}
	if rec := sessionRecord(t, f, 7); rec.GetFloor() != 4 {
		t.Fatalf("floor %d after a command with floor 2, want it to stay 4", rec.GetFloor())
	}
}

// TestWindowRecordOncePerBatch protects the point of windows: a batch of
// many commands of one session writes its record once, and the record
// holds every result.
func TestWindowRecordOncePerBatch(t *testing.T) {
	f := newFixture(t)
	var cmds []*storepb.Command
	for seq := uint64(1); seq <= 50; seq++ {
		cmds = append(cmds, winCmd(7, seq, 1, 1, put("k"+string(rune('a'+seq%26)), "v")))
	}
	b := f.db.NewIndexedBatch()
	defer b.Close()
	for _, c := range cmds {
		if _, err := f.sm.Apply(b, wholeRange, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := flushApplied(f.sm, b); err != nil {
		t.Fatal(err)
	}
	sessionKeys := 0
	it, err := b.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := keys.SessionSpan(shard)
	for ok := it.First(); ok; ok = it.Next() {
		if string(it.Key()) >= string(lo) && string(it.Key()) < string(hi) {
			sessionKeys++
		}
	}
	_ = it.Close()
	if b.Count() != 50+1+1 || sessionKeys != 1 { // 50 values, one session record, the applied state
		t.Fatalf("batch of 50 windowed puts: %d records, %d session keys; want 52 and 1", b.Count(), sessionKeys)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if rec := sessionRecord(t, f, 7); len(rec.GetWindow()) != 50 {
		t.Fatalf("record holds %d results, want 50", len(rec.GetWindow()))
	}
}

// TestWindowSurvivesRestartAndEviction protects the record as the truth: a
// state machine that starts over (a restart) or lost the window from its
// cache still answers retries and refuses stale seqs from the record.
func TestWindowSurvivesRestartAndEviction(t *testing.T) {
	f := newFixture(t)
	first := f.win(7, 2, 1, 1, putPrev("k", "v2"))
	f.win(7, 3, 2, 2, put("j", "v3"))
	delete(f.sm.windows, 7) // as eviction does
	if retry := f.win(7, 2, 2, 3, putPrev("k", "again")); !proto.Equal(retry, first) {
		t.Fatalf("retry after eviction answered %v, first answer was %v", retry, first)
	}
	restarted := &fixture{t: t, db: f.db, sm: New(shard)}
	if retry := restarted.win(7, 2, 2, 4, putPrev("k", "again")); !proto.Equal(retry, first) {
		t.Fatalf("retry after restart answered %v, first answer was %v", retry, first)
	}
	if res := restarted.win(7, 1, 1, 5, put("k", "stale")); codes.Code(res.GetErrorCode()) != codes.FailedPrecondition {
		t.Fatalf("seq 1 below floor 2 after restart: %v, want FailedPrecondition", res)
	}
	restarted.value("k", []byte("v2"))
}

// TestWindowFullRefused protects the bound: a command that finds its
// session's window full applies nothing, and applies once the floor frees
// room.
func TestWindowFullRefused(t *testing.T) {
	f := newFixture(t)
	var cmds []*storepb.Command
	for seq := uint64(1); seq <= MaxSessionWindow; seq++ {
		cmds = append(cmds, winCmd(7, seq, 1, 1, put("k", "v")))
	}
	f.applyBatch(wholeRange, cmds...)
	res := f.win(7, MaxSessionWindow+1, 1, 2, put("k", "over"))
	// The Go client knows this refusal as one before applying by its
	// words (client.windowFullMark): not ambiguous.
	if codes.Code(res.GetErrorCode()) != codes.ResourceExhausted || !strings.Contains(res.GetErrorMessage(), "the window is full") {
		t.Fatalf("command past a full window: %v, want ResourceExhausted, \"the window is full\"", res)
	}
	f.value("k", []byte("v"))
	if res := f.win(7, MaxSessionWindow+1, 2, 3, put("k", "in")); res.GetErrorCode() != 0 {
		t.Fatalf("command after the floor moved: %v, want applied", res)
	}
	f.value("k", []byte("in"))
}

// TestWindowRandomAgainstModel checks windowed sessions against a model of
// the client's contract: a client hands out seqs in order, completes them
// in any order, retries uncompleted ones (and duplicates arrive late), and
// sends the lowest uncompleted seq as its floor. Every seq must apply
// exactly once: a retry of an applied one is answered with its first
// result, and a stale duplicate of a completed one is refused or answered,
// never applied again. Batches, evictions and restarts come at random.
func TestWindowRandomAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	f := newFixture(t)
	applied := map[uint64]int{}        // seq -> times its op took effect
	firstAnswer := map[uint64]string{} // seq -> first result, encoded
	var inflight, completed []uint64
	floorAt := map[uint64]uint64{} // the floor each seq is sent with: its first send's, as the client does
	next := uint64(1)
	floor := func() uint64 {
		lo := next
		for _, s := range inflight {
			lo = min(lo, s)
		}
		return lo
	}
	for round := 0; round < 400; round++ {
		var cmds []*storepb.Command
		var seqs []uint64
		for n := rng.Intn(6) + 1; n > 0; n-- {
			var seq uint64
			switch r := rng.Intn(10); {
			case r < 5 || len(inflight) == 0:
				seq = next
				floorAt[seq] = floor()
				next++
				inflight = append(inflight, seq)
			case r < 8:
				seq = inflight[rng.Intn(len(inflight))] // a retry
			default:
				if len(completed) == 0 {
					continue
				}
				seq = completed[rng.Intn(len(completed))] // a late duplicate
			}
			// Each seq increments its own counter key: applying twice shows.
			cmds = append(cmds, winCmd(7, seq, floorAt[seq], int64(round+1),
				&concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("c" + string(rune('0'+seq%64))), IntDelta: 1}))
			seqs = append(seqs, seq)
		}
		if len(cmds) == 0 {
			continue
		}
		for i, res := range f.applyBatch(wholeRange, cmds...) {
			seq := seqs[i]
			enc, _ := proto.Marshal(res)
			switch {
			case res.GetErrorCode() == uint32(codes.FailedPrecondition):
				if seq >= floor() && slices.Contains(inflight, seq) {
					t.Fatalf("round %d: in-flight seq %d refused as stale: %v", round, seq, res)
				}
			case res.GetErrorCode() != 0:
				t.Fatalf("round %d: seq %d: %v", round, seq, res)
			default:
				if a, ok := firstAnswer[seq]; ok {
					if a != string(enc) {
						t.Fatalf("round %d: seq %d answered %v after a first answer %q", round, seq, res, a)
					}
				} else {
					firstAnswer[seq] = string(enc)
					applied[seq]++
				}
			}
		}
		for i := rng.Intn(3); i > 0 && len(inflight) > 0; i-- { // answers reach the client
			j := rng.Intn(len(inflight))
			if _, ok := firstAnswer[inflight[j]]; ok {
				completed = append(completed, inflight[j])
				inflight = append(inflight[:j], inflight[j+1:]...)
			}
		}
		switch rng.Intn(20) {
		case 0:
			f.sm = New(shard) // a restart
		case 1:
			clear(f.sm.windows) // eviction
		}
	}
	// The counters sum to the seqs applied: none twice.
	total := int64(0)
	for i := 0; i < 64; i++ {
		got, _, found, err := Get(f.db, shard, []byte("c"+string(rune('0'+i))), 0)
		if err != nil {
			t.Fatal(err)
		}
		if found {
			n, err := strconv.ParseInt(string(got), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	if total != int64(len(firstAnswer)) {
		t.Fatalf("counters sum to %d, %d seqs applied once each", total, len(firstAnswer))
	}
	for seq, n := range applied {
		if n != 1 {
			t.Fatalf("seq %d applied %d times", seq, n)
		}
	}
	if len(firstAnswer) < 300 {
		t.Fatalf("only %d seqs applied: the model exercised too little", len(firstAnswer))
	}
}

// TestSessionKindsDoNotMix protects determinism: a session is windowed or
// one-at-a-time for good, decided by its record, so a command of the
// other kind is refused and writes nothing, whether the state machine has
// the session cached (in the batch that wrote it, or later) or reads its
// record cold, as a restarted replica does. Were the kind left to the
// caches, replicas with different caches could answer differently.
func TestSessionKindsDoNotMix(t *testing.T) {
	f := newFixture(t)
	f.kv(1, 1, 1, put("a", "1")) // session 1: one at a time
	f.win(2, 1, 1, 1, put("b", "1"))
	check := func(f *fixture, when string) {
		t.Helper()
		for _, res := range []*storepb.CommandResult{
			f.win(1, 2, 1, 2, put("a", "windowed")),
			f.kv(2, 2, 2, put("b", "alone")),
		} {
			if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition || len(res.GetResults()) != 0 {
				t.Fatalf("%s: a command of the other kind: %v, want FailedPrecondition", when, res)
			}
		}
		f.value("a", []byte("1"))
		f.value("b", []byte("1"))
	}
	check(f, "cached")
	check(&fixture{t: t, db: f.db, sm: New(shard)}, "after a restart")
	// In one batch: the second command finds the first's deferred record.
	res := f.applyBatch(wholeRange, kvCmd(3, 1, 3, put("c", "1")), winCmd(3, 2, 1, 3, put("c", "2")),
		winCmd(4, 1, 1, 3, put("d", "1")), kvCmd(4, 2, 3, put("d", "2")))
	if res[0].GetErrorCode() != 0 || res[2].GetErrorCode() != 0 ||
		codes.Code(res[1].GetErrorCode()) != codes.FailedPrecondition || codes.Code(res[3].GetErrorCode()) != codes.FailedPrecondition {
		t.Fatalf("kinds mixed in one batch: %v", res)
	}
	f.value("c", []byte("1"))
	f.value("d", []byte("1"))
}
