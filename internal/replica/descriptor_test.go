package replica

import (
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storepb"
)

func rep(id, node uint64) *concordpb.ReplicaDescriptor {
	return &concordpb.ReplicaDescriptor{ReplicaId: id, NodeId: node}
}

func change(t pb.ConfChangeType, id uint64) *pb.ConfChangeSingle {
	return &pb.ConfChangeSingle{Type: t.Enum(), NodeId: new(id)}
}

func replicaIDs(d *concordpb.ShardDescriptor) []uint64 {
	var ids []uint64
	for _, r := range d.GetReplicas() {
		ids = append(ids, r.GetReplicaId())
	}
	return ids
}

// TestNextDescriptor protects the shard descriptor's evolution through
// membership changes: a removed replica's slot goes to the added one (so the
// preferred leader stays first), extra additions are appended, removals
// without additions close the gap, the epoch grows by one and
// next_replica_id moves past every added id but never back.
func TestNextDescriptor(t *testing.T) {
	base := &concordpb.ShardDescriptor{ShardId: 4, Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3)},
		Epoch: 7, NextReplicaId: 4}
	add, remove := pb.ConfChangeAddNode, pb.ConfChangeRemoveNode
	for _, tc := range []struct {
		name     string
		changes  []*pb.ConfChangeSingle
		added    []*concordpb.ReplicaDescriptor
		wantIDs  []uint64
		wantNext uint64
	}{
		{"replace middle", []*pb.ConfChangeSingle{change(add, 4), change(remove, 2)}, []*concordpb.ReplicaDescriptor{rep(4, 9)}, []uint64{1, 4, 3}, 5},
		{"replace first", []*pb.ConfChangeSingle{change(remove, 1), change(add, 6)}, []*concordpb.ReplicaDescriptor{rep(6, 9)}, []uint64{6, 2, 3}, 7},
		{"replace two", []*pb.ConfChangeSingle{change(remove, 3), change(remove, 1), change(add, 4), change(add, 5)},
			[]*concordpb.ReplicaDescriptor{rep(4, 8), rep(5, 9)}, []uint64{5, 2, 4}, 6},
		{"remove only", []*pb.ConfChangeSingle{change(remove, 2)}, nil, []uint64{1, 3}, 4},
		{"add only", []*pb.ConfChangeSingle{change(add, 4)}, []*concordpb.ReplicaDescriptor{rep(4, 9)}, []uint64{1, 2, 3, 4}, 5},
		{"remove unknown", []*pb.ConfChangeSingle{change(remove, 42)}, nil, []uint64{1, 2, 3}, 4},
		{"older id", []*pb.ConfChangeSingle{change(add, 2)}, []*concordpb.ReplicaDescriptor{rep(2, 9)}, []uint64{1, 2, 3, 2}, 4},
	} {
		orig := proto.Clone(base).(*concordpb.ShardDescriptor)
		d := nextDescriptor(base, &pb.ConfChangeV2{Changes: tc.changes}, &storepb.ConfChangeContext{Added: tc.added})
		if !slices.Equal(replicaIDs(d), tc.wantIDs) || d.GetEpoch() != 8 || d.GetNextReplicaId() != tc.wantNext {
			t.Errorf("%s: replicas %v epoch %d next %d; want %v, 8, %d",
				tc.name, replicaIDs(d), d.GetEpoch(), d.GetNextReplicaId(), tc.wantIDs, tc.wantNext)
		}
		if !proto.Equal(base, orig) {
			t.Fatalf("%s: nextDescriptor modified its input", tc.name)
		}
	}
}

// TestNextDescriptorKeepsNodes protects the node of each slot: the added
// replica brings its own node, the others keep theirs.
func TestNextDescriptorKeepsNodes(t *testing.T) {
	base := &concordpb.ShardDescriptor{Replicas: []*concordpb.ReplicaDescriptor{rep(1, 10), rep(2, 20), rep(3, 30)}, NextReplicaId: 4}
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{change(pb.ConfChangeAddNode, 4), change(pb.ConfChangeRemoveNode, 2)}}
	d := nextDescriptor(base, cc, &storepb.ConfChangeContext{Added: []*concordpb.ReplicaDescriptor{rep(4, 40)}})
	want := []*concordpb.ReplicaDescriptor{rep(1, 10), rep(4, 40), rep(3, 30)}
	for i, r := range d.GetReplicas() {
		if !proto.Equal(r, want[i]) {
			t.Fatalf("slot %d is %v, want %v", i, r, want[i])
		}
	}
}

// TestInConfState protects removal detection: a replica is a member while it
// is a voter, an outgoing voter (joint config), a learner or a learner-next.
func TestInConfState(t *testing.T) {
	cs := &pb.ConfState{Voters: []uint64{1, 2}, VotersOutgoing: []uint64{3}, Learners: []uint64{4}, LearnersNext: []uint64{5}}
	for id := ids.ReplicaID(1); id <= 5; id++ {
		if !inConfState(cs, id) {
			t.Errorf("replica %d should be in %v", id, cs)
		}
	}
	for _, id := range []ids.ReplicaID{0, 6} {
		if inConfState(cs, id) {
			t.Errorf("replica %d should not be in %v", id, cs)
		}
	}
	if inConfState(&pb.ConfState{}, 1) {
		t.Errorf("empty conf state has members")
	}
}
