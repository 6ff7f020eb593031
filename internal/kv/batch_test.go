package kv

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// writesPerKey counts the records b holds for each key (sets and deletes).
func writesPerKey(t *testing.T, b *pebble.Batch) map[string]int {
	t.Helper()
	n := map[string]int{}
	r := batchrepr.Read(b.Repr())
	for {
		_, k, _, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return n
		}
		n[string(k)]++
	}
}

// TestBatchWritesSessionsAndClockOnce protects the lean write path's
// batching: commands of one session and of several sessions in one batch
// leave one session record per touched session and one clock record in
// the batch, holding the last command's values; and inside the batch the
// at-most-once check sees the earlier commands (a retry of the batch's own
// command is answered with its result, an older seq is refused).
func TestBatchWritesSessionsAndClockOnce(t *testing.T) {
	f := newFixture(t)
	b := f.db.NewIndexedBatch()
	defer b.Close()
	cmds := []*storepb.Command{
		kvCmd(7, 1, at(1*time.Second), putPrev("a", "1")),
		kvCmd(8, 1, at(2*time.Second), put("b", "1")),
		kvCmd(7, 2, at(3*time.Second), putPrev("a", "2")),
		kvCmd(7, 2, at(4*time.Second), put("a", "retry")), // a retry of seq 2
		kvCmd(8, 2, at(5*time.Second), put("b", "2")),
		kvCmd(7, 1, at(6*time.Second), put("a", "old")), // older than seq 2
		kvCmd(9, 4, at(7*time.Second), putTTL("c", "1", time.Minute)),
	}
	var res []*storepb.CommandResult
	for _, cmd := range cmds {
		r, err := f.sm.Apply(b, wholeRange, cmd)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	if !proto.Equal(res[3], res[2]) {
		t.Fatalf("retry of seq 2 in the same batch answered %v, first answer %v", res[3], res[2])
	}
	if codes.Code(res[5].GetErrorCode()) != codes.FailedPrecondition {
		t.Fatalf("seq 1 after seq 2 in the same batch: %v, want FailedPrecondition", res[5])
	}
	if err := flushApplied(f.sm, b); err != nil {
		t.Fatal(err)
	}
	writes := writesPerKey(t, b)
	for _, k := range [][]byte{keys.Session(shard, 7), keys.Session(shard, 8), keys.Session(shard, 9), keys.Applied(shard)} {
		if writes[string(k)] != 1 {
			t.Fatalf("%d writes of %x in the batch, want 1 (all: %v)", writes[string(k)], k, writes)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f.value("a", []byte("2"))
	f.value("b", []byte("2"))
	for s, want := range map[uint64]struct {
		seq    uint64
		res    *storepb.CommandResult
		active int64
	}{7: {2, res[2], at(3 * time.Second)}, 8: {2, res[4], at(5 * time.Second)}, 9: {4, res[6], at(7 * time.Second)}} {
		rec := sessionRecord(t, f, s)
		if rec.GetSeq() != want.seq || !proto.Equal(rec.GetResult(), want.res) || rec.GetLastActiveUnixNanos() != want.active {
			t.Fatalf("session %d record %v, want seq %d, result %v, active at %d", s, rec, want.seq, want.res, want.active)
		}
	}
	f.state(7*time.Second, "c", []byte("1"), t0+7_000+60_000)
}

// TestBatchedStateSurvivesRestartAndSnapshot protects at-most-once and the
// shard clock across a restart and a snapshot install when the records
// were written once per batch: a state machine on the reopened database
// (caches empty) and one whose caches a snapshot of that state replaced
// both answer each session's last seq with its first result, refuse older
// ones, and place a TTL on the batch's clock.
func TestBatchedStateSurvivesRestartAndSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	open := func() *pebble.DB {
		db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quiet{}})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	f := &fixture{t: t, db: open(), sm: New(shard)}
	res := f.applyBatch(wholeRange,
		kvCmd(1, 1, at(time.Second), putPrev("a", "1")),
		kvCmd(1, 2, at(2*time.Second), putPrev("a", "2")),
		kvCmd(2, 5, at(3*time.Second), putPrev("b", "5")),
		kvCmd(1, 3, at(time.Hour), putPrev("a", "3")), // a leader an hour ahead: the clock moves 90 s
	)
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := &fixture{t: t, db: open(), sm: New(shard)}
	t.Cleanup(func() { _ = restarted.db.Close() })

	// A snapshot of that state installed under a state machine whose
	// caches say otherwise (session 1 at seq 9, the clock an hour early).
	snap := newFixture(t)
	snap.kv(1, 9, at(-time.Hour), put("x", "1"))
	for _, kv := range contents(t, restarted.db) {
		if err := snap.db.Set(kv[0], kv[1], pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	snap.sm.SnapshotInstalled()

	for name, g := range map[string]*fixture{"restart": restarted, "snapshot": snap} {
		now := at(time.Hour + time.Second)
		got := g.applyBatch(wholeRange,
			kvCmd(1, 3, now, putPrev("a", "applied twice")),
			kvCmd(2, 5, now, putPrev("b", "applied twice")),
			kvCmd(1, 2, now, put("a", "older")),
			kvCmd(3, 1, now, putTTL("t", "v", time.Second)),
		)
		if !proto.Equal(got[0], res[3]) || !proto.Equal(got[1], res[2]) {
			t.Fatalf("%s: retries answered %v, %v; first answers %v, %v", name, got[0], got[1], res[3], res[2])
		}
		if codes.Code(got[2].GetErrorCode()) != codes.FailedPrecondition {
			t.Fatalf("%s: seq 2 after seq 3: %v, want FailedPrecondition", name, got[2])
		}
		g.value("a", []byte("3"))
		g.value("b", []byte("5"))
		// The batch left the clock at +93 s (+3 s, then one step of
		// MaxClockStep), its highest stamp at +1 h; the stamp 1 s later
		// moves it to +94 s, so the TTL ends at +95 s. (Without the clock
		// record it would start at the stamp, +1 h 1 s.)
		g.state(94*time.Second, "t", []byte("v"), t0+95_000)
	}
}

// randomSessionCmd is a command of one of a few sessions: mostly the next
// seq, sometimes a retry of the last or an older one; now and then an
// ExpireSessions with a short idle time, so records are deleted and
// recreated inside batches.
func randomSessionCmd(rng *rand.Rand, seqs map[uint64]uint64, stamp int64) *storepb.Command {
	if rng.Intn(15) == 0 {
		return expire(stamp, stamp-int64(rng.Intn(3))*int64(time.Second))
	}
	s := uint64(rng.Intn(6)) // 0: no session; 4 and 5: windowed
	if s >= 4 {
		return randomWindowedCmd(rng, s, seqs, stamp)
	}
	seq := seqs[s] + 1
	switch rng.Intn(6) {
	case 0:
		seq = seqs[s] // a retry
	case 1:
		seq = uint64(rng.Int63n(int64(seqs[s] + 1))) // older, or a retry
	}
	seqs[s] = max(seqs[s], seq)
	ops := []*concordpb.Op{randomOp(rng)}
	for rng.Intn(3) == 0 {
		ops = append(ops, randomOp(rng))
	}
	return &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: s, Seq: seq, Ops: ops, MaxValueBytes: 16}}}
}

