package kv

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestWindowWarmMatchesColdMixedKinds: a state machine with warm caches and one that
// starts over before every batch (a restarted replica) apply the same
// stream of mixed windowed and one-at-a-time commands on shared session
// ids with arbitrary floors, and expiries: same results, same database.
func TestWindowWarmMatchesColdMixedKinds(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		warm, cold := newFixture(t), newFixture(t)
		rng := rand.New(rand.NewSource(seed))
		stamp := at(0)
		for i := 0; i < 600; {
			var cmds []*storepb.Command
			for n := 1 + rng.Intn(8); n > 0; n-- {
				stamp += int64(rng.Intn(400)-100) * int64(time.Millisecond)
				if rng.Intn(25) == 0 {
					cmds = append(cmds, expire(stamp, stamp-int64(rng.Intn(3))*int64(time.Second)))
					continue
				}
				id := uint64(1 + rng.Intn(4))
				seq := uint64(1 + rng.Intn(12))
				var floor uint64
				if rng.Intn(2) == 0 {
					floor = uint64(1 + rng.Intn(int(seq)))
				}
				cmds = append(cmds, &storepb.Command{UnixNanos: stamp, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
					SessionId: id, Seq: seq, SessionFloor: floor, Ops: []*concordpb.Op{randomOp(rng)}, MaxValueBytes: 16}}})
			}
			cold.sm = New(shard)
			got := warm.applyBatch(wholeRange, cmds...)
			want := cold.applyBatch(wholeRange, cmds...)
			for j := range cmds {
				if fmt.Sprint(got[j]) != fmt.Sprint(want[j]) {
					t.Fatalf("seed %d command %d (%v): warm %v, cold %v", seed, i+j, cmds[j], got[j], want[j])
				}
			}
			i += len(cmds)
			ca, cb := contents(t, warm.db), contents(t, cold.db)
			if len(ca) != len(cb) {
				t.Fatalf("seed %d after %d: %d keys warm, %d cold", seed, i, len(ca), len(cb))
			}
			for k := range ca {
				if !bytes.Equal(ca[k][0], cb[k][0]) || !bytes.Equal(ca[k][1], cb[k][1]) {
					t.Fatalf("seed %d after %d: %q=%x warm, %q=%x cold", seed, i, ca[k][0], ca[k][1], cb[k][0], cb[k][1])
				}
			}
			if rng.Intn(5) == 0 {
				clear(warm.sm.windows)
			}
		}
	}
}

// TestWindowBytesBoundWarmMatchesCold: near MaxSessionWindowBytes, a
// replica with the window cached since it was built and one that decoded it
// from its record refuse and apply the same commands.
func TestWindowBytesBoundWarmMatchesCold(t *testing.T) {
	warm, cold := newFixture(t), newFixture(t)
	big := string(bytes.Repeat([]byte("x"), 60_000))
	for _, f := range []*fixture{warm, cold} {
		f.kv(0, 0, 1, put("big", big))
	}
	for seq := uint64(1); seq <= 25; seq++ {
		cmd := winCmd(7, seq, 1, int64(seq), getOp("big"))
		cold.sm = New(shard)
		a := warm.apply(wholeRange, cmd)
		b := cold.apply(wholeRange, cmd)
		if fmt.Sprint(a.GetErrorCode(), a.GetErrorMessage()) != fmt.Sprint(b.GetErrorCode(), b.GetErrorMessage()) {
			t.Fatalf("seq %d: warm %v / cold %v", seq, a.GetErrorMessage(), b.GetErrorMessage())
		}
	}
	if w := warm.sm.windows[7]; w == nil || w.bytes < MaxSessionWindowBytes {
		t.Fatalf("window did not reach the byte bound")
	}
}

