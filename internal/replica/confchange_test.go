package replica

import (
	"errors"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storepb"
)

// TestReplaceChange protects replica replacement: the change adds the
// shard's next (never used) replica id on the new node and removes the old
// replica in one joint step, and its context names the proposal and the
// added replica's node, which every member needs to route to it. Applied,
// the new replica takes the old one's slot.
func TestReplaceChange(t *testing.T) {
	desc := &concordpb.ShardDescriptor{ShardId: 3, Epoch: 1, NextReplicaId: 7,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3)}}
	cc, err := ReplaceChange(desc, 99, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := []*pb.ConfChangeSingle{change(pb.ConfChangeAddNode, 7), change(pb.ConfChangeRemoveNode, 2)}
	if len(cc.GetChanges()) != 2 || !proto.Equal(cc.GetChanges()[0], want[0]) || !proto.Equal(cc.GetChanges()[1], want[1]) {
		t.Fatalf("changes %v, want add 7, remove 2", cc.GetChanges())
	}
	var ctx storepb.ConfChangeContext
	if err := proto.Unmarshal(cc.GetContext(), &ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.GetCommandId() != 99 || len(ctx.GetAdded()) != 1 || !proto.Equal(ctx.GetAdded()[0], rep(7, 5)) {
		t.Fatalf("context %v, want command 99 adding replica 7 on node 5", &ctx)
	}
	next := nextDescriptor(desc, cc, &ctx)
	if !slices.Equal(replicaIDs(next), []uint64{1, 7, 3}) || next.GetNextReplicaId() != 8 {
		t.Fatalf("descriptor after the change %v, want replicas [1 7 3], next id 8", next)
	}
}

// TestReplaceChangeRefuses protects against impossible replacements: no
// descriptor yet, a replica that is not a member, and a node that already
// holds a replica of the shard.
func TestReplaceChangeRefuses(t *testing.T) {
	desc := &concordpb.ShardDescriptor{ShardId: 3, NextReplicaId: 4,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3)}}
	for _, c := range []struct {
		name   string
		desc   *concordpb.ShardDescriptor
		remove ids.ReplicaID
		onto   ids.NodeID
	}{
		{"no descriptor", nil, 1, 4},
		{"not a member", desc, 9, 4},
		{"node already holds one", desc, 1, 3},
	} {
		if cc, err := ReplaceChange(c.desc, 1, c.remove, c.onto); err == nil {
			t.Errorf("%s: got change %v, want an error", c.name, cc)
		}
	}
}

func learner(id, node uint64) *concordpb.ReplicaDescriptor {
	return &concordpb.ReplicaDescriptor{ReplicaId: id, NodeId: node, Role: concordpb.ReplicaRole_REPLICA_LEARNER}
}

// applied returns desc after cc, decoding cc's context as apply does.
func applied(t *testing.T, desc *concordpb.ShardDescriptor, cc *pb.ConfChangeV2) *concordpb.ShardDescriptor {
	t.Helper()
	var ctx storepb.ConfChangeContext
	if err := proto.Unmarshal(cc.GetContext(), &ctx); err != nil {
		t.Fatal(err)
	}
	return nextDescriptor(desc, cc, &ctx)
}

// TestAddLearnerChange protects the first half of a safe replacement: one
// AddLearnerNode change (no joint step) with the shard's next replica id,
// whose context carries the new replica as a LEARNER on its node, so at
// apply every member routes to it and the descriptor lists it as a learner
// under the next epoch. A node already holding a replica is refused.
func TestAddLearnerChange(t *testing.T) {
	desc := &concordpb.ShardDescriptor{ShardId: 3, Epoch: 4, NextReplicaId: 7,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3)}}
	cc, err := AddLearnerChange(desc, 99, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.GetChanges()) != 1 || !proto.Equal(cc.GetChanges()[0], change(pb.ConfChangeAddLearnerNode, 7)) {
		t.Fatalf("changes %v, want add learner 7", cc.GetChanges())
	}
	next := applied(t, desc, cc)
	if !slices.Equal(replicaIDs(next), []uint64{1, 2, 3, 7}) || !proto.Equal(next.GetReplicas()[3], learner(7, 5)) ||
		next.GetEpoch() != 5 || next.GetNextReplicaId() != 8 {
		t.Fatalf("descriptor after the change %v, want learner 7 on node 5 appended, epoch 5, next id 8", next)
	}
	if cc, err := AddLearnerChange(desc, 1, 2); err == nil {
		t.Errorf("learner on a node that holds a replica: got %v, want an error", cc)
	}
	if cc, err := AddLearnerChange(nil, 1, 5); err == nil {
		t.Errorf("no descriptor: got %v, want an error", cc)
	}
}