// randomWindowedCmd is a command of windowed session s: mostly a new seq,
// sometimes a retry of one near or below the floor; the floor (seqs[s<<32])
// moves up now and then, never past a new seq.
func randomWindowedCmd(rng *rand.Rand, s uint64, seqs map[uint64]uint64, stamp int64) *storepb.Command {
	next, floor := seqs[s]+1, max(seqs[s<<32], 1)
	seq := next
	if rng.Intn(4) == 0 && next > 3 {
		seq = next - 1 - uint64(rng.Intn(int(min(next-1, 8)))) // a retry or a stale duplicate
	} else {
		seqs[s] = next
	}
	if rng.Intn(3) == 0 {
		floor = max(floor, seq-uint64(rng.Intn(int(min(seq, 4)))))
	}
	f := min(floor, seq) // a client's floor is never above the seq it sends
	seqs[s<<32] = max(seqs[s<<32], f)
	return &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: s, Seq: seq, SessionFloor: f, Ops: []*concordpb.Op{randomOp(rng)}, MaxValueBytes: 16}}}
}

// TestBatchesMatchPerCommandWrites protects "the same results" of writing
// the session and clock records once per batch: one state machine applies
// a random stream (every op kind, sessions with retries and older seqs,
// session expiry, stamps jumping back and forth) one command per batch —
// what writing the records per command committed — and another applies it
// in batches of random size. Every result is the same, and after each batch
// both databases hold exactly the same keys and values: every state the
// batched one can crash in is one the per-command writes produced too.
func TestBatchesMatchPerCommandWrites(t *testing.T) {
	one, batched := newFixture(t), newFixture(t)
	rng := rand.New(rand.NewSource(2))
	seqs := map[uint64]uint64{}
	stamp := at(0)
	for i := 0; i < 3000; {
		var cmds []*storepb.Command
		for n := 1 + rng.Intn(12); n > 0; n-- {
			stamp += int64(rng.Intn(400)-100) * int64(time.Millisecond)
			cmds = append(cmds, randomSessionCmd(rng, seqs, stamp))
		}
		got := batched.applyBatch(wholeRange, cmds...)
		for j, cmd := range cmds {
			want := one.apply(wholeRange, cmd)
			if fmt.Sprint(got[j]) != fmt.Sprint(want) {
				t.Fatalf("command %d: batched result %v, per command %v", i+j, got[j], want)
			}
		}
		i += len(cmds)
		ca, cb := contents(t, one.db), contents(t, batched.db)
		if len(ca) != len(cb) {
			t.Fatalf("after command %d: %d keys per command, %d batched", i, len(ca), len(cb))
		}
		for k := range ca {
			if !bytes.Equal(ca[k][0], cb[k][0]) || !bytes.Equal(ca[k][1], cb[k][1]) {
				t.Fatalf("after command %d: %q=%x per command, %q=%x batched", i, ca[k][0], ca[k][1], cb[k][0], cb[k][1])
			}
		}
	}
}