// TestWindowCacheStaysBounded: MaxCachedWindows bounds the windows a state
// machine keeps decoded; one batch touching more sessions than that leaves
// the cache above the bound for good (each later load evicts one and adds
// one).
func TestWindowCacheStaysBounded(t *testing.T) {
	f := newFixture(t)
	var cmds []*storepb.Command
	for id := uint64(1); id <= MaxCachedWindows+500; id++ {
		cmds = append(cmds, winCmd(id, 1, 1, 1, put("k", "v")))
	}
	f.applyBatch(wholeRange, cmds...)
	for id := uint64(100_000); id < 100_010; id++ {
		f.win(id, 1, 1, 2, put("k", "v"))
	}
	if n := len(f.sm.windows); n > MaxCachedWindows {
		t.Fatalf("%d windows cached after later batches, bound %d", n, MaxCachedWindows)
	}
}

// TestWindowCacheBytesStayBounded: the windows a state machine keeps
// decoded are bounded in bytes too, not only in number. MaxCachedWindows
// windows of up to MaxSessionWindowBytes each were gigabytes per shard,
// which any client could fill with windowed commands that return values
// (a GET in the batch). Past MaxCachedWindowBytes windows are evicted
// after the batch, and an evicted one still answers a retry from its
// record.
func TestWindowCacheBytesStayBounded(t *testing.T) {
	f := newFixture(t)
	big := string(bytes.Repeat([]byte("x"), 128<<10))
	f.kv(0, 0, 1, put("big", big))
	const sessions = 400 // 50 MiB of results in all
	first := map[uint64]*storepb.CommandResult{}
	for id := uint64(1); id <= sessions; id += 10 {
		var cmds []*storepb.Command
		for j := id; j < id+10; j++ {
			cmds = append(cmds, winCmd(j, 1, 1, 2, getOp("big"), put(fmt.Sprintf("k%d", j), "v")))
		}
		for j, res := range f.applyBatch(wholeRange, cmds...) {
			first[id+uint64(j)] = res
		}
		cached := 0
		for _, w := range f.sm.windows {
			cached += w.bytes
		}
		if cached > MaxCachedWindowBytes {
			t.Fatalf("after session %d: %d bytes of windows cached, bound %d", id+9, cached, MaxCachedWindowBytes)
		}
	}
	for _, id := range []uint64{1, sessions / 2, sessions} {
		retry := f.win(id, 1, 1, 3, getOp("big"), put(fmt.Sprintf("k%d", id), "again"))
		if !proto.Equal(retry, first[id]) {
			t.Fatalf("retry of session %d seq 1 answered differently from its first answer", id)
		}
		f.value(fmt.Sprintf("k%d", id), []byte("v"))
	}
}

// TestWindowSnapshotInstallDropsCachedWindow: a raft snapshot replaces a
// windowed session's record behind the state machine; after
// SnapshotInstalled its answers come from the snapshot's record, never
// from the window it had cached.
func TestWindowSnapshotInstallDropsCachedWindow(t *testing.T) {
	f := newFixture(t)
	first := f.win(7, 1, 1, at(0), putPrev("k", "v1"))
	f.win(7, 2, 1, at(0), put("k", "v2"))
	f.win(7, 3, 1, at(0), put("k", "v3"))
	// The snapshot's state: only seq 1 applied, k = v1.
	f.installState(7, &storepb.SessionRecord{Floor: 1, LastActiveUnixNanos: at(0),
		Window: []*storepb.SessionResult{{Seq: 1, Result: first}}}, at(0), "k", "v1", false)
	f.sm.SnapshotInstalled()
	if retry := f.win(7, 1, 1, at(time.Second), putPrev("k", "again")); !proto.Equal(retry, first) {
		t.Fatalf("retry of seq 1 after the snapshot answered %v, want %v", retry, first)
	}
	if res := f.win(7, 3, 1, at(time.Second), putPrev("k", "v3")); res.GetErrorCode() != 0 || string(f.one(res).GetValue()) != "v1" {
		t.Fatalf("seq 3, not applied in the snapshot's state, answered %v; want applied over v1", res)
	}
	f.value("k", []byte("v3"))
}
