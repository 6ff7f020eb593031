package multiraftest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestSnapshotStreamOutlivesSendersReplica protects snapshot catch-up from
// silent data loss: a snapshot that is still streaming when the sender's
// replica is removed (the conf change removing the leader, its data then
// excised from the engine) still carries the full state of its index.
// Outgoing snapshots must not read through a Pebble snapshot, from which
// Excise removes the data too: the receiver would install an empty or
// partial shard at that index, and raft would never resend what it lacks.
//
// The follower, cut off while the leader truncates its log, gets the
// snapshot stream going, is cut off again while the stream is held, and
// installs the snapshot only after the leader's replica is gone (so the
// rest of the shard, at a higher term, cannot overtake it).
func TestSnapshotStreamOutlivesSendersReplica(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	c.Cut(lagging)
	gap := putPastTruncation(t, c, leader)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.Net.OnSnapshotStream(func(from, to ids.NodeID, shard ids.ShardID) {
		if from == leader && to == lagging {
			once.Do(func() { close(started) })
			<-release
		}
	})
	c.Heal(lagging)
	c.RunUntil("the snapshot stream to the lagging follower", 200, func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	c.Cut(lagging)

	added := c.AddNode()
	changed := make(chan error, 1)
	h := c.Node(leader).Host
	// Begun: the ticks start once the change reached the leader's loop.
	multiraftest.Begin(func(ctx context.Context) {
		_, err := h.ChangeReplicas(ctx, 1, 0, ids.ReplicaID(leader), added)
		changed <- err
	})
	c.RunUntil("the leader's replica to be removed", 500, func() bool {
		_, ok := h.Info(1)
		return !ok
	})
	if err := await(t, changed, "the replacement"); err != nil {
		t.Logf("ChangeReplicas: %v (the change applied: the replica is gone)", err)
	}

	// Pebble's Excise takes effect on open snapshots once what it removed
	// is flushed, which Pebble soon does on its own.
	if err := c.Node(leader).Engine.Flush(); err != nil {
		t.Fatal(err)
	}
	close(release)
	c.Net.WaitSnapshotStreams(lagging)
	c.Net.OnSnapshotStream(nil)
	c.Tick(1)
	idx := truncated(t, c, lagging)
	if idx < gap {
		t.Fatalf("the lagging follower did not install the held snapshot (log truncated at %d, want %d or more); the test proves nothing", idx, gap)
	}
	for i := range 20 {
		if v, ok := c.Get(lagging, fmt.Sprintf("k%d", i)); !ok || v != "v" {
			t.Fatalf("the lagging follower installed a snapshot at %d that lacks k%d (found %v): data lost", idx, i, ok)
		}
	}
	c.Heal(lagging)
	members := []ids.NodeID{lagging, added}
	for n := ids.NodeID(1); n <= 3; n++ {
		if n != leader && n != lagging {
			members = append(members, n)
		}
	}
	c.Put("after", "x")
	c.WaitValue("after", "x", members...)
	for i := range 20 {
		c.WaitValue(fmt.Sprintf("k%d", i), "v", members...)
	}
}

// TestSnapshotResetsSessionCache protects at-most-once across snapshot
// catch-up. The state machine caches each session's last seq; a follower
// that cached seq 1 of a session, missed seq 2 and caught up by snapshot
// must take the snapshot's record (seq 2) as the truth. A retry of seq 2 (an
// APPEND) is then answered from the record on every replica; a follower
// still trusting its cache would take the retry as new and append a second
// time, diverging from the leader.
func TestSnapshotResetsSessionCache(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	all := []ids.NodeID{1, 2, 3}
	appendCmd := func(seq uint64) *storepb.Command {
		return &storepb.Command{Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{SessionId: 77, Seq: seq,
			Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_APPEND, Key: []byte("k"), Value: []byte{'a' + byte(seq-1)}}}}}}
	}
	propose := func(cmd *storepb.Command) *storepb.CommandResult {
		t.Helper()
		call := c.Await(c.ProposeCommand(c.WaitLeader(1), 1, cmd))
		if call.Err != nil || call.Result.GetErrorCode() != 0 {
			t.Fatalf("proposal: %v %v", call.Result, call.Err)
		}
		return call.Result
	}
	propose(appendCmd(1))
	c.WaitValue("k", "a", all...) // every replica has cached session 77 at seq 1
	c.Cut(lagging)
	first := propose(appendCmd(2))
	gap := putPastTruncation(t, c, leader)
	c.Heal(lagging)
	c.WaitValue("k", "ab", lagging)
	if idx := truncated(t, c, lagging); idx < gap {
		t.Fatalf("the lagging follower caught up without a snapshot (log truncated at %d, want %d or more); the test proves nothing", idx, gap)
	}
	if retry := propose(appendCmd(2)); !proto.Equal(retry, first) {
		t.Fatalf("the retry of seq 2 answered %v, the first answer was %v", retry, first)
	}
	c.Put("after", "x")
	c.WaitValue("after", "x", all...)
	for _, n := range all {
		if v, _ := c.Get(n, "k"); v != "ab" {
			t.Fatalf("node %d: k = %q after the retry of seq 2, want \"ab\" (seq 2 applied once)", n, v)
		}
	}
}