// TestPromoteChange protects promotion: AddNode for the learner's existing
// id (raft turns a learner into a voter that way), and at apply the
// descriptor keeps the replica in its slot with role VOTER and a new epoch.
// Promoting a voter or a non-member is refused.
func TestPromoteChange(t *testing.T) {
	desc := &concordpb.ShardDescriptor{ShardId: 3, Epoch: 5, NextReplicaId: 8,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3), learner(7, 5)}}
	cc, err := PromoteChange(desc, 99, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.GetChanges()) != 1 || !proto.Equal(cc.GetChanges()[0], change(pb.ConfChangeAddNode, 7)) {
		t.Fatalf("changes %v, want add node 7", cc.GetChanges())
	}
	next := applied(t, desc, cc)
	if !slices.Equal(replicaIDs(next), []uint64{1, 2, 3, 7}) || !proto.Equal(next.GetReplicas()[3], rep(7, 5)) ||
		next.GetEpoch() != 6 || next.GetNextReplicaId() != 8 {
		t.Fatalf("descriptor after the change %v, want voter 7 on node 5, epoch 6, next id 8", next)
	}
	for _, id := range []ids.ReplicaID{2, 9} {
		if cc, err := PromoteChange(desc, 1, id); err == nil {
			t.Errorf("promote %d: got %v, want an error", id, cc)
		}
	}
}

// TestRemoveChange protects removal: RemoveNode for the replica, and at
// apply the descriptor drops it (the others keep their order) under a new
// epoch. It refuses removing the proposing leader itself, a voter whose
// removal would leave fewer voters than a majority of the current ones, and
// a non-member; removing a learner is always allowed.
func TestRemoveChange(t *testing.T) {
	desc := &concordpb.ShardDescriptor{ShardId: 3, Epoch: 6, NextReplicaId: 8,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3), learner(7, 5)}}
	cc, err := RemoveChange(desc, 99, 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.GetChanges()) != 1 || !proto.Equal(cc.GetChanges()[0], change(pb.ConfChangeRemoveNode, 2)) {
		t.Fatalf("changes %v, want remove 2", cc.GetChanges())
	}
	next := applied(t, desc, cc)
	if !slices.Equal(replicaIDs(next), []uint64{1, 3, 7}) || next.GetEpoch() != 7 {
		t.Fatalf("descriptor after the change %v, want replicas [1 3 7], epoch 7", next)
	}
	if _, err := RemoveChange(desc, 1, 7, 1, 0); err != nil {
		t.Errorf("remove learner: %v", err)
	}
	two := &concordpb.ShardDescriptor{ShardId: 3, Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), learner(7, 5)}}
	for _, c := range []struct {
		name       string
		desc       *concordpb.ShardDescriptor
		id, leader ids.ReplicaID
	}{
		{"the leader itself", desc, 1, 1},
		{"below a majority", two, 2, 1},
		{"not a member", desc, 9, 1},
		{"no descriptor", nil, 2, 1},
	} {
		if cc, err := RemoveChange(c.desc, 1, c.id, c.leader, 0); err == nil {
			t.Errorf("%s: got %v, want an error", c.name, cc)
		}
	}
	// A shard meant to have one replica may go from two voters to its
	// leader alone (the end of a move); one meant to have two or more may
	// not, and no minimum lets a removal leave no voter or a minority of
	// three.
	if _, err := RemoveChange(two, 1, 2, 1, 1); err != nil {
		t.Errorf("two voters to the leader alone, one replica wanted: %v", err)
	}
	if _, err := RemoveChange(two, 1, 2, 1, 2); err == nil {
		t.Error("two voters to one, two replicas wanted: allowed")
	}
	three := &concordpb.ShardDescriptor{ShardId: 3, Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3)}}
	if _, err := RemoveChange(three, 1, 2, 1, 1); err != nil {
		t.Errorf("three voters to two, one replica wanted: %v", err)
	}
	one := &concordpb.ShardDescriptor{ShardId: 3, Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), learner(2, 2)}}
	if _, err := RemoveChange(one, 1, 1, 2, 1); err == nil {
		t.Error("removed the only voter")
	}
}

// TestConfChangeContextWithUnknownFieldsStops: a membership change whose
// context has a field this binary does not know (a newer binary's) is not
// applied without it: the replica returns storepb.ErrUnknownFields (its
// node stops) before raft or the descriptor change.
func TestConfChangeContextWithUnknownFieldsStops(t *testing.T) {
	s := newSolo(t)
	ctx := &storepb.ConfChangeContext{CommandId: 7, Added: []*concordpb.ReplicaDescriptor{rep(2, 2)}}
	ctx.GetAdded()[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
	data, err := proto.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(2))}}, Context: data}
	epoch := s.r.Descriptor().GetEpoch()
	b := s.eng.NewIndexedBatch()
	defer b.Close()
	if err := s.r.applyConfChange(b, cc); !errors.Is(err, storepb.ErrUnknownFields) {
		t.Fatalf("applyConfChange = %v, want ErrUnknownFields", err)
	}
	if got := s.r.Descriptor().GetEpoch(); got != epoch {
		t.Fatalf("descriptor epoch %d after a refused change, want %d", got, epoch)
	}
}
