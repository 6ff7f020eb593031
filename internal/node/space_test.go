package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/placement/scheduler"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/version"
)

// TestLowAfterHysteresis: a node becomes low under its reserve and stays
// low until it has the reserve plus a margin (a tenth of the reserve, at
// least 64 MiB, at most the reserve) free; a reserve of 0 is never low.
func TestLowAfterHysteresis(t *testing.T) {
	const gib = 1 << 30
	margin := uint64(gib / 10)
	for _, tc := range []struct {
		was           bool
		free, reserve uint64
		want          bool
	}{
		{false, gib, gib, false},               // at the line: not low
		{false, gib - 1, gib, true},            // under it: low
		{true, gib, gib, true},                 // back at the line: still low
		{true, gib + margin - 1, gib, true},    // inside the margin: still low
		{true, gib + margin, gib, false},       // past the margin: low no more
		{false, gib + margin/2, gib, false},    // inside the margin, never low: not low
		{true, 100 << 20, 10 << 20, false},     // small reserve: margin passed
		{true, (20 << 20) - 1, 10 << 20, true}, // reserve under 64 MiB: the margin is the reserve
		{true, 20 << 20, 10 << 20, false},      //   (not 64 MiB: it clears at 20 MiB free)
		{true, 128 << 20, 100 << 20, true},     // reserve over 64 MiB: margin 64 MiB
		{true, 164 << 20, 100 << 20, false},
		// A small filesystem's reserve (5 % of 128 MiB): the margin is the
		// reserve, so it clears at twice the reserve, not at 55 % free.
		{true, 2*(128<<20/20) - 1, 128 << 20 / 20, true},
		{true, 2 * (128 << 20 / 20), 128 << 20 / 20, false},
		{true, 2, 1, false}, // a reserve of 1 byte: clears at 2
		{true, 1, 1, true},
		{true, 0, 0, false}, // guard off
		{false, 0, 0, false},
	} {
		if got := lowAfter(tc.was, tc.free, tc.reserve); got != tc.want {
			t.Errorf("lowAfter(was %v, free %d, reserve %d) = %v; want %v", tc.was, tc.free, tc.reserve, got, tc.want)
		}
	}
}

// TestResolveReserve: the default is the smaller of 1 GiB and 5 % of the
// filesystem; 0 is off; a number given is taken as it is.
func TestResolveReserve(t *testing.T) {
	for _, tc := range []struct {
		setting int64
		total   uint64
		want    uint64
	}{
		{ReserveDiskAuto, 100 << 30, 1 << 30},
		{ReserveDiskAuto, 10 << 30, 512 << 20},
		{0, 100 << 30, 0},
		{5 << 20, 100 << 30, 5 << 20},
		{1 << 60, 100 << 30, 1 << 60},
	} {
		if got := resolveReserve(tc.setting, tc.total); got != tc.want {
			t.Errorf("resolveReserve(%d, %d) = %d; want %d", tc.setting, tc.total, got, tc.want)
		}
	}
	cfg := DefaultConfig()
	cfg.ReserveDiskBytes = -2
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "--reserve-disk-bytes") {
		t.Fatalf("--reserve-disk-bytes -2: %v; want it refused", err)
	}
}

