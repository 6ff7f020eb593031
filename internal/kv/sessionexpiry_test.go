package kv

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// sessionCmds is a random run of session commands (one at a time and
// windowed, retries and older seqs among them), no expiry.
func sessionCmds(rng *rand.Rand, seqs map[uint64]uint64, stamp *int64) []*storepb.Command {
	var cmds []*storepb.Command
	for n := 1 + rng.Intn(8); n > 0; {
		*stamp += int64(rng.Intn(300)) * int64(time.Millisecond) // forward, within MaxClockStep: the clock is the stamp
		cmd := randomSessionCmd(rng, seqs, *stamp)
		if cmd.GetExpireSessions() == nil {
			cmds, n = append(cmds, cmd), n-1
		}
	}
	return cmds
}

// expireByUnmarshal is the reference session expiry: it unmarshals every
// committed record of f whole and deletes those last active before the
// shard clock minus idle, then drops f's caches as a snapshot install does.
func expireByUnmarshal(t *testing.T, f *fixture, idle int64) {
	t.Helper()
	var as storepb.AppliedState
	if _, err := storage.GetProto(f.db, keys.Applied(shard), &as); err != nil {
		t.Fatal(err)
	}
	cutoff := as.GetClock().GetNow() - idle
	lo, hi := keys.SessionSpan(shard)
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	b := f.db.NewBatch()
	for ok := it.First(); ok; ok = it.Next() {
		var rec storepb.SessionRecord
		if err := proto.Unmarshal(it.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.GetLastActiveUnixNanos() < cutoff {
			if err := b.Delete(it.Key(), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f.sm.SnapshotInstalled()
}

// sameContents fails unless a and b hold exactly the same keys and values.
func sameContents(t *testing.T, a, b *fixture, when string) {
	t.Helper()
	ca, cb := contents(t, a.db), contents(t, b.db)
	for i := 0; i < max(len(ca), len(cb)); i++ {
		if i >= len(ca) || i >= len(cb) || !bytes.Equal(ca[i][0], cb[i][0]) || !bytes.Equal(ca[i][1], cb[i][1]) {
			t.Fatalf("%s: the databases differ at entry %d (%d and %d entries)", when, i, len(ca), len(cb))
		}
	}
}

// TestExpireSessionsAsUnmarshal protects what session expiry deletes now
// that it decodes only each record's activity time, from the iterator,
// with no second lookup: one state machine applies random session commands
// and, in the same batch (so deferred records are among those read), an
// ExpireSessions; a reference applies the commands, commits, and deletes
// the records a whole unmarshal of each finds idle. Both databases are the
// same after every round, and each round expires some records and keeps
// some.
func TestExpireSessionsAsUnmarshal(t *testing.T) {
	got, ref := newFixture(t), newFixture(t)
	rng := rand.New(rand.NewSource(3))
	seqs := map[uint64]uint64{}
	stamp := at(0)
	lo, hi := keys.SessionSpan(shard)
	expired, kept := 0, 0
	for round := 0; round < 300; round++ {
		cmds := sessionCmds(rng, seqs, &stamp)
		idle := int64(rng.Intn(1500)) * int64(time.Millisecond)
		res := got.applyBatch(wholeRange, append(cmds, expire(stamp, stamp-idle))...)
		want := ref.applyBatch(wholeRange, cmds...)
		for i := range cmds {
			if !proto.Equal(res[i], want[i]) {
				t.Fatalf("round %d: command %d answered %v, reference %v", round, i, res[i], want[i])
			}
		}
		before := count(t, ref.db, lo, hi)
		expireByUnmarshal(t, ref, idle)
		after := count(t, ref.db, lo, hi)
		expired, kept = expired+before-after, kept+after
		sameContents(t, got, ref, fmt.Sprintf("after round %d", round))
	}
	t.Logf("expired %d records, kept %d", expired, kept)
	if expired == 0 || kept == 0 {
		t.Fatalf("the rounds expired %d records and kept %d: the test needs both", expired, kept)
	}
}

// expireFrom is a bounded ExpireSessions: at most limit records, from
// session id from on.
func expireFrom(stamp, before int64, from uint64, limit uint32) *storepb.Command {
	cmd := expire(stamp, before)
	cmd.GetExpireSessions().FromSessionId, cmd.GetExpireSessions().MaxRecords = from, limit
	return cmd
}

// sessionIDs lists the ids of f's session records, in key order.
func sessionIDs(t *testing.T, f *fixture) []uint64 {
	t.Helper()
	lo, hi := keys.SessionSpan(shard)
	var ids []uint64
	for _, kv := range contents(t, f.db) {
		if bytes.Compare(kv[0], lo) >= 0 && bytes.Compare(kv[0], hi) < 0 {
			ids = append(ids, keys.SessionOf(shard, kv[0]))
		}
	}
	return ids
}

// TestExpireSessionsBounded protects the bound on one expiry apply: a
// command with max_records reads that many records from from_session_id
// on, deletes only the idle ones among them (the batch holds no more
// deletes than that), and answers the first id it did not read; commands
// resuming there expire every idle record and keep every live one, the
// last answering 0.
func TestExpireSessionsBounded(t *testing.T) {
	f := newFixture(t)
	// Sessions 1..30, active 1 s apart; the cutoff falls between 25 and 26.
	for s := uint64(1); s <= 30; s++ {
		f.kv(s, 1, at(time.Duration(s)*time.Second), put("k", "v"))
	}
	now := at(time.Minute) // 30 s on: the clock takes the step whole
	before := now - int64(34500*time.Millisecond)
	var from uint64
	var cmds int
	for {
		b := f.db.NewIndexedBatch()
		res, err := f.sm.Apply(b, wholeRange, expireFrom(now, before, from, 10))
		if err != nil || res.GetErrorCode() != 0 {
			t.Fatalf("expire from %d: %v %v", from, res, err)
		}
		if deletes := int(b.Count()); deletes > 10 {
			t.Fatalf("one command limited to 10 records wrote %d deletes", deletes)
		}
		if err := flushApplied(f.sm, b); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		b.Close()
		cmds++
		want := from + 10 // ids are dense from 1: the command read from..from+9
		if from == 0 {
			want = 11
		}
		if want > 30 {
			want = 0
		}
		if res.GetNextSessionId() != want {
			t.Fatalf("command %d from %d answered next %d, want %d", cmds, from, res.GetNextSessionId(), want)
		}
		if cmds == 1 {
			if ids := sessionIDs(t, f); len(ids) != 20 || ids[0] != 11 {
				t.Fatalf("after the first command of 10 the records are %v, want 11..30", ids)
			}
		}
		if from = res.GetNextSessionId(); from == 0 {
			break
		}
	}
	if cmds != 3 {
		t.Fatalf("%d commands to read 30 records 10 at a time, want 3", cmds)
	}
	if ids := sessionIDs(t, f); len(ids) != 5 || ids[0] != 26 {
		t.Fatalf("after the pass the records are %v, want the live 26..30", ids)
	}
	// Past the last record: nothing read, nothing left.
	if res := f.apply(wholeRange, expireFrom(now, before, 31, 10)); res.GetNextSessionId() != 0 {
		t.Fatalf("a command from past the last record answered next %d, want 0", res.GetNextSessionId())
	}
}

// manySessionCmds is a run of commands of sessions among 1..400, each one
// a new seq: a stream of new sessions piling up records.
func manySessionCmds(rng *rand.Rand, seqs map[uint64]uint64, stamp *int64) []*storepb.Command {
	var cmds []*storepb.Command
	for n := 1 + rng.Intn(20); n > 0; n-- {
		*stamp += int64(rng.Intn(40)) * int64(time.Millisecond)
		s := 1 + uint64(rng.Intn(400))
		seqs[s]++
		cmds = append(cmds, kvCmd(s, seqs[s], *stamp, put("k", "v")))
	}
	return cmds
}

// TestBoundedExpiryReplicasAgree protects replicas from diverging under
// bounded expiry: a leader's passes of bounded commands (each resuming
// where the last stopped, as node/sessions.go proposes them), interleaved
// with new sessions, are applied one per batch by one state machine and in
// batches of random size by another; every result (next_session_id
// included) and, after each batch, the databases are the same. A pass at a
// standing clock then deletes what one unbounded command deletes, and a
// last pass past every session's TTL leaves no record.
func TestBoundedExpiryReplicasAgree(t *testing.T) {
	one, batched := newFixture(t), newFixture(t)
	rng := rand.New(rand.NewSource(4))
	seqs := map[uint64]uint64{}
	stamp := at(0)
	idle := int64(2 * time.Second)
	var from uint64
	passes, drops := 0, 0
	// apply applies cmds to both, one per batch and in random batches, and
	// returns the last command's result.
	apply := func(cmds []*storepb.Command) *storepb.CommandResult {
		var want []*storepb.CommandResult
		for _, c := range cmds {
			want = append(want, one.apply(wholeRange, c))
		}
		for i := 0; i < len(cmds); {
			n := min(len(cmds)-i, 1+rng.Intn(6))
			for j, r := range batched.applyBatch(wholeRange, cmds[i:i+n]...) {
				if !proto.Equal(r, want[i+j]) {
					t.Fatalf("command %v answered %v in a batch, %v alone", cmds[i+j], r, want[i+j])
				}
			}
			i += n
		}
		sameContents(t, one, batched, "after a run of commands")
		return want[len(want)-1]
	}
	lo, hi := keys.SessionSpan(shard)
	for round := 0; round < 300; round++ {
		before := count(t, one.db, lo, hi)
		res := apply(append(manySessionCmds(rng, seqs, &stamp), expireFrom(stamp, stamp-idle, from, 7)))
		if from = res.GetNextSessionId(); from == 0 {
			passes++
		}
		if count(t, one.db, lo, hi) < before { // only expiry deletes records
			drops++
		}
	}
	if passes < 3 || drops < 3 {
		t.Fatalf("%d whole passes, %d rounds that deleted records: the stream should make several of each", passes, drops)
	}

	// At a standing clock a whole pass deletes what one unbounded command
	// does (the clock moved by the first command of the pass, the last
	// stamp, already).
	stamp += int64(time.Second)
	apply(manySessionCmds(rng, seqs, &stamp))
	whole := newFixture(t)
	for _, kv := range contents(t, one.db) {
		if err := whole.db.Set(kv[0], kv[1], pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := stamp - int64(500*time.Millisecond)
	whole.apply(wholeRange, expire(stamp, cutoff))
	for from = 0; ; {
		if from = apply([]*storepb.Command{expireFrom(stamp, cutoff, from, 7)}).GetNextSessionId(); from == 0 {
			break
		}
	}
	if got, want := sessionIDs(t, one), sessionIDs(t, whole); fmt.Sprint(got) != fmt.Sprint(want) || len(got) == 0 {
		t.Fatalf("a bounded pass left sessions %v, one unbounded command %v (want the same, not none)", got, want)
	}

	// Past every session's TTL a pass leaves no record.
	stamp += int64(time.Minute)
	for from = 0; ; {
		if from = apply([]*storepb.Command{expireFrom(stamp, stamp-idle, from, 7)}).GetNextSessionId(); from == 0 {
			break
		}
	}
	if n := count(t, one.db, lo, hi); n != 0 {
		t.Fatalf("%d session records left after a pass past every TTL", n)
	}
}
