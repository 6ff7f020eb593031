package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/localcluster"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// TestClusterVersionTarget: the cluster's version may rise to the lowest
// level reported by a node that is not removed or replaced (a dead node
// counts: it may come back on its old binary), and not at all while such a
// node has not reported.
func TestClusterVersionTarget(t *testing.T) {
	node := func(id uint64, s concordpb.NodeState) *concordpb.NodeDescriptor {
		return &concordpb.NodeDescriptor{NodeId: id, State: s}
	}
	levels := map[ids.NodeID]version.Level{1: 2, 2: 2, 3: 1, 4: 1}
	levelOf := func(n ids.NodeID) (version.Level, bool) { l, ok := levels[n]; return l, ok }
	for _, tc := range []struct {
		name  string
		nodes []*concordpb.NodeDescriptor
		want  version.Level
		ok    bool
	}{
		{"all at 2", []*concordpb.NodeDescriptor{node(1, concordpb.NodeState_NODE_UP), node(2, concordpb.NodeState_NODE_UP)}, 2, true},
		{"one up at 1", []*concordpb.NodeDescriptor{node(1, concordpb.NodeState_NODE_UP), node(3, concordpb.NodeState_NODE_UP)}, 1, true},
		{"one dead at 1", []*concordpb.NodeDescriptor{node(1, concordpb.NodeState_NODE_UP), node(3, concordpb.NodeState_NODE_DEAD)}, 1, true},
		{"one leaving at 1", []*concordpb.NodeDescriptor{node(1, concordpb.NodeState_NODE_UP), node(4, concordpb.NodeState_NODE_LEAVING)}, 1, true},
		{"removed and replaced do not count", []*concordpb.NodeDescriptor{node(1, concordpb.NodeState_NODE_UP),
			node(3, concordpb.NodeState_NODE_REMOVED), node(4, concordpb.NodeState_NODE_REPLACED)}, 2, true},
		{"one never reported", []*concordpb.NodeDescriptor{node(1, concordpb.NodeState_NODE_UP), node(9, concordpb.NodeState_NODE_SUSPECT)}, 0, false},
	} {
		got, ok := clusterVersionTarget(tc.nodes, levelOf)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: target %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestLearnClusterVersion: a version this binary applies is recorded
// (synced, for the check at start) and used; a higher one stops the node,
// and the record refuses a restart on the older binary.
func TestLearnClusterVersion(t *testing.T) {
	dir := t.TempDir()
	eng, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{eng: eng, log: slog.New(slog.DiscardHandler), failed: make(chan struct{}), cfg: Config{Version: 2}}
	n.learnClusterVersion(2)
	n.learnClusterVersion(1) // an older answer lowers nothing
	if got := n.backend().ClusterVersion(); got != 2 {
		t.Fatalf("learned version %d, want 2", got)
	}
	if rec, err := eng.ClusterVersion(); err != nil || rec != 2 {
		t.Fatalf("recorded version %d, %v; want 2", rec, err)
	}
	select {
	case <-n.Failed():
		t.Fatal("a node stopped on a version its binary applies")
	default:
	}
	n.learnClusterVersion(3)
	select {
	case <-n.Failed():
		if !strings.Contains(n.failErr.Error(), "run a newer concord binary") {
			t.Fatalf("stopped with %q, want it to say what to do", n.failErr)
		}
	default:
		t.Fatal("a node kept running in a cluster above its binary's version")
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		level   version.Level
		refused bool
	}{{1, true}, {2, false}} {
		eng, err := storage.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := &Node{eng: eng, cfg: Config{Version: tc.level}}
		err = n.checkVersionAtStart()
		_ = eng.Close()
		if (err != nil) != tc.refused {
			t.Fatalf("a binary at %d started on data that knew version 2: %v (refused: want %v)", tc.level, err, tc.refused)
		}
		if !tc.refused && n.backend().ClusterVersion() != 2 {
			t.Fatalf("restarted at version %d, want the recorded 2", n.backend().ClusterVersion())
		}
	}
}

// startCluster starts a cluster of len(levels) nodes in this process, one
// shard, node i reporting levels[i] (0: this binary's), with fast
// heartbeats; it returns the nodes, their configs and data dirs.
func startCluster(t *testing.T, levels []version.Level) ([]*Node, []Config) {
	t.Helper()
	return startClusterWith(t, levels, nil)
}

// testConfig is DefaultConfig for the nodes tests start, with the disk
// space guard off (ReserveDiskBytes 0): its default reserve, the smaller
// of 1 GiB and 5 % of the host's filesystem, would make a test fail with
// NOSPACE on a host with less free, whatever it tests. The space tests
// set a reserve of their own (and testHooks.diskSpace).
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.ReserveDiskBytes = 0
	return cfg
}

// startClusterWith is startCluster with tune (if not nil) given each node's
// config and test hooks before the node is made.
func startClusterWith(t *testing.T, levels []version.Level, tune func(i int, cfg *Config, hooks *testHooks)) ([]*Node, []Config) {
	t.Helper()
	peers := sortedPeers(freeAddrs(t, len(levels)))
	nodes, cfgs := make([]*Node, len(levels)), make([]Config, len(levels))
	var wg sync.WaitGroup
	errs := make([]error, len(levels))
	for i := range levels {
		cfg := testConfig()
		cfg.Addr, cfg.Peers, cfg.DataDir = peers[i], peers, t.TempDir()
		cfg.Shards, cfg.Replicas, cfg.Version = 1, len(levels), levels[i]
		cfg.TickInterval, cfg.HeartbeatInterval = 20*time.Millisecond, 50*time.Millisecond
		cfg.Logger = slog.New(slog.DiscardHandler)
		var hooks testHooks
		if tune != nil {
			tune(i, &cfg, &hooks)
		}
		cfgs[i] = cfg
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n.testHooks = hooks
		nodes[i] = n
		t.Cleanup(n.Stop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[i] = n.Start(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return nodes, cfgs
}

// restart stops node i and starts it again on its data with level.
func restart(t *testing.T, nodes []*Node, cfgs []Config, i int, level version.Level) error {
	t.Helper()
	nodes[i].Stop()
	cfgs[i].Version = level
	n, err := New(cfgs[i])
	if err != nil {
		t.Fatal(err)
	}
	nodes[i] = n
	t.Cleanup(n.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Start(ctx)
}

// placementStatus is the whole-cluster status from the placement leader.
func placementStatus(nodes []*Node) (*concordpb.StatusResponse, error) {
	for _, n := range nodes {
		if _, local := n.leaderOf(routing.MetaShard); local {
			return n.clusterStatus(context.Background(), true)
		}
	}
	return nil, errors.New("no placement leader yet")
}

// waitFor polls cond until it returns nil; the test fails with its last
// error if timeout passes first.
func waitFor(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	if _, err := localcluster.WaitFor(context.Background(), timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// everyNodeReported says which node of st has not reported a version yet.
func everyNodeReported(st *concordpb.StatusResponse) error {
	for _, ns := range st.GetNodes() {
		if ns.GetVersion() == 0 {
			return fmt.Errorf("node %d has not reported a version", ns.GetNode().GetNodeId())
		}
	}
	return nil
}

// TestClusterVersionGate, on three real nodes in this process: with one
// node reporting an older level, the cluster stays at it even once every
// node has reported; upgraded, the cluster rises to this binary's level on
// every node; after that the older binary cannot start on that node's data.
func TestClusterVersionGate(t *testing.T) {
	nodes, cfgs := startCluster(t, []version.Level{0, 0, version.Base})
	// Every node has reported its level, and node 3 has reported again
	// since: a raise would have been proposed by then.
	var seen3 float64 = -1
	waitFor(t, 20*time.Second, func() error {
		st, err := placementStatus(nodes)
		if err != nil {
			return err
		}
		if err := everyNodeReported(st); err != nil {
			return err
		}
		if st.GetClusterVersion() != uint32(version.Base) {
			t.Fatalf("cluster version %d with node 3 at Base", st.GetClusterVersion())
		}
		age := st.GetNodes()[2].GetLastHeartbeatAgeSeconds()
		if seen3 < 0 || age >= seen3 {
			seen3 = age
			return errors.New("waiting for a heartbeat after every node reported")
		}
		return nil
	})
	st, _ := placementStatus(nodes)
	if st.GetClusterVersion() != uint32(version.Base) || st.GetNodes()[2].GetVersion() != uint32(version.Base) ||
		st.GetNodes()[0].GetVersion() != uint32(version.Binary) {
		t.Fatalf("status %v: want cluster version Base, node 3 at Base, node 1 at Binary", st)
	}
	for i, n := range nodes {
		if v := n.backend().ClusterVersion(); v > version.Base {
			t.Fatalf("node %d uses version %d while node 3 applies only Base", i+1, v)
		}
	}

	if err := restart(t, nodes, cfgs, 2, 0); err != nil {
		t.Fatalf("restart node 3 on this binary: %v", err)
	}
	waitFor(t, 20*time.Second, func() error {
		for i, n := range nodes {
			if v := n.backend().ClusterVersion(); v != version.Binary {
				return fmt.Errorf("node %d at version %d, want %d", i+1, v, version.Binary)
			}
		}
		return nil
	})

	// A binary from before versions (it reports none) is answered with the
	// version but not heard: placement does not record its report.
	var leader *Node
	for _, n := range nodes {
		if _, local := n.leaderOf(routing.MetaShard); local {
			leader = n
		}
	}
	if leader == nil {
		t.Fatal("no placement leader")
	}
	node3 := nodes[2].ID()
	before := leader.placement.loadOf(node3).version
	resp, err := leader.handleHeartbeat(context.Background(), &concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: uint64(node3)}})
	if err != nil || resp.GetClusterVersion() != uint32(version.Binary) {
		t.Fatalf("heartbeat from a binary before versions: %v, %v; want an answer with version %d", resp, err, version.Binary)
	}
	if after := leader.placement.loadOf(node3).version; after != before {
		t.Fatalf("placement recorded a report at level %d from a binary below the cluster's version", after)
	}

	err = restart(t, nodes, cfgs, 2, version.Base)
	if err == nil || !strings.Contains(err.Error(), "run a newer concord binary") {
		t.Fatalf("an older binary started on data of a cluster at version %d: %v", version.Binary, err)
	}
}

// TestDownNodeHoldsTheClusterVersion: a node that is down holds the
// cluster's version back until it reports again, even if its last report,
// from before it went down, gave a higher level: it may come back on an
// older binary (a rollback of a crashing upgrade), and checkVersionAtStart
// would let it, as its data never saw the raise. Once it reports again the
// version rises.
func TestDownNodeHoldsTheClusterVersion(t *testing.T) {
	nodes, cfgs := startCluster(t, []version.Level{0, 0, version.Base})
	waitFor(t, 20*time.Second, func() error {
		st, err := placementStatus(nodes)
		if err != nil {
			return err
		}
		if err := everyNodeReported(st); err != nil {
			return err
		}
		return nil
	})
	// Stop a node at this binary's level that does not lead placement:
	// the placement leader keeps its last report, at Binary.
	down := -1
	for i := range 2 {
		if _, local := nodes[i].leaderOf(routing.MetaShard); !local {
			down = i
			break
		}
	}
	nodes[down].Stop()
	// Past ReportMaxAge (three heartbeats): until then its last report
	// counts, as a node's may for a heartbeat it lost.
	time.Sleep(4 * cfgs[down].HeartbeatInterval)
	if err := restart(t, nodes, cfgs, 2, 0); err != nil {
		t.Fatalf("restart node 3 on this binary: %v", err)
	}
	up := []*Node{nodes[1-down], nodes[2]}
	deadline := time.Now().Add(2 * time.Second) // 40 heartbeats
	for time.Now().Before(deadline) {
		for _, n := range up {
			if v := n.backend().ClusterVersion(); v > version.Base {
				t.Fatalf("cluster version %d while node %d, down, may come back on a binary at Base", v, down+1)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := restart(t, nodes, cfgs, down, 0); err != nil {
		t.Fatalf("restart node %d on this binary: %v", down+1, err)
	}
	waitFor(t, 20*time.Second, func() error {
		for i, n := range nodes {
			if v := n.backend().ClusterVersion(); v != version.Binary {
				return fmt.Errorf("node %d at version %d, want %d", i+1, v, version.Binary)
			}
		}
		return nil
	})
}

// TestLevelOfNeedsAFreshReport: a level counts for the cluster version
// only while its report is fresh; an older one is as good as none.
func TestLevelOfNeedsAFreshReport(t *testing.T) {
	var m placementState
	m.record(&concordpb.HeartbeatRequest{Node: &concordpb.NodeDescriptor{NodeId: 1}, Version: uint32(version.Binary)})
	at := m.reports[1].At
	if l, ok := m.levelOf(1, at.Add(time.Second), time.Second); !ok || l != version.Binary {
		t.Fatalf("a report as old as maxAge: level %d, %v; want %d, true", l, ok, version.Binary)
	}
	if _, ok := m.levelOf(1, at.Add(time.Second+1), time.Second); ok {
		t.Fatal("a report older than maxAge still counts")
	}
	if _, ok := m.levelOf(2, at, time.Second); ok {
		t.Fatal("a node that never reported has a level")
	}
}

// TestPlacementLeaderLearnsTheVersionItRaises: the placement leader uses
// (and checks joins against) the version it raised as soon as the raise
// applies, not only at its next heartbeat: until then it would take a
// join from a binary below the cluster's version.
func TestPlacementLeaderLearnsTheVersionItRaises(t *testing.T) {
	n := startSoloPlacement(t, testHooks{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.sendHeartbeat(ctx) // its report, at this binary's level: the raise starts
	waitFor(t, 10*time.Second, func() error {
		if cv, err := n.readClusterVersion(); err != nil || cv != version.Binary || n.placement.raising.Load() {
			return fmt.Errorf("cluster version %d (%v), raising %v", cv, err, n.placement.raising.Load())
		}
		return nil
	})
	if v := n.backend().ClusterVersion(); v != version.Binary {
		t.Fatalf("the placement leader raised the cluster version to %d but uses %d until its next heartbeat", version.Binary, v)
	}
}

// TestNewerDescriptorsSkipsUnknownFields: placement records a shard
// leader's descriptor only when it is newer than its own and holds no
// field this binary does not know (recorded, it would stop every meta
// replica).
func TestNewerDescriptorsSkipsUnknownFields(t *testing.T) {
	known := []*concordpb.ShardDescriptor{{ShardId: 1, Epoch: 5}, {ShardId: 2, Epoch: 5}}
	foreign := &concordpb.ShardDescriptor{ShardId: 2, Epoch: 9}
	foreign.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
	led := []*concordpb.ShardDescriptor{{ShardId: 1, Epoch: 5}, foreign, {ShardId: 1, Epoch: 6}, {ShardId: 3, Epoch: 1}}
	got := newerDescriptors(known, led)
	if len(got) != 2 || got[0] != led[2] || got[1] != led[3] {
		t.Fatalf("recorded %v; want shard 1 at epoch 6 and the new shard 3 only", got)
	}
}

// startSoloPlacement starts a one-node cluster that sends heartbeats only
// when the test calls sendHeartbeat, and waits until it leads placement.
// Its cluster version stays Base until then.
func startSoloPlacement(t *testing.T, hooks testHooks) *Node {
	hooks.noHeartbeats = true
	t.Helper()
	addr := freeAddrs(t, 1)[0]
	cfg := testConfig()
	cfg.Addr, cfg.Peers, cfg.DataDir = addr, []string{addr}, t.TempDir()
	cfg.Shards, cfg.Replicas = 1, 1
	cfg.TickInterval, cfg.HeartbeatInterval = 20*time.Millisecond, time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.testHooks = hooks
	t.Cleanup(n.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		if _, local := n.leaderOf(routing.MetaShard); !local {
			return errors.New("not the placement leader yet")
		}
		return nil
	})
	return n
}

// waitRaised waits until no raise of the cluster's version is under way
// and returns the version the meta shard holds.
func waitRaised(t *testing.T, n *Node) version.Level {
	t.Helper()
	var cv version.Level
	waitFor(t, 10*time.Second, func() (err error) {
		if n.placement.raising.Load() {
			return errors.New("a raise is under way")
		}
		cv, err = n.readClusterVersion()
		return err
	})
	return cv
}

// TestJoinAndRaiseAreOrderedAcrossPlacementLeaders: a raise of the cluster's
// version and a join accepted by another placement leader (which does not
// hold this one's joinMu: placement leadership moved meanwhile) keep their
// order at apply. A raise whose decision predates a registration is
// refused when it applies after it; a join checked against the version
// before a raise is refused when it applies after the raise. The other
// leader's join is its proposal as addNode makes it at the version it
// checked (Base: no level in it).
func TestJoinAndRaiseAreOrderedAcrossPlacementLeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// joinAtBase proposes the join of a node at Base (level: the level the
	// proposal names, Unknown for none).
	joinAtBase := func(n *Node, addr, token string, level version.Level) error {
		_, err := n.proposeMeta(ctx, &storepb.Command{Kind: &storepb.Command_AddNode{AddNode: &storepb.AddNode{
			Address: addr, JoinToken: []byte(token), Level: uint32(level)}}})
		return err
	}

	t.Run("join applies first", func(t *testing.T) {
		var n *Node
		joined := make(chan error, 1)
		n = startSoloPlacement(t, testHooks{raising: func() {
			// The raise has decided on the one node; another placement
			// leader registers a node at Base before the raise applies.
			joined <- joinAtBase(n, "127.0.0.1:1", "other-leader-join", version.Unknown)
		}})
		n.sendHeartbeat(ctx)
		if cv := waitRaised(t, n); cv != version.Base {
			t.Fatalf("cluster version %d after a node registered at Base ahead of the raise; want Base", cv)
		}
		if err := <-joined; err != nil {
			t.Fatalf("join at Base on a cluster at Base: %v", err)
		}
	})

	t.Run("raise applies first", func(t *testing.T) {
		n := startSoloPlacement(t, testHooks{})
		n.sendHeartbeat(ctx)
		if cv := waitRaised(t, n); cv != version.Binary {
			t.Fatalf("cluster version %d, want %d", cv, version.Binary)
		}
		// Checked against Base at another placement leader, before the
		// raise applied there: at Base, a leader names no level; one at
		// OrderedJoins or above names it.
		err := joinAtBase(n, "127.0.0.1:1", "checked-at-base", version.Unknown)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "retry it") {
			t.Fatalf("a join checked against Base, applied after the raise to %d: %v; want Unavailable (retry)", version.Binary, err)
		}
		err = joinAtBase(n, "127.0.0.1:2", "checked-at-base-with-level", version.Base)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "run a newer binary") {
			t.Fatalf("a join at Base applied after the raise to %d: %v; want FailedPrecondition", version.Binary, err)
		}
		v, err := n.placementView()
		if err != nil || len(v.Nodes) != 1 {
			t.Fatalf("nodes after the refused joins: %v, %v; want only the first", v.Nodes, err)
		}
	})
}

// TestJoinAndRaiseAreOrdered: a join and a raise of the cluster's version
// on the placement leader never interleave. A join from an older binary
// that registered first holds the raise back (its node counts at Base until
// it reports), even though the heartbeat that started the raise read the
// nodes before it; one that comes while a raise is under way is refused
// against the raised version.
func TestJoinAndRaiseAreOrdered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("join first", func(t *testing.T) {
		var n *Node
		n = startSoloPlacement(t, testHooks{joining: func() {
			// Between the join's check and its registration: a heartbeat
			// that reads the one node and starts a raise.
			n.sendHeartbeat(ctx)
		}})
		id, _, err := n.addNode(ctx, "127.0.0.1:1", []byte("join-first"), version.Base)
		if err != nil {
			t.Fatalf("join at Base while the cluster is at Base: %v", err)
		}
		if cv := waitRaised(t, n); cv != version.Base {
			t.Fatalf("cluster version %d after node %d joined at Base", cv, id)
		}
	})

	t.Run("raise first", func(t *testing.T) {
		var n *Node
		joined := make(chan error, 1)
		n = startSoloPlacement(t, testHooks{raising: func() {
			// The raise has decided; a join from an older binary comes now.
			go func() {
				_, _, err := n.addNode(ctx, "127.0.0.1:1", []byte("raise-first"), version.Base)
				joined <- err
			}()
		}})
		n.sendHeartbeat(ctx)
		if cv := waitRaised(t, n); cv != version.Binary {
			t.Fatalf("cluster version %d, want %d", cv, version.Binary)
		}
		err := <-joined
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "run a newer binary") {
			t.Fatalf("join at Base during a raise to %d: %v; want FailedPrecondition", version.Binary, err)
		}
		v, err := n.placementView()
		if err != nil || len(v.Nodes) != 1 {
			t.Fatalf("nodes after the refused join: %v, %v; want only the first", v.Nodes, err)
		}
	})
}

// TestShardsVersionedOnceTheClusterIs: once the cluster's version allows
// versions, every user shard gets its first versioned command from its
// leader without any client write (versionShards), so its first version
// (kv: versions_from) is fixed at about the raise, not at whatever write
// comes first, which could come after a tentative write was taken.
func TestShardsVersionedOnceTheClusterIs(t *testing.T) {
	nodes, _ := startCluster(t, []version.Level{0, 0, 0})
	waitFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			for _, info := range n.host.Infos() {
				if info.Shard == routing.MetaShard {
					continue
				}
				var as storepb.AppliedState
				err := n.eng.Read(func(r storage.Reader) error {
					_, err := storage.GetProto(r, keys.Applied(uint64(info.Shard)), &as)
					return err
				})
				if err != nil {
					return err
				}
				if as.GetClock().GetVersionsFrom() == 0 {
					return fmt.Errorf("node %d: shard %d has no first version yet (cluster version %d)", n.ID(), info.Shard, n.backend().ClusterVersion())
				}
			}
		}
		return nil
	})
}
