package storage

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestSnapshotSurvivesExcise protects outgoing raft snapshots from silent
// data loss: a snapshot taken before the shard's data is excised here
// (DestroyReplica when the sender's replica is removed, InstallSnapshot when
// it is itself caught up by a snapshot) still streams exactly the state it
// was taken at, whether its data was in the memtable or flushed. A Pebble snapshot would not: Excise
// removes data from open snapshots too, and the receiver would install a
// partial or empty shard at the snapshot's index.
func TestSnapshotSurvivesExcise(t *testing.T) {
	for _, excise := range []string{"destroy", "install"} {
		for _, flush := range []bool{false, true} {
			t.Run(excise+"/"+map[bool]string{false: "memtable", true: "flushed"}[flush], func(t *testing.T) {
				testSnapshotSurvivesExcise(t, excise, flush)
			})
		}
	}
}

func testSnapshotSurvivesExcise(t *testing.T, excise string, flush bool) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	if err := e.SetHosted(7, 4); err != nil {
		t.Fatal(err)
	}
	if flush {
		if err := e.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	lo, hi := keys.StateSpan(7)
	before := dump(t, e.db, lo, hi)
	snap, err := e.NewSnapshot(7)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	switch excise {
	case "destroy":
		if err := e.DestroyReplica(7, 4); err != nil {
			t.Fatal(err)
		}
	case "install":
		hs := &pb.HardState{Term: new(uint64(6)), Commit: new(uint64(40))}
		if err := e.InstallSnapshot(7, stage(t, e, 7, snapshotPairs(t)), hs, 40, 6); err != nil {
			t.Fatal(err)
		}
	}
	// An excise of unflushed data takes effect on open Pebble snapshots
	// only once it is flushed, which Pebble soon does on its own.
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if after := dump(t, e.db, lo, hi); sameMap(after, before) {
		t.Fatalf("shard 7's state span is unchanged by the excise; the test proves nothing")
	}
	got := map[string]string{}
	if err := snap.ScanState(7, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if !sameMap(got, before) {
		t.Fatalf("ScanState after the excise streams %d pairs of shard 7, want the %d it had when the snapshot was taken", len(got), len(before))
	}
	// The snapshot's metadata comes from the same view as its data.
	var as storepb.AppliedState
	if ok, err := snap.GetProto(keys.Applied(7), &as); !ok || err != nil || as.GetIndex() != 10 {
		t.Fatalf("applied state through the snapshot after the excise: %v (found %v, %v), want index 10", &as, ok, err)
	}
}

// TestSnapshotIsOfOneShard protects a snapshot's bounds: it reads only its
// own shard's state-machine span, and says so rather than report a key
// outside it absent.
func TestSnapshotIsOfOneShard(t *testing.T) {
	e := openEngine(t, t.TempDir())
	fillShard(t, e.db, 7, "a")
	fillShard(t, e.db, 8, "b")
	snap, err := e.NewSnapshot(7)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	var as storepb.AppliedState
	if _, err := snap.GetProto(keys.Applied(8), &as); err == nil {
		t.Fatal("GetProto of shard 8's key through a snapshot of shard 7 did not fail")
	}
	if _, err := snap.GetProto(keys.HardState(7), &pb.HardState{}); err == nil {
		t.Fatal("GetProto of a raft key (outside the state span) did not fail")
	}
	if err := snap.ScanState(8, func(k, v []byte) error { return nil }); err == nil {
		t.Fatal("ScanState(8) of a snapshot of shard 7 did not fail")
	}
	if ok, err := snap.GetProto(keys.Descriptor(7), &as); ok || err != nil {
		t.Fatalf("GetProto of an absent key: found %v, %v", ok, err)
	}
}