// TestPowerCutAfterSnapshotInstall protects the atomicity and durability
// of a snapshot install (deps.md rule 3): a follower that loses power
// right after installing a snapshot (its disk keeping only what was
// synced) restarts with data, applied index, configuration, descriptor,
// hard state and truncated log that agree at the snapshot, and catches up
// from there. An install that wrote any of them unsynced, or apart from
// the data, restarts into a replica whose log and state disagree.
func TestPowerCutAfterSnapshotInstall(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{PowerCuts: true, Configure: func(cfg *multiraft.Config) {
		cfg.LogKeepEntries, cfg.LogTruncateEntries = 2, 3
	}})
	leader := c.WaitLeader(1)
	lagging := leader%3 + 1
	c.Cut(lagging)
	gap := putPastTruncation(t, c, leader)
	var imaged atomic.Bool
	// The follower's first flush after the install: on its loop, before
	// anything else of the shard is written.
	c.Net.OnFlush(func(from, _ ids.NodeID, _ []*concordpb.RaftEnvelope) {
		if from != lagging || imaged.Load() {
			return
		}
		var ts storepb.TruncatedState
		if _, err := c.Node(lagging).Engine.GetProto(keys.Truncated(1), &ts); err != nil || ts.GetIndex() < gap {
			return
		}
		c.CrashImage(lagging)
		imaged.Store(true)
	})
	c.Heal(lagging)
	c.RunUntil("the lagging follower to install a snapshot", 300, imaged.Load)
	c.Net.OnFlush(nil)
	c.PowerCut(lagging)
	c.Start(lagging)

	eng := c.Node(lagging).Engine
	var ts storepb.TruncatedState
	var as storepb.AppliedState
	hs, cs, desc := &pb.HardState{}, &pb.ConfState{}, &concordpb.ShardDescriptor{}
	for _, r := range []struct {
		key []byte
		m   proto.Message
	}{{keys.Truncated(1), &ts}, {keys.Applied(1), &as}, {keys.HardState(1), hs}, {keys.ConfState(1), cs}, {keys.Descriptor(1), desc}} {
		if found, err := eng.GetProto(r.key, r.m); err != nil || !found {
			t.Fatalf("after the power cut, %x is missing (%v)", r.key, err)
		}
	}
	if ts.GetIndex() < gap || as.GetIndex() != ts.GetIndex() || as.GetTerm() != ts.GetTerm() {
		t.Fatalf("after the power cut: log truncated at %d/%d, applied %d/%d; want both at the snapshot (%d or later)",
			ts.GetIndex(), ts.GetTerm(), as.GetIndex(), as.GetTerm(), gap)
	}
	if hs.GetCommit() < as.GetIndex() || hs.GetTerm() < as.GetTerm() {
		t.Fatalf("after the power cut: hard state %v behind the applied %d/%d", hs, as.GetIndex(), as.GetTerm())
	}
	if len(cs.GetVoters()) != 3 || len(desc.GetReplicas()) != 3 {
		t.Fatalf("after the power cut: configuration %v, descriptor %v; want the shard's three replicas", cs, desc)
	}
	for i := range 20 {
		c.WaitValue(fmt.Sprintf("k%d", i), "v", lagging)
	}
	c.Put("after", "x")
	c.WaitValue("after", "x", lagging)
}

// TestIgnoredSnapshotsDiscardedAtOnce (hsnapcap): a received snapshot's
// data is staged before raft sees its header, and staged data raft ignored
// (here: a configuration without the recipient, at an index above its
// applied one) was kept until the truncation pass's SnapshotHandleTTL (a
// minute), however many a peer sent meanwhile: a sender that resends could
// fill the disk. Raft hands a snapshot it accepted to the very next Ready,
// so the loop now discards what raft did not take by then; the files of
// each ignored snapshot are gone within the loop turn that stepped it, and
// the follower goes on replicating.
func TestIgnoredSnapshotsDiscardedAtOnce(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	f := leader%3 + 1
	c.Put("before", "x")
	c.WaitValue("before", "x", f)
	info, ok := c.Node(f).Host.Info(1)
	if !ok || info.LeaderReplica == 0 {
		t.Fatalf("follower %d: %+v, want a replica that knows its leader", f, info)
	}
	for i := range uint64(5) {
		w, err := c.Node(f).Engine.NewSnapshotWriter(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Set(keys.User(1, []byte("k")), []byte("v")); err != nil {
			t.Fatal(err)
		}
		staged, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		idx := info.Applied + 1000 + i // above applied: the TTL alone would keep it
		m := &pb.Message{Type: pb.MsgSnap.Enum(), To: new(uint64(info.ReplicaID)), From: new(uint64(info.LeaderReplica)),
			Term: new(info.Term), Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(idx), Term: new(info.Term),
				ConfState: &pb.ConfState{Voters: []uint64{99}}}}}
		if err := c.Node(f).Host.DeliverSnapshot(context.Background(), leader, 1, m, staged); err != nil {
			t.Fatalf("deliver snapshot %d: %v", i, err)
		}
		c.RunUntil(fmt.Sprintf("the files of ignored snapshot %d removed", i), 3, func() bool { return c.StagedFiles(f) == 0 })
	}
	if got, _ := c.Node(f).Host.Info(1); got.Applied >= info.Applied+1000 {
		t.Fatalf("follower applied %d: raft installed a snapshot it should have ignored", got.Applied)
	}
	c.Put("after", "y")
	c.WaitValue("after", "y", f)
}