// TestLowSpaceNodesOnlyLiveMembers: the placement leader's answer names
// the nodes whose last report says low, of those it has heard from within
// SuspectAfter during its current leadership and that are not removed,
// replaced or dead, in id order, with their figures. A LEAVING node counts
// while it answers, but not once silent: its recorded state stays LEAVING
// until its drain completes, which a dead node's may never do. A report
// from before this placement leadership began (ObservedSince: an earlier
// term of its leadership, before another node led in between) does not
// count.
func TestLowSpaceNodesOnlyLiveMembers(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := scheduler.View{Now: now, Settings: scheduler.DefaultSettings(time.Second), ObservedSince: now.Add(-time.Hour),
		Reports: map[ids.NodeID]scheduler.Report{}}
	loads := map[ids.NodeID]load{}
	add := func(id ids.NodeID, desc concordpb.NodeState, age time.Duration, low bool) {
		v.Nodes = append(v.Nodes, &concordpb.NodeDescriptor{NodeId: uint64(id), State: desc})
		v.Reports[id] = scheduler.Report{At: now.Add(-age), DiskLow: low}
		loads[id] = load{diskLow: low, diskFree: uint64(id) << 20, diskReserve: 1 << 30}
	}
	up, leaving := concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_LEAVING
	add(7, up, 0, true)
	add(2, concordpb.NodeState_NODE_SUSPECT, time.Second, true) // recorded SUSPECT, heard from since: UP
	add(3, up, 61*time.Second, true)                            // silent past DeadAfter: dead
	add(9, up, 6*time.Second, true)                             // silent past SuspectAfter, not dead: may still take appends
	add(4, concordpb.NodeState_NODE_REMOVED, 0, true)
	add(5, concordpb.NodeState_NODE_REPLACED, 0, true)
	add(6, leaving, 0, true)
	add(10, leaving, 61*time.Second, true) // leaving, and dead: the cause of the alarm that never cleared
	add(1, up, 0, false)
	v.Nodes = append(v.Nodes, &concordpb.NodeDescriptor{NodeId: 8, State: up}) // never reported
	got := lowSpaceNodes(v, loads)
	var ids []uint64
	for _, l := range got {
		ids = append(ids, l.GetNodeId())
		if l.GetFreeBytes() != l.GetNodeId()<<20 || l.GetReserveBytes() != 1<<30 {
			t.Errorf("node %d listed with %d free, %d reserve; want its report's", l.GetNodeId(), l.GetFreeBytes(), l.GetReserveBytes())
		}
	}
	if fmt.Sprint(ids) != "[2 6 7 9]" {
		t.Fatalf("low nodes %v; want [2 6 7 9] (the live ones that reported low, in id order)", ids)
	}

	// The placement leadership moved away and back: this leader's watch
	// began 2 s ago, and node 7's low report is from its earlier term.
	v.ObservedSince = now.Add(-2 * time.Second)
	v.Reports[7] = scheduler.Report{At: now.Add(-3 * time.Second), DiskLow: true}
	v.Reports[9] = scheduler.Report{At: now.Add(-3 * time.Second), DiskLow: true}
	if got := lowSpaceNodes(v, loads); len(got) != 2 || got[0].GetNodeId() != 2 || got[1].GetNodeId() != 6 {
		t.Fatalf("low nodes %v after a new placement leadership; want [2 6]: the reports of nodes 7 and 9 predate it", got)
	}
}

// TestBytesText: the sizes the refusals and logs show.
func TestBytesText(t *testing.T) {
	for b, want := range map[uint64]string{512: "512 B", 1536: "1.5 KiB", 800 << 20: "800.0 MiB", 1 << 30: "1.0 GiB", 1 << 60: "1.0 EiB"} {
		if got := bytesText(b); got != want {
			t.Errorf("bytesText(%d) = %q; want %q", b, got, want)
		}
	}
}

