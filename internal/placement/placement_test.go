package placement

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
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

func applyJoin(t *testing.T, db *pebble.DB, addr, token string) *storepb.CommandResult {
	t.Helper()
	return apply(t, db, &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{Address: addr, JoinToken: []byte(token)}}})
}

func applyMark(t *testing.T, db *pebble.DB, node uint64, state concordpb.NodeState, minRemaining uint32) *storepb.CommandResult {
	t.Helper()
	return apply(t, db, &storepb.Command{Kind: &storepb.Command_MarkNode{MarkNode: &storepb.MarkNode{NodeId: node, State: state, MinRemaining: minRemaining}}})
}

// TestAddNodeTokenIsIdempotent protects joins whose answer was lost: a
// retry with the same token gets the same id and changes nothing (no
// second id, no REPLACED chain), also on the wiped-node path where the
// address belongs to an older node; a new token is a new join.
func TestAddNodeTokenIsIdempotent(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1"), node(2, "b:1")}, nil)
	first := applyJoin(t, db, "c:1", "tok-c")
	if first.GetErrorCode() != 0 || first.GetNodeId() != 3 {
		t.Fatalf("first join: %v, want id 3", first)
	}
	before := nodesOf(t, db)
	for range 3 {
		if again := applyJoin(t, db, "c:1", "tok-c"); again.GetErrorCode() != 0 || again.GetNodeId() != 3 || !sameProtos(again.GetNodes(), before) {
			t.Fatalf("retried join: %v, want id 3 and the same nodes", again)
		}
	}
	if got := nodesOf(t, db); !sameProtos(got, before) {
		t.Fatalf("a retried join changed the nodes:\n got %v\nwant %v", got, before)
	}
	// Wiped node 2 rejoins at its address: one replacement, however often retried.
	for range 2 {
		if res := applyJoin(t, db, "b:1", "tok-b2"); res.GetNodeId() != 4 {
			t.Fatalf("wiped node's join: %v, want id 4", res)
		}
	}
	want := []*concordpb.NodeDescriptor{
		node(1, "a:1"),
		{NodeId: 2, Address: "b:1", State: concordpb.NodeState_NODE_REPLACED, ReplacedBy: 4},
		node(3, "c:1"),
		node(4, "b:1"),
	}
	if got := nodesOf(t, db); !sameProtos(got, want) {
		t.Fatalf("after a retried rejoin:\n got %v\nwant %v", got, want)
	}
	// A new token from the same address is a new process: a new id.
	if res := applyJoin(t, db, "c:1", "tok-c-again"); res.GetNodeId() != 5 {
		t.Fatalf("new token: %v, want id 5", res)
	}
	// The same token from another address is refused.
	if res := applyJoin(t, db, "z:1", "tok-c"); codes.Code(res.GetErrorCode()) != codes.FailedPrecondition {
		t.Fatalf("token reused from another address: %v, want FailedPrecondition", res)
	}
}

// TestRemovedIdentityCannotRejoin protects removal's finality: the token of
// a removed node is refused, its address gets a new id without touching the
// removed record, and a REMOVED node cannot be marked anything else.
func TestRemovedIdentityCannotRejoin(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1"), node(2, "b:1"), node(3, "c:1")}, nil)
	if res := applyJoin(t, db, "d:1", "tok-d"); res.GetNodeId() != 4 {
		t.Fatalf("join: %v", res)
	}
	for _, s := range []concordpb.NodeState{concordpb.NodeState_NODE_LEAVING, concordpb.NodeState_NODE_REMOVED} {
		if res := applyMark(t, db, 4, s, 3); res.GetErrorCode() != 0 {
			t.Fatalf("mark 4 %v: %v", s, res)
		}
	}
	res := applyJoin(t, db, "d:1", "tok-d")
	if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition || !strings.Contains(res.GetErrorMessage(), "removed") {
		t.Fatalf("rejoin with a removed node's token: %v, want FailedPrecondition naming the removal", res)
	}
	if res := applyJoin(t, db, "d:1", "tok-fresh"); res.GetErrorCode() != 0 || res.GetNodeId() != 5 {
		t.Fatalf("fresh join at a removed node's address: %v, want id 5", res)
	}
	removed := &concordpb.NodeDescriptor{NodeId: 4, Address: "d:1", State: concordpb.NodeState_NODE_REMOVED}
	if got := nodesOf(t, db)[3]; !proto.Equal(got, removed) {
		t.Fatalf("removed record became %v", got)
	}
	for _, s := range []concordpb.NodeState{concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_LEAVING, concordpb.NodeState_NODE_DEAD} {
		if res := applyMark(t, db, 4, s, 0); codes.Code(res.GetErrorCode()) != codes.FailedPrecondition {
			t.Fatalf("mark removed node %v: %v, want FailedPrecondition", s, res)
		}
	}
}

