package storage

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestHostedAndTombstone protects the lifecycle records: SetHosted is what
// HostedReplicas reports (after a reopen too), and a shard never removed
// here has no tombstone.
func TestHostedAndTombstone(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	for shard, id := range map[ids.ShardID]ids.ReplicaID{0: 1, 3: 2, 9: 7} {
		if err := e.SetHosted(shard, id); err != nil {
			t.Fatal(err)
		}
	}
	e = reopen(t, e, dir)
	got, err := e.HostedReplicas()
	if err != nil || len(got) != 3 || got[0] != 1 || got[3] != 2 || got[9] != 7 {
		t.Fatalf("HostedReplicas() = %v, %v; want map[0:1 3:2 9:7]", got, err)
	}
	if tomb, err := e.Tombstone(3); err != nil || tomb != 0 {
		t.Fatalf("Tombstone(3) = %d, %v before any removal; want 0", tomb, err)
	}
}

// TestDestroyReplica protects replica removal: the shard's whole prefix
// goes, other shards stay, the replica is no longer hosted, and its id is
// tombstoned — all of it durable.
func TestDestroyReplica(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	fillShard(t, e.db, 7, "a")
	fillShard(t, e.db, 8, "b")
	for _, s := range []ids.ShardID{7, 8} {
		if err := e.SetHosted(s, 4); err != nil {
			t.Fatal(err)
		}
	}
	before8 := dumpShard(t, e.db, 8)
	if err := e.DestroyReplica(7, 4); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, e, dir)
	if got := dumpShard(t, e.db, 7); len(got) != 0 {
		t.Fatalf("shard 7 keeps %d keys after DestroyReplica", len(got))
	}
	if !sameMap(dumpShard(t, e.db, 8), before8) {
		t.Fatalf("DestroyReplica(7) changed shard 8")
	}
	checkBounds(t, loadLog(t, e.db, 7), 1, 0)
	if h, err := e.HostedReplicas(); err != nil || len(h) != 1 || h[8] != 4 {
		t.Fatalf("hosted after destroying shard 7: %v, %v; want only shard 8", h, err)
	}
	if tomb, err := e.Tombstone(7); err != nil || tomb != 4 {
		t.Fatalf("Tombstone(7) = %d, %v; want 4", tomb, err)
	}
}

// TestRemoveLeftovers protects the cleanup of a destruction a crash cut
// short (tombstone durable, data not excised): the data of a tombstoned
// shard no longer hosted goes, and nothing else does: not a neighbouring
// shard's, nor that of a shard hosted again by a higher replica id.
func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir)
	for _, s := range []uint64{6, 7, 8, 9} {
		fillShard(t, e.db, s, "x")
	}
	b := e.NewBatch()
	for _, s := range []uint64{7, 9} { // DestroyReplica's first step
		if err := b.Set(keys.Tombstone(s), []byte{0, 0, 0, 0, 0, 0, 0, 3}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := Commit(b, true); err != nil {
		t.Fatal(err)
	}
	for _, s := range []ids.ShardID{6, 8, 9} {
		if err := e.SetHosted(s, 4); err != nil {
			t.Fatal(err)
		}
	}
	before := map[uint64]map[string]string{}
	for _, s := range []uint64{6, 8, 9} {
		before[s] = dumpShard(t, e.db, s)
	}
	e = reopen(t, e, dir)
	if err := e.RemoveLeftovers(); err != nil {
		t.Fatal(err)
	}
	if got := dumpShard(t, e.db, 7); len(got) != 0 {
		t.Fatalf("shard 7, tombstoned and not hosted, keeps %d keys", len(got))
	}
	for s, want := range before {
		if !sameMap(dumpShard(t, e.db, s), want) {
			t.Fatalf("RemoveLeftovers changed shard %d", s)
		}
	}
}

// TestBootstrapReplica protects the initial state of a bootstrapped
// replica: it is hosted, its log is empty and truncated at the initial
// index, nothing is left to apply, and its voters are the descriptor's.
func TestBootstrapReplica(t *testing.T) {
	e := openEngine(t, t.TempDir())
	d := &concordpb.ShardDescriptor{ShardId: 2, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 4,
		Replicas: []*concordpb.ReplicaDescriptor{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}, {ReplicaId: 3, NodeId: 3}}}
	b := e.NewBatch()
	if err := BootstrapReplica(b, d, 2); err != nil {
		t.Fatal(err)
	}
	if err := Commit(b, true); err != nil {
		t.Fatal(err)
	}
	if h, _ := e.HostedReplicas(); h[2] != 2 {
		t.Fatalf("hosted after bootstrap: %v, want shard 2 -> replica 2", h)
	}
	l, err := e.LoadRaftLog(2)
	if err != nil {
		t.Fatal(err)
	}
	checkBounds(t, l, InitialIndex+1, InitialIndex)
	hs, cs, err := l.InitialState()
	if err != nil || hs.GetCommit() != InitialIndex || hs.GetTerm() != InitialTerm || len(cs.GetVoters()) != 3 {
		t.Fatalf("initial state %v %v (%v)", hs, cs, err)
	}
	var as storepb.AppliedState
	got := &concordpb.ShardDescriptor{}
	if _, err := e.GetProto(keys.Applied(2), &as); err != nil || as.GetIndex() != InitialIndex {
		t.Fatalf("applied %v (%v), want %d", &as, err, InitialIndex)
	}
	if _, err := e.GetProto(keys.Descriptor(2), got); err != nil || !proto.Equal(got, d) {
		t.Fatalf("descriptor %v (%v), want %v", got, err, d)
	}
}

// TestSnapshotWriterRefusesForeignKeys protects other shards from a bad
// snapshot: a key outside the shard's state span (another shard's, or the
// shard's own raft keys) is refused, and Abort leaves no file behind.
func TestSnapshotWriterRefusesForeignKeys(t *testing.T) {
	e := openEngine(t, t.TempDir())
	w, err := e.NewSnapshotWriter(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{keys.User(4, []byte("k")), keys.HardState(3), keys.Hosted(3)} {
		if err := w.Set(k, nil); err == nil {
			t.Fatalf("key %x accepted into a snapshot of shard 3", k)
		}
	}
	if err := w.Set(keys.User(3, []byte("k")), []byte("v")); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if names := auxFiles(t, e); len(names) != 0 {
		t.Fatalf("aux dir after Abort holds %v", names)
	}
}

// TestStagedSnapshotDiscard protects the staged file's ownership: Discard
// removes it, and a second Discard is harmless.
func TestStagedSnapshotDiscard(t *testing.T) {
	e := openEngine(t, t.TempDir())
	s := stage(t, e, 7, snapshotPairs(t))
	if names := auxFiles(t, e); len(names) != 1 {
		t.Fatalf("aux dir holds %v, want the staged file", names)
	}
	s.Discard()
	s.Discard()
	if names := auxFiles(t, e); len(names) != 0 {
		t.Fatalf("aux dir after Discard holds %v", names)
	}
}

// TestScanState protects what a snapshot sender streams: exactly the
// shard's state span, as of the snapshot, not later writes.
func TestScanState(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	fillShard(t, e.db, 8, "b")
	lo, hi := keys.StateSpan(7)
	want := dump(t, e.db, lo, hi)
	snap, err := e.NewSnapshot(7)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if err := e.db.Set(keys.User(7, []byte("later")), nil, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := snap.ScanState(7, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if !sameMap(got, want) || len(got) == 0 {
		t.Fatalf("ScanState(7) = %d pairs, want the %d of shard 7's state span in the snapshot", len(got), len(want))
	}
}
