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