// TestApplyIntoNewBatchBeforeFlushRefused protects the deferred records
// from a caller that forgets Flush: applying into a second batch while the
// first one's records are unwritten is an error, not a silent loss.
func TestApplyIntoNewBatchBeforeFlushRefused(t *testing.T) {
	f := newFixture(t)
	b1, b2 := f.db.NewIndexedBatch(), f.db.NewIndexedBatch()
	defer b1.Close()
	defer b2.Close()
	if _, err := f.sm.Apply(b1, wholeRange, kvCmd(1, 1, at(0), put("a", "1"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sm.Apply(b2, wholeRange, kvCmd(1, 2, at(0), put("a", "2"))); err == nil {
		t.Fatal("Apply into a second batch before Flush of the first succeeded")
	}
	if err := flushApplied(f.sm, b2); err == nil {
		t.Fatal("Flush of a batch that was not applied into succeeded")
	}
	if err := flushApplied(f.sm, b1); err != nil {
		t.Fatal(err)
	}
	if w := writesPerKey(t, b1); w[string(keys.Session(shard, 1))] != 1 || w[string(keys.Applied(shard))] != 1 {
		t.Fatalf("first batch after Flush: %v, want its session record and the applied state (with the clock)", w)
	}
}

// TestEvictedSessionDeduplicatesInBatch protects at-most-once when the
// cache evicts a session whose record the current batch has not written
// yet: the retry later in the batch is still answered with the first
// result (the deferred record is looked at before the cache and Pebble).
func TestEvictedSessionDeduplicatesInBatch(t *testing.T) {
	f := newFixture(t)
	f.kv(9, 1, at(0), put("k", "v1")) // an older record in Pebble
	b := f.db.NewIndexedBatch()
	defer b.Close()
	first, err := f.sm.Apply(b, wholeRange, kvCmd(9, 2, at(time.Second), putPrev("k", "v2")))
	if err != nil {
		t.Fatal(err)
	}
	delete(f.sm.sessions, 9) // as eviction does
	retry, err := f.sm.Apply(b, wholeRange, kvCmd(9, 2, at(2*time.Second), putPrev("k", "applied twice")))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(retry, first) {
		t.Fatalf("retry after eviction in the same batch answered %v, first answer %v", retry, first)
	}
	if err := flushApplied(f.sm, b); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f.value("k", []byte("v2"))
}

// TestMergedSetsOneRecordEach protects the write path of a merged batch of
// pipelined SETs (one command of many blind PUTs, some of one key, among
// other ops): each op gets its own right result (the blind PUTs share one
// empty result, which must not leak into the others), each PUT is one
// record in the batch and nothing more than the applied-state record (which
// holds the shard clock) is added, and
// the last PUT of a key wins.
func TestMergedSetsOneRecordEach(t *testing.T) {
	f := newFixture(t)
	ops := []*concordpb.Op{put("hot", "0")}
	for i := 1; i < 40; i++ {
		ops = append(ops, put("hot", fmt.Sprint(i)), put(fmt.Sprintf("k%d", i), "v"))
	}
	ops = append(ops, incrOp("n", 5), putPrev("hot", "last"), put("k1", "again"))
	b := f.db.NewIndexedBatch()
	defer b.Close()
	res, err := f.sm.Apply(b, wholeRange, kvCmd(0, 0, at(time.Second), ops...))
	if err != nil || res.GetErrorCode() != 0 {
		t.Fatalf("apply: %v %v", res, err)
	}
	if err := flushApplied(f.sm, b); err != nil {
		t.Fatal(err)
	}
	rs := res.GetResults()
	if len(rs) != len(ops) {
		t.Fatalf("%d results for %d ops", len(rs), len(ops))
	}
	empty := &concordpb.OpResult{}
	for i, r := range rs[:len(ops)-3] {
		if !proto.Equal(r, empty) {
			t.Fatalf("blind PUT %d: result %v, want empty", i, r)
		}
	}
	if r := rs[len(ops)-3]; r.GetIntValue() != 5 {
		t.Fatalf("INCR after the PUTs: %v, want 5", r)
	}
	if r := rs[len(ops)-2]; !r.GetOk() || string(r.GetValue()) != "39" {
		t.Fatalf("PUT with the previous value after the PUTs: %v, want ok and 39", r)
	}
	if !proto.Equal(rs[len(ops)-1], empty) || !proto.Equal(rs[0], empty) {
		t.Fatalf("the shared empty result changed: first %v, last %v", rs[0], rs[len(ops)-1])
	}
	writes := writesPerKey(t, b)
	total := 0
	for _, n := range writes {
		total += n
	}
	// One record per op (the INCR writes one too), plus the applied state
	// that holds the clock.
	if want := len(ops) + 1; total != want || writes[string(keys.Applied(shard))] != 1 {
		t.Fatalf("%d records in the batch, want %d (one per op and the applied state): %v", total, want, writes)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"hot": "last", "k1": "again", "k39": "v"} {
		if v, _, found, err := Get(f.db, shard, []byte(k), at(time.Second)/int64(time.Millisecond)); err != nil || !found || string(v) != want {
			t.Fatalf("%s = %q (found %v, %v), want the last PUT's %q", k, v, found, err, want)
		}
	}
}

// TestReadModifyWritesOfAKeyOncePerBatch protects the deferred user
// records (deferred.go): a batch of INCRs of one counter, an APPEND and a
// DELETE-then-INCR of others, each op seeing the ones before it, leaves
// one write per user key in the batch, and the committed values are the
// last ops'. Before, every op wrote a version of its key into the batch
// (a memtable insert at commit) and read the last one back through it.
func TestReadModifyWritesOfAKeyOncePerBatch(t *testing.T) {
	f := newFixture(t)
	f.kv(0, 0, at(0), put("gone", "9"))
	b := f.db.NewIndexedBatch()
	defer b.Close()
	incr := func(k string) *concordpb.Op {
		return &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte(k), IntDelta: 1}
	}
	var cmds []*storepb.Command
	for range 100 {
		cmds = append(cmds, kvCmd(0, 0, at(time.Second), incr("counter")))
	}
	cmds = append(cmds,
		kvCmd(0, 0, at(time.Second), &concordpb.Op{Type: concordpb.OpType_OP_APPEND, Key: []byte("log"), Value: []byte("a")}),
		kvCmd(0, 0, at(time.Second), &concordpb.Op{Type: concordpb.OpType_OP_APPEND, Key: []byte("log"), Value: []byte("b")}),
		kvCmd(0, 0, at(time.Second), &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: []byte("gone")}),
		kvCmd(0, 0, at(time.Second), incr("gone")))
	for i, cmd := range cmds {
		r, err := f.sm.Apply(b, wholeRange, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if i < 100 && r.GetResults()[0].GetIntValue() != int64(i+1) {
			t.Fatalf("INCR %d answered %v, want %d", i+1, r, i+1)
		}
	}
	if err := flushApplied(f.sm, b); err != nil {
		t.Fatal(err)
	}
	writes := writesPerKey(t, b)
	for _, k := range []string{"counter", "log", "gone"} {
		if n := writes[string(keys.User(shard, []byte(k)))]; n != 1 {
			t.Fatalf("%d writes of %q in the batch, want 1 (all: %v)", n, k, writes)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f.value("counter", []byte("100"))
	f.value("log", []byte("ab"))
	f.value("gone", []byte("1")) // deleted, then INCR from nothing
}
