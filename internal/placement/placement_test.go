package placement

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

func openDB(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// apply applies cmd in its own indexed batch and commits it.
func apply(t *testing.T, db *pebble.DB, cmd *storepb.Command) *storepb.CommandResult {
	t.Helper()
	b := db.NewIndexedBatch()
	defer b.Close()
	res, err := New().Apply(b, nil, cmd)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return res
}

func applyAddNode(t *testing.T, db *pebble.DB, addr string) *storepb.CommandResult {
	t.Helper()
	return apply(t, db, &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{Address: addr}}})
}

func update(t *testing.T, db *pebble.DB, d *concordpb.ShardDescriptor) {
	t.Helper()
	cmd := &storepb.Command{Kind: &storepb.Command_UpdateDescriptor{UpdateDescriptor: &storepb.UpdateDescriptor{Shard: d}}}
	if res := apply(t, db, cmd); res.GetErrorCode() != 0 {
		t.Fatalf("UpdateDescriptor: %v", res)
	}
}

func bootstrap(t *testing.T, db *pebble.DB, nodes []*concordpb.NodeDescriptor, shards []*concordpb.ShardDescriptor) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	if err := Bootstrap(b, nodes, shards); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func node(id uint64, addr string) *concordpb.NodeDescriptor {
	return &concordpb.NodeDescriptor{NodeId: id, Address: addr}
}

func shardDesc(id, epoch uint64, replicas ...uint64) *concordpb.ShardDescriptor {
	d := &concordpb.ShardDescriptor{ShardId: id, Epoch: epoch, StartHash: id * 10, EndHash: id*10 + 9}
	for _, r := range replicas {
		d.Replicas = append(d.Replicas, &concordpb.ReplicaDescriptor{ReplicaId: r, NodeId: r})
	}
	return d
}