// TestSpaceAlarmRefusesWritesClusterWide, on three real nodes in this
// process whose free space the test sets (testHooks.diskSpace): once one
// node is under its reserve, a put through any node is refused
// (ResourceExhausted, "no space: node N ...", client.ErrNoSpace, not
// ambiguous) and writes nothing, while a delete and a read still work;
// the low node's refusal follows its measurements while it stays low;
// once that node has space again, puts through every node succeed.
func TestSpaceAlarmRefusesWritesClusterWide(t *testing.T) {
	const reserve = 1 << 30
	var lowFree atomic.Uint64
	lowFree.Store(4 << 30)
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		cfg.ReserveDiskBytes = reserve
		hooks.diskSpace = func() (uint64, uint64, error) { return 8 << 30, 100 << 30, nil }
		if i == 1 {
			hooks.diskSpace = func() (uint64, uint64, error) { return lowFree.Load(), 100 << 30, nil }
		}
	})
	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		c, err := client.NewWithOptions(context.Background(), client.Options{Endpoints: []string{n.Addr()}, ThroughEndpoints: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i] = c
	}
	put := func(c *client.Client, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := c.Put(ctx, []byte(key), []byte("v"))
		return err
	}
	for i, c := range clients {
		waitFor(t, 10*time.Second, func() error { return put(c, fmt.Sprintf("before-%d", i)) })
	}

	lowFree.Store(800 << 20)
	low := nodes[1].ID()
	want := fmt.Sprintf("no space: node %d has 800.0 MiB free, under its --reserve-disk-bytes of 1.0 GiB", low)
	for i, c := range clients {
		var key string
		attempt := 0
		waitFor(t, 10*time.Second, func() error {
			// A key of its own each time: a put made before the node
			// learned of the alarm wrote its key.
			attempt++
			key = fmt.Sprintf("during-%d-%d", i, attempt)
			err := put(c, key)
			if err == nil {
				return fmt.Errorf("a put through node %d succeeded with node %d low on space", nodes[i].ID(), low)
			}
			if !errors.Is(err, client.ErrNoSpace) || errors.Is(err, client.ErrAmbiguous) || status.Code(err) != codes.ResourceExhausted ||
				!strings.Contains(err.Error(), want) {
				t.Fatalf("a put through node %d: %v; want ErrNoSpace (ResourceExhausted %q...), not ambiguous", nodes[i].ID(), err, want)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, found, err := c.Get(ctx, []byte(key)); err != nil || found {
			t.Fatalf("the refused key read through node %d: found %v, %v; want absent", nodes[i].ID(), found, err)
		}
		if existed, err := c.Delete(ctx, []byte(fmt.Sprintf("before-%d", i))); err != nil || !existed {
			t.Fatalf("a delete through node %d with the alarm on: existed %v, %v; want it deleted", nodes[i].ID(), existed, err)
		}
		if _, found, err := c.Get(ctx, []byte(fmt.Sprintf("before-%d", i))); err != nil || found {
			t.Fatalf("a deleted key read through node %d: found %v, %v; want absent", nodes[i].ID(), found, err)
		}
		cancel()
		if !nodes[i].space.alarm.Load() {
			t.Fatalf("node %d's space alarm gauge is off while it refuses", nodes[i].ID())
		}
	}
	if !nodes[1].space.low.Load() || nodes[0].space.low.Load() {
		t.Fatal("the low flags are not the measured ones")
	}

	// Still low, with less free: the refusal says the free bytes of the
	// latest measurement, not those of when the node went low.
	lowFree.Store(700 << 20)
	nodes[1].checkSpace(context.Background())
	if err := put(clients[1], "during-less"); !errors.Is(err, client.ErrNoSpace) ||
		!strings.Contains(err.Error(), fmt.Sprintf("no space: node %d has 700.0 MiB free", low)) {
		t.Fatalf("a put through the low node after it measured 700 MiB free: %v; want the refusal to say so", err)
	}

	// Inside the margin above the reserve: still low (no flapping).
	lowFree.Store(reserve + 10<<20)
	nodes[1].checkSpace(context.Background())
	if !nodes[1].space.low.Load() {
		t.Fatal("node low on space left the state inside the margin")
	}
	lowFree.Store(4 << 30)
	for i, c := range clients {
		waitFor(t, 10*time.Second, func() error { return put(c, fmt.Sprintf("after-%d", i)) })
	}
}

// TestTestNodesIgnoreTheHostsFreeSpace: the nodes tests start have the
// space guard off unless a test sets a reserve, so that a test host with
// little free disk (here: 1 MiB free of 100 GiB, under the default reserve
// of 1 GiB) does not fail every test with NOSPACE.
func TestTestNodesIgnoreTheHostsFreeSpace(t *testing.T) {
	nodes, _ := startClusterWith(t, []version.Level{0}, func(_ int, _ *Config, hooks *testHooks) {
		hooks.diskSpace = func() (uint64, uint64, error) { return 1 << 20, 100 << 30, nil }
	})
	c, err := client.NewWithOptions(context.Background(), client.Options{Endpoints: []string{nodes[0].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := c.Put(ctx, []byte("k"), []byte("v"))
		if errors.Is(err, client.ErrNoSpace) {
			t.Fatalf("a put on a test node: %v; want the guard off", err)
		}
		return err
	})
}

// TestSnapshotDiskMarginIsTheReserve protects the one line shared by client
// writes and received snapshots: the transport's margin is the guard's
// reserve, and off (negative, not 0, which the transport reads as its own
// default of 1 GiB) while the guard is off.
func TestSnapshotDiskMarginIsTheReserve(t *testing.T) {
	for _, c := range []struct {
		reserve uint64
		want    int64
	}{{0, -1}, {1, 1}, {512 << 20, 512 << 20}, {math.MaxUint64, math.MaxInt64}} {
		if got := snapshotDiskMargin(c.reserve); got != c.want {
			t.Errorf("snapshotDiskMargin(%d) = %d, want %d", c.reserve, got, c.want)
		}
	}
}

// TestDiskLowFaultRaisesTheAlarmClusterWide protects the space fault the
// robustness suite injects (Admin.DiskLow): on one node it makes that
// node's own measurement read 0 free bytes, so a put through every node is
// refused for space naming that node (the alarm spread by heartbeat) and
// writes nothing; turned off, the real measurement clears the alarm and
// puts succeed again. A node whose guard is off refuses the fault.
func TestDiskLowFaultRaisesTheAlarmClusterWide(t *testing.T) {
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		cfg.ReserveDiskBytes, cfg.EnableFaultInjection = 1<<30, true
		hooks.diskSpace = func() (uint64, uint64, error) { return 8 << 30, 100 << 30, nil }
	})
	conn, err := dial.Dial(nodes[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	diskLow := func(low bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := concordpb.NewAdminClient(conn).DiskLow(ctx, &concordpb.DiskLowRequest{Low: low}); err != nil {
			t.Fatalf("DiskLow(%v): %v", low, err)
		}
	}
	c, err := client.NewWithOptions(context.Background(), client.Options{Endpoints: []string{nodes[0].Addr(), nodes[2].Addr()}, ThroughEndpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	put := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := c.Put(ctx, []byte(key), []byte("v"))
		return err
	}
	waitFor(t, 10*time.Second, func() error { return put("before") })

	diskLow(true)
	want := fmt.Sprintf("no space: node %d has 0 B free", nodes[1].ID())
	attempt := 0
	var key string
	waitFor(t, 10*time.Second, func() error {
		attempt++
		key = fmt.Sprintf("during-%d", attempt) // a put made before the alarm spread wrote its key
		err := put(key)
		if err == nil || !errors.Is(err, client.ErrNoSpace) {
			return fmt.Errorf("a put through nodes %d and %d with node %d's disk-low fault on: %v", nodes[0].ID(), nodes[2].ID(), nodes[1].ID(), err)
		}
		if errors.Is(err, client.ErrAmbiguous) || !strings.Contains(err.Error(), want) {
			t.Fatalf("refused put: %v; want ErrNoSpace %q..., not ambiguous", err, want)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, found, err := c.Get(ctx, []byte(key)); err != nil || found {
		t.Fatalf("the refused key: found %v, %v; want absent", found, err)
	}
	// The refusal may have come from either endpoint: the other learns of
	// the alarm by its next heartbeat answer.
	waitFor(t, 10*time.Second, func() error {
		if !nodes[1].space.low.Load() || nodes[0].space.low.Load() || nodes[2].space.low.Load() ||
			!nodes[0].space.alarm.Load() || !nodes[2].space.alarm.Load() {
			return errors.New("the fault did not take the measurement's path: node 2 low, the alarm on elsewhere")
		}
		return nil
	})

	diskLow(false)
	waitFor(t, 10*time.Second, func() error { return put("after") })
	if nodes[1].space.low.Load() {
		t.Fatal("node 2 still low once the fault is off")
	}
}

// TestDiskLowFaultRefusedWhileTheGuardIsOff: with --reserve-disk-bytes 0
// the disk-low fault would change nothing, so it is refused and not set.
func TestDiskLowFaultRefusedWhileTheGuardIsOff(t *testing.T) {
	n, err := New(Config{Addr: "127.0.0.1:7001", ReserveDiskBytes: 0, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.setDiskLow(true); !errors.Is(err, errGuardOff) {
		t.Fatalf("setDiskLow with the guard off: %v, want %v", err, errGuardOff)
	}
	if n.space.full.Load() {
		t.Fatal("a refused disk-low fault was set")
	}
}

// TestRedisFaultDiskLow protects CONCORD.FAULT DISK-LOW ON|OFF on a real
// node's Redis port: ON makes the node's measurement read 0 free bytes, so
// a SET is soon answered -NOSPACE naming the node; OFF measures the disk
// again and SETs succeed. A node whose guard is off refuses it and sets
// nothing, as Admin.DiskLow does.
func TestRedisFaultDiskLow(t *testing.T) {
	// A reserve of 1 byte: the guard on, and the host's real disk above it.
	n := startSolo(t, func(c *Config) {
		c.RedisAddr, c.EnableFaultInjection, c.ReserveDiskBytes = "127.0.0.1:0", true, 1
	})
	nc, r := redisDial(t, n)
	do := func(args ...string) string {
		t.Helper()
		if _, err := io.WriteString(nc, command(args...)); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(line, "\r\n")
	}
	waitFor(t, 10*time.Second, func() error {
		if got := do("SET", "before", "v"); got != "+OK" {
			return fmt.Errorf("SET answered %q", got)
		}
		return nil
	})
	if got := do("CONCORD.FAULT", "DISK-LOW", "ON"); got != "+OK" {
		t.Fatalf("CONCORD.FAULT DISK-LOW ON answered %q; want +OK", got)
	}
	want := fmt.Sprintf("-NOSPACE node %d has 0 B free", n.ID())
	waitFor(t, 10*time.Second, func() error {
		if got := do("SET", "during", "v"); !strings.HasPrefix(got, want) {
			return fmt.Errorf("SET with the disk-low fault on answered %q; want %q...", got, want)
		}
		return nil
	})
	if got := do("CONCORD.FAULT", "DISK-LOW", "OFF"); got != "+OK" {
		t.Fatalf("CONCORD.FAULT DISK-LOW OFF answered %q; want +OK", got)
	}
	waitFor(t, 10*time.Second, func() error {
		if got := do("SET", "after", "v"); got != "+OK" {
			return fmt.Errorf("SET with the fault off answered %q", got)
		}
		return nil
	})

	off := startSolo(t, func(c *Config) { c.RedisAddr, c.EnableFaultInjection = "127.0.0.1:0", true })
	nc, r = redisDial(t, off)
	if got := do("CONCORD.FAULT", "DISK-LOW", "ON"); !strings.HasPrefix(got, "-ERR the disk space guard is off") || off.space.full.Load() {
		t.Fatalf("CONCORD.FAULT DISK-LOW ON with the guard off answered %q (fault set: %v); want refused, not set", got, off.space.full.Load())
	}
}

// TestReplicaSizesReachThePlacementView: each node reports its replicas'
// sizes on disk (approx_bytes) and its space guard's free bytes and
// reserve, and the placement leader's scheduler view carries them, so
// that placement can tell whether a shard fits on a node. 2 MiB of
// incompressible values put into the user shard and flushed show as at
// least 1 MiB on every replica; the meta shard's replicas report too.
func TestReplicaSizesReachThePlacementView(t *testing.T) {
	const reserve, free = 1 << 30, 8 << 30
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		cfg.ReserveDiskBytes = reserve
		hooks.diskSpace = func() (uint64, uint64, error) { return free, 100 << 30, nil }
		hooks.shardSizeEvery = 50 * time.Millisecond
	})
	c, err := client.NewWithOptions(context.Background(), client.Options{Endpoints: []string{nodes[0].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putIncompressible(t, c)
	waitFor(t, 20*time.Second, func() error {
		for _, n := range nodes {
			if err := n.eng.Flush(); err != nil {
				return err
			}
		}
		var v scheduler.View
		for _, n := range nodes {
			if _, local := n.leaderOf(routing.MetaShard); local {
				if v, err = n.placementView(); err != nil {
					return err
				}
			}
		}
		if v.Reports == nil {
			return errors.New("no placement leader yet")
		}
		for _, n := range nodes {
			r, ok := v.Reports[n.ID()]
			if !ok {
				return fmt.Errorf("no report from node %d", n.ID())
			}
			if r.DiskFree != free || r.DiskReserve != reserve {
				return fmt.Errorf("node %d's report: %d free, reserve %d; want %d, %d", n.ID(), r.DiskFree, r.DiskReserve, uint64(free), uint64(reserve))
			}
			user, meta := false, false
			for _, rs := range r.Replicas {
				switch {
				case rs.GetShardId() == uint64(routing.MetaShard):
					meta = rs.GetApproxBytes() > 0
				case rs.GetApproxBytes() >= 1<<20:
					user = true
				}
			}
			if !user || !meta {
				return fmt.Errorf("node %d's report: %v; want the user shard at 1 MiB or more, the meta shard above 0", n.ID(), r.Replicas)
			}
		}
		return nil
	})
}

// TestStatusShowsShardSizes: the Status RPC (`concord status`, `shard
// list`) gives a shard holding data a size (ShardStatus.approx_bytes):
// the placement leader's answer the largest its nodes report, and a
// node's own view (the stale fallback) its replica's last measurement.
func TestStatusShowsShardSizes(t *testing.T) {
	nodes, _ := startClusterWith(t, []version.Level{0, 0, 0}, func(i int, cfg *Config, hooks *testHooks) {
		hooks.shardSizeEvery = 50 * time.Millisecond
	})
	c, err := client.NewWithOptions(context.Background(), client.Options{Endpoints: []string{nodes[1].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putIncompressible(t, c)
	userSize := func(st *concordpb.StatusResponse) (uint64, error) {
		for _, ss := range st.GetShards() {
			if !ss.GetIsMeta() {
				return ss.GetApproxBytes(), nil
			}
		}
		return 0, errors.New("no user shard in the status")
	}
	waitFor(t, 20*time.Second, func() error {
		for _, n := range nodes {
			if err := n.eng.Flush(); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if b, err := userSize(st); err != nil || b < 1<<20 {
			return fmt.Errorf("status from node %d: user shard at %d bytes (%v); want 1 MiB or more", st.GetAnsweredByNodeId(), b, err)
		}
		for _, n := range nodes {
			if b, err := userSize(n.localStatus()); err != nil || b < 1<<20 {
				return fmt.Errorf("node %d's own view: user shard at %d bytes (%v); want 1 MiB or more", n.ID(), b, err)
			}
		}
		return nil
	})
}

// putIncompressible writes 2 MiB through c: 64 random (incompressible)
// values of 32 KiB under keys size-0 … size-63, each retried until it
// commits.
func putIncompressible(t *testing.T, c *client.Client) {
	t.Helper()
	value := make([]byte, 32<<10)
	for i := range 64 {
		_, _ = rand.Read(value)
		waitFor(t, 10*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _, err := c.Put(ctx, fmt.Appendf(nil, "size-%d", i), value)
			return err
		})
	}
}