// TestMarkNodeTransitions protects the node state machine: which changes
// MarkNode applies and which it refuses, without writing anything.
func TestMarkNodeTransitions(t *testing.T) {
	const (
		up, suspect, dead     = concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD
		leaving, removed, rep = concordpb.NodeState_NODE_LEAVING, concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED
	)
	all := []concordpb.NodeState{up, suspect, dead, leaving, removed, rep}
	allowed := map[[2]concordpb.NodeState]bool{}
	for _, a := range []concordpb.NodeState{up, suspect, dead} {
		for _, b := range []concordpb.NodeState{up, suspect, dead, leaving} {
			allowed[[2]concordpb.NodeState{a, b}] = true
		}
	}
	allowed[[2]concordpb.NodeState{leaving, removed}] = true
	allowed[[2]concordpb.NodeState{rep, removed}] = true
	for _, from := range all {
		for _, to := range all {
			db := openDB(t)
			bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1"), node(2, "b:1"),
				{NodeId: 3, Address: "c:1", State: from}}, nil)
			res := applyMark(t, db, 3, to, 0)
			got := nodesOf(t, db)[2].GetState()
			switch {
			case from == to:
				if res.GetErrorCode() != 0 || got != from {
					t.Errorf("%v -> itself: %v, state %v; want a no-op", from, res, got)
				}
			case allowed[[2]concordpb.NodeState{from, to}]:
				if res.GetErrorCode() != 0 || got != to {
					t.Errorf("%v -> %v: %v, state %v; want it applied", from, to, res, got)
				}
			default:
				if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition || got != from {
					t.Errorf("%v -> %v: %v, state %v; want FailedPrecondition and no change", from, to, res, got)
				}
			}
		}
	}
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1")}, nil)
	if res := applyMark(t, db, 9, dead, 0); codes.Code(res.GetErrorCode()) != codes.NotFound {
		t.Fatalf("mark unknown node: %v, want NotFound", res)
	}
}

// TestMarkLeavingKeepsReplicationFactor protects removal from shrinking the
// cluster below R: an UP or SUSPECT node may not start LEAVING while fewer
// than min_remaining other nodes are UP or SUSPECT (DEAD and LEAVING ones do
// not count); a DEAD node, which takes no capacity with it, may.
func TestMarkLeavingKeepsReplicationFactor(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1"), node(2, "b:1"), node(3, "c:1"),
		{NodeId: 4, Address: "d:1", State: concordpb.NodeState_NODE_SUSPECT}}, nil)
	if res := applyMark(t, db, 1, concordpb.NodeState_NODE_LEAVING, 3); res.GetErrorCode() != 0 {
		t.Fatalf("removing one of four: %v", res)
	}
	res := applyMark(t, db, 2, concordpb.NodeState_NODE_LEAVING, 3)
	if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition || !strings.Contains(res.GetErrorMessage(), "fewer than the 3 replicas") {
		t.Fatalf("removing a second of four (one leaving): %v, want FailedPrecondition", res)
	}
	if got := nodesOf(t, db)[1].GetState(); got != concordpb.NodeState_NODE_UP {
		t.Fatalf("refused removal left node 2 %v", got)
	}
	if res := applyMark(t, db, 4, concordpb.NodeState_NODE_DEAD, 0); res.GetErrorCode() != 0 {
		t.Fatal(res)
	}
	if res := applyMark(t, db, 4, concordpb.NodeState_NODE_LEAVING, 3); res.GetErrorCode() != 0 {
		t.Fatalf("removing the dead node (2 up besides it, 1 leaving): %v", res)
	}
}

