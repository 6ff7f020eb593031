package replica

import (
	"errors"
	"os"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestGroupReplicatesProposals protects the write path: a leader's
// proposals (one at a time and several in one flush) apply on all three
// replicas in order, each caller gets its own command's result, and the
// applied index is stored with the data.
func TestGroupReplicatesProposals(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	putResult(t, g.await(g.propose(leader, put("k", "v1"))), nil)
	ps := []*Proposal{g.proposal(put("k", "a")), g.proposal(put("k", "b")), g.proposal(put("j", "c"))}
	for _, p := range ps {
		leader.r.Propose(p)
	}
	leader.r.FlushProposals()
	for i, prev := range [][]byte{[]byte("v1"), []byte("a"), nil} {
		putResult(t, g.await(ps[i]), prev)
	}
	commit := g.converge(leader)
	g.value("k", []byte("b"), all...)
	g.value("j", []byte("c"), all...)
	for _, m := range g.members {
		var as storepb.AppliedState
		if _, err := storage.GetProto(m.eng.DB, keys.Applied(testShard), &as); err != nil || as.GetIndex() != commit {
			t.Fatalf("node %d: stored applied index %d (%v), want %d", m.id, as.GetIndex(), err, commit)
		}
	}
}

// TestGroupReadIndexOnLeader protects linearizable reads: a ReadIndex on the
// leader completes, and only once the leader applied everything committed
// when it was asked.
func TestGroupReadIndexOnLeader(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	putResult(t, g.await(g.propose(leader, put("k", "v"))), nil)
	rd := &Read{Ctx: []byte("read-1"), Done: make(chan error, 1)}
	commitAtRequest := leader.r.Status().GetCommit()
	leader.r.ReadIndex(rd)
	g.runUntil("the read to complete", func() bool { return len(rd.Done) > 0 })
	if err := <-rd.Done; err != nil {
		t.Fatalf("ReadIndex on the leader: %v", err)
	}
	if leader.r.Applied() < commitAtRequest {
		t.Fatalf("read released at applied %d, before the commit index %d at request time", leader.r.Applied(), commitAtRequest)
	}
	g.value("k", []byte("v"), 1)
}

// TestGroupReadIndexNeedsQuorum protects against stale reads from a
// partitioned leader: its ReadIndex never succeeds; it fails when the
// leader steps down.
func TestGroupReadIndexNeedsQuorum(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	g.cut[2], g.cut[3] = true, true
	rd := &Read{Ctx: []byte("read-1"), Done: make(chan error, 1)}
	leader.r.ReadIndex(rd)
	g.runUntil("the read to end", func() bool { return len(rd.Done) > 0 })
	var nl *NotLeaderError
	if err := <-rd.Done; !errors.As(err, &nl) || leader.r.IsLeader() {
		t.Fatalf("read on a leader without quorum ended with %v (still leader: %v), want NotLeaderError", err, leader.r.IsLeader())
	}
}

// TestGroupFollowerRefuses protects the leader-only paths: a proposal or a
// ReadIndex on a follower fails at once with NotLeaderError naming the
// leader's node, and nothing is applied.
func TestGroupFollowerRefuses(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	follower := g.node(2)
	p := g.propose(follower, put("k", "v"))
	var nl *NotLeaderError
	select {
	case o := <-p.Done:
		if !errors.As(o.Err, &nl) || nl.LeaderNode != 1 || nl.Shard != testShard {
			t.Fatalf("proposal on a follower: %+v, want NotLeaderError naming node 1", o)
		}
	default:
		t.Fatalf("proposal on a follower was accepted")
	}
	rd := &Read{Ctx: []byte("r"), Done: make(chan error, 1)}
	follower.r.ReadIndex(rd)
	if err := <-rd.Done; !errors.As(err, &nl) || nl.LeaderNode != 1 {
		t.Fatalf("ReadIndex on a follower: %v, want NotLeaderError naming node 1", err)
	}
	putResult(t, g.await(g.propose(leader, put("other", "x"))), nil)
	g.converge(leader)
	g.value("k", nil, all...)
}

// TestGroupLeaderLossIsAmbiguous protects proposals across a leader change:
// a proposal stuck on a partitioned leader ends as ErrAmbiguous when it steps
// down, a new leader takes over, and after healing the old leader's
// uncommitted entry is overwritten everywhere (truncate-on-conflict).
func TestGroupLeaderLossIsAmbiguous(t *testing.T) {
	g := newGroup(t)
	old := g.elect(1)
	g.cut[1] = true
	p := g.propose(old, put("k", "lost"))
	if o := g.await(p); !errors.Is(o.Err, ErrAmbiguous) {
		t.Fatalf("proposal on a leader that lost quorum: %+v, want ErrAmbiguous", o)
	}
	g.runUntil("a new leader", func() bool { return g.node(2).r.IsLeader() || g.node(3).r.IsLeader() })
	leader := g.node(2)
	if !leader.r.IsLeader() {
		leader = g.node(3)
	}
	delete(g.cut, 1)
	g.waitLeader(leader.id)
	putResult(t, g.await(g.propose(leader, put("k", "won"))), nil)
	g.converge(leader)
	g.value("k", []byte("won"), all...)
	if a, b := old.r.Applied(), leader.r.Applied(); a != b {
		t.Fatalf("old leader applied %d, new leader %d", a, b)
	}
}

// TestGroupCatchUpBySnapshot protects snapshot catch-up: a replica that
// missed entries the others have compacted away receives a snapshot,
// installs it, applies what follows, and keeps it all across a restart.
func TestGroupCatchUpBySnapshot(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	g.cut[3] = true
	for _, v := range []string{"1", "2", "3"} {
		g.await(g.propose(leader, put("k"+v, v)))
	}
	applied := g.converge(leader)
	for _, id := range []uint64{1, 2} {
		m := g.node(id)
		b := m.eng.DB.NewBatch()
		if err := m.r.RaftLog().Truncate(b, applied); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	delete(g.cut, 3)
	lagging := g.node(3)
	g.runUntil("node 3 to catch up", func() bool { return lagging.r.Applied() >= applied })
	putResult(t, g.await(g.propose(leader, put("after", "x"))), nil)
	g.converge(leader)
	if idx, _ := lagging.r.RaftLog().Truncated(); idx < applied {
		t.Fatalf("node 3's log is truncated at %d, want the snapshot index >= %d", idx, applied)
	}
	if ents, err := os.ReadDir(lagging.eng.AuxDir()); err != nil || len(ents) != 0 {
		t.Fatalf("node 3's aux dir after the install: %d files (%v)", len(ents), err)
	}
	g.restart(lagging)
	for _, k := range []string{"k1", "k2", "k3"} {
		g.value(k, []byte(k[1:]), all...)
	}
	g.value("after", []byte("x"), all...)
	if lagging.r.Applied() != leader.r.Applied() {
		t.Fatalf("node 3 applied %d after restart, leader %d", lagging.r.Applied(), leader.r.Applied())
	}
}

// restart closes m's engine and loads its replica again from disk.
func (g *group) restart(m *member) {
	g.t.Helper()
	if err := m.eng.Close(); err != nil {
		g.t.Fatal(err)
	}
	g.open(m)
	g.load(m)
}

// TestGroupRestart protects recovery from disk: after every node restarts,
// the group elects a leader, keeps its data, applies nothing twice and
// accepts new writes.
func TestGroupRestart(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	putResult(t, g.await(g.propose(leader, put("k", "v1"))), nil)
	applied := g.converge(leader)
	for _, m := range g.members {
		g.restart(m)
		if m.r.Applied() != applied {
			t.Fatalf("node %d: applied %d after restart, want %d", m.id, m.r.Applied(), applied)
		}
	}
	leader = g.elect(2)
	putResult(t, g.await(g.propose(leader, put("k", "v2"))), []byte("v1"))
	g.converge(leader)
	g.value("k", []byte("v2"), all...)
}

// TestGroupReplaceReplica protects membership changes: a joint change that
// swaps replica 3 for a fresh replica 4 completes, the new replica is
// created empty and brought up by snapshot, every member's descriptor puts
// 4 in 3's slot with the next epoch, the new group commits writes, and
// replica 3 knows it was removed.
func TestGroupReplaceReplica(t *testing.T) {
	g := newGroup(t)
	leader := g.elect(1)
	putResult(t, g.await(g.propose(leader, put("k", "v"))), nil)
	g.nextID++
	ctx, err := proto.Marshal(&storepb.ConfChangeContext{CommandId: g.nextID,
		Added: []*concordpb.ReplicaDescriptor{{ReplicaId: 4, NodeId: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proposal{ID: g.nextID, Done: make(chan Outcome, 1), CC: &pb.ConfChangeV2{Context: ctx,
		Changes: []*pb.ConfChangeSingle{change(pb.ConfChangeAddNode, 4), change(pb.ConfChangeRemoveNode, 3)}}}
	leader.r.ProposeConfChange(p)
	if o := g.await(p); o.Err != nil {
		t.Fatalf("conf change: %v", o.Err)
	}
	g.runUntil("the joint configuration to be left", func() bool {
		cfg := leader.r.rn.Status().Config
		return len(cfg.Voters[1]) == 0 && len(g.members) == 4
	})
	putResult(t, g.await(g.propose(leader, put("after", "x"))), nil)
	g.runUntil("node 4 to apply", func() bool { return g.node(4).r.Applied() >= leader.r.Applied() })
	for _, id := range []uint64{1, 2, 4} {
		d := g.node(id).r.Descriptor()
		if !sameIDs(replicaIDs(d), []uint64{1, 2, 4}) || d.GetEpoch() != 2 || d.GetNextReplicaId() != 5 {
			t.Fatalf("node %d descriptor %v, want replicas [1 2 4] at epoch 2", id, d)
		}
		if g.node(id).r.Nodes()[4] != 4 {
			t.Fatalf("node %d does not know where replica 4 lives", id)
		}
	}
	g.value("k", []byte("v"), 1, 2, 4)
	g.value("after", []byte("x"), 1, 2, 4)
	if !g.node(3).r.Removed() {
		t.Fatalf("replica 3 did not notice its removal")
	}
	if o := <-g.propose(g.node(3), put("k", "z")).Done; !errors.Is(o.Err, ErrRemoved) {
		t.Fatalf("proposal on a removed replica: %+v, want ErrRemoved", o)
	}
}