func nodesOf(t *testing.T, db pebble.Reader) []*concordpb.NodeDescriptor {
	t.Helper()
	ns, err := Nodes(db)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func sameProtos[T proto.Message](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestBootstrapReadback protects the initial placement records: Nodes and
// Shards return what Bootstrap wrote, in numeric id order (ids above 255
// included, which byte-wise little-endian keys would misorder).
func TestBootstrapReadback(t *testing.T) {
	db := openDB(t)
	nodes := []*concordpb.NodeDescriptor{node(300, "c:1"), node(1, "a:1"), node(2, "b:1")}
	shards := []*concordpb.ShardDescriptor{shardDesc(256, 1, 1), shardDesc(0, 1, 1, 2), shardDesc(1, 1, 2, 300)}
	bootstrap(t, db, nodes, shards)
	wantNodes := []*concordpb.NodeDescriptor{nodes[1], nodes[2], nodes[0]}
	if got := nodesOf(t, db); !sameProtos(got, wantNodes) {
		t.Fatalf("Nodes() = %v, want %v", got, wantNodes)
	}
	got, err := Shards(db)
	wantShards := []*concordpb.ShardDescriptor{shards[1], shards[2], shards[0]}
	if err != nil || !sameProtos(got, wantShards) {
		t.Fatalf("Shards() = %v (%v), want %v", got, err, wantShards)
	}
	if res := applyAddNode(t, db, "d:1"); res.GetNodeId() != 301 {
		t.Fatalf("first id after bootstrap: %d, want 301 (above the highest bootstrapped id)", res.GetNodeId())
	}
}

// TestAddNodeAllocatesIncreasingIDs protects node id allocation: fresh,
// increasing ids, never reused, and the full node list in the result.
func TestAddNodeAllocatesIncreasingIDs(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1"), node(2, "b:1"), node(3, "c:1")}, nil)
	for i, addr := range []string{"d:1", "e:1", "f:1"} {
		res := applyAddNode(t, db, addr)
		want := uint64(4 + i)
		if res.GetErrorCode() != 0 || res.GetNodeId() != want {
			t.Fatalf("AddNode(%s) = %v, want id %d", addr, res, want)
		}
		if !sameProtos(res.GetNodes(), nodesOf(t, db)) || len(res.GetNodes()) != int(want) {
			t.Fatalf("AddNode result lists %d nodes, want all %d", len(res.GetNodes()), want)
		}
	}
	last := nodesOf(t, db)[5]
	if last.GetAddress() != "f:1" || last.GetState() != concordpb.NodeState_NODE_UP {
		t.Fatalf("new node record %v", last)
	}
}

// TestAddNodeReplacesUpNodeAtSameAddress protects replacement: a fresh
// process at an UP node's address marks that node REPLACED by the new id,
// and a node already REPLACED keeps pointing at its own replacement.
func TestAddNodeReplacesUpNodeAtSameAddress(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1"), node(2, "b:1")}, nil)
	if id := applyAddNode(t, db, "b:1").GetNodeId(); id != 3 {
		t.Fatalf("replacement got id %d, want 3", id)
	}
	if id := applyAddNode(t, db, "b:1").GetNodeId(); id != 4 {
		t.Fatalf("second replacement got id %d, want 4", id)
	}
	want := []*concordpb.NodeDescriptor{
		node(1, "a:1"),
		{NodeId: 2, Address: "b:1", State: concordpb.NodeState_NODE_REPLACED, ReplacedBy: 3},
		{NodeId: 3, Address: "b:1", State: concordpb.NodeState_NODE_REPLACED, ReplacedBy: 4},
		node(4, "b:1"),
	}
	if got := nodesOf(t, db); !sameProtos(got, want) {
		t.Fatalf("nodes after two replacements:\n got %v\nwant %v", got, want)
	}
}

// TestUpdateDescriptorNewestEpochWins protects the placement view of shard
// membership: only a strictly newer epoch replaces the stored descriptor,
// and an unknown shard is recorded.
func TestUpdateDescriptorNewestEpochWins(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, nil, []*concordpb.ShardDescriptor{shardDesc(1, 5, 1, 2, 3)})
	steps := []struct {
		desc *concordpb.ShardDescriptor
		want *concordpb.ShardDescriptor
	}{
		{shardDesc(1, 4, 7), shardDesc(1, 5, 1, 2, 3)},       // older: ignored
		{shardDesc(1, 5, 8), shardDesc(1, 5, 1, 2, 3)},       // same epoch: ignored
		{shardDesc(1, 6, 1, 2, 4), shardDesc(1, 6, 1, 2, 4)}, // newer: taken
		{shardDesc(1, 9, 1, 4, 5), shardDesc(1, 9, 1, 4, 5)}, // newer by several
		{shardDesc(1, 8, 1, 2, 3), shardDesc(1, 9, 1, 4, 5)}, // a late, older one
		{shardDesc(2, 1, 1), shardDesc(1, 9, 1, 4, 5)},       // other shard: added
	}
	for i, s := range steps {
		update(t, db, s.desc)
		var got concordpb.ShardDescriptor
		if _, err := storage.GetProto(db, keys.MetaShard(meta, 1), &got); err != nil || !proto.Equal(&got, s.want) {
			t.Fatalf("step %d: shard 1 is %v (%v), want %v", i, &got, err, s.want)
		}
	}
	shards, err := Shards(db)
	if err != nil || len(shards) != 2 || !proto.Equal(shards[1], shardDesc(2, 1, 1)) {
		t.Fatalf("Shards() = %v (%v), want shard 2 recorded", shards, err)
	}
}

// TestApplyRefusesForeignCommands protects the meta shard from KV commands
// (InvalidArgument, no write) and makes session expiry a no-op.
func TestApplyRefusesForeignCommands(t *testing.T) {
	db := openDB(t)
	res := apply(t, db, &storepb.Command{Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{}}})
	if codes.Code(res.GetErrorCode()) != codes.InvalidArgument {
		t.Fatalf("KV command on the meta shard: %v, want InvalidArgument", res)
	}
	exp := &storepb.Command{Kind: &storepb.Command_ExpireSessions{ExpireSessions: &storepb.ExpireSessions{}}}
	if res := apply(t, db, exp); res.GetErrorCode() != 0 {
		t.Fatalf("ExpireSessions on the meta shard: %v", res)
	}
	lo, hi := keys.ShardSpan(meta)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("refused or no-op commands wrote %x", it.Key())
	}
}