// TestClusterVersionOnlyRises: a bootstrapped cluster is at Base;
// SetClusterVersion raises it and a lower or equal one changes nothing (a
// late or repeated proposal must not lower it), and adding a node keeps it.
func TestClusterVersionOnlyRises(t *testing.T) {
	db := openDB(t)
	if err := Bootstrap(db, []*concordpb.NodeDescriptor{{NodeId: 1, Address: "a:1"}}, nil); err != nil {
		t.Fatal(err)
	}
	read := func() version.Level {
		t.Helper()
		v, err := ClusterVersion(db)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := read(); v != version.Base {
		t.Fatalf("bootstrapped cluster at version %d, want Base", v)
	}
	set := func(v version.Level) {
		t.Helper()
		res := apply(t, db, &storepb.Command{Kind: &storepb.Command_SetClusterVersion{SetClusterVersion: &storepb.SetClusterVersion{Version: uint32(v)}}})
		if res.GetErrorCode() != 0 {
			t.Fatalf("SetClusterVersion(%d) refused: %s", v, res.GetErrorMessage())
		}
	}
	set(3)
	set(2)
	if v := read(); v != 3 {
		t.Fatalf("after raising to 3 and asking for 2 the version is %d, want 3", v)
	}
	apply(t, db, &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{Address: "b:1"}}})
	if v := read(); v != 3 {
		t.Fatalf("after adding a node the version is %d, want 3", v)
	}
}

// applySet applies a raise of the cluster's version to v decided on the
// nodes registered before id next (0: names none).
func applySet(t *testing.T, db *pebble.DB, v version.Level, next uint64) *storepb.CommandResult {
	t.Helper()
	return apply(t, db, &storepb.Command{Kind: &storepb.Command_SetClusterVersion{SetClusterVersion: &storepb.SetClusterVersion{
		Version: uint32(v), NextNodeId: next}}})
}

// readVersion reads the cluster's version.
func readVersion(t *testing.T, db pebble.Reader) version.Level {
	t.Helper()
	v, err := ClusterVersion(db)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRaiseRefusedAfterARegistration: a raise that names the registrations
// it was decided on is refused, changing nothing, once a node registered
// since (another placement leader may have let it in below the raise's
// level); decided on the registrations as they are, it applies.
func TestRaiseRefusedAfterARegistration(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1")}, nil)
	next, err := NextNodeID(db)
	if err != nil || next != 2 {
		t.Fatalf("next node id %d, %v; want 2", next, err)
	}
	applyAddNode(t, db, "b:1")
	res := applySet(t, db, version.OrderedJoins, next)
	if codes.Code(res.GetErrorCode()) != codes.FailedPrecondition {
		t.Fatalf("raise decided before a registration, applied after it: %v; want FailedPrecondition", res)
	}
	if v := readVersion(t, db); v != version.Base {
		t.Fatalf("version %d after the refused raise; want Base", v)
	}
	if res := applySet(t, db, version.OrderedJoins, next+1); res.GetErrorCode() != 0 {
		t.Fatalf("raise decided on every registration: %v", res)
	}
	if v := readVersion(t, db); v != version.OrderedJoins {
		t.Fatalf("version %d; want %d", v, version.OrderedJoins)
	}
}

// TestJoinRefusedBelowTheClusterVersion: a join naming a level below the
// cluster's version is refused, changing nothing, and so is one naming no
// level once the version is OrderedJoins or above (every placement leader
// names it then: one without was checked against an older version).
// Below OrderedJoins a join without a level is registered (its proposer's
// replicas may not know the field).
func TestJoinRefusedBelowTheClusterVersion(t *testing.T) {
	db := openDB(t)
	bootstrap(t, db, []*concordpb.NodeDescriptor{node(1, "a:1")}, nil)
	join := func(addr string, level version.Level) *storepb.CommandResult {
		t.Helper()
		return apply(t, db, &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{
			Address: addr, JoinToken: []byte(addr), Level: uint32(level)}}})
	}
	if res := join("b:1", version.Unknown); res.GetNodeId() != 2 {
		t.Fatalf("join naming no level at Base: %v; want node 2", res)
	}
	applySet(t, db, version.OrderedJoins, 3)
	for _, tc := range []struct {
		level version.Level
		code  codes.Code
	}{{version.ExpiryOnStamps, codes.FailedPrecondition}, {version.Unknown, codes.Unavailable}} {
		res := join("c:1", tc.level)
		if codes.Code(res.GetErrorCode()) != tc.code {
			t.Fatalf("join at level %d to a cluster at %d: %v; want %v", tc.level, version.OrderedJoins, res, tc.code)
		}
		if next, err := NextNodeID(db); err != nil || next != 3 || len(nodesOf(t, db)) != 2 {
			t.Fatalf("the refused join at level %d changed the nodes: next id %d (%v), %d nodes", tc.level, next, err, len(nodesOf(t, db)))
		}
	}
	if res := join("c:1", version.OrderedJoins); res.GetErrorCode() != 0 || res.GetNodeId() != 3 {
		t.Fatalf("join at the cluster's version: %v; want node 3", res)
	}
}
