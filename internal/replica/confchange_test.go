package replica

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
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
	if !sameIDs(replicaIDs(next), []uint64{1, 7, 3}) || next.GetNextReplicaId() != 8 {
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
