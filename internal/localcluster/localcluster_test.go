package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDir holds the concord binary TestLifecycle builds; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// concordBinary is $CONCORD_TEST_BIN, or a concord built into binDir.
func concordBinary(t *testing.T) string {
	if p := os.Getenv("CONCORD_TEST_BIN"); p != "" {
		return p
	}
	dir, err := os.MkdirTemp("", "localcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	binDir = dir
	p, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	ps, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("FreePorts handed out %d again", p)
		}
		seen[p] = true
	}
}

func TestArgs(t *testing.T) {
	addrs := []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
	c, err := New(Config{Binary: "concord", Dir: "/d", Addrs: addrs, Shards: 4, Replicas: 3, LogLevel: "debug",
		FaultInjection: true, ExtraArgs: []string{"--raft-log-keep-entries=20"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"server", "--addr", "127.0.0.1:7002", "--data-dir", "/d/node2", "--peers", strings.Join(addrs, ","),
		"--shards", "4", "--replicas", "3", "--log-level", "debug", "--enable-fault-injection", "--raft-log-keep-entries=20"}
	if got := c.Args(1); !slices.Equal(got, want) {
		t.Fatalf("Args(1):\n got %q\nwant %q", got, want)
	}
	if c.LogPath(0) != "" || c.Shards() != 4 || c.Index("127.0.0.1:7003") != 2 {
		t.Fatalf("LogPath %q, Shards %d, Index %d", c.LogPath(0), c.Shards(), c.Index("127.0.0.1:7003"))
	}

	d, err := New(Config{Binary: "concord", Dir: "/d", Nodes: 2, LogDir: "/logs"})
	if err != nil {
		t.Fatal(err)
	}
	wantMin := []string{"server", "--addr", d.Addr(0), "--data-dir", "/d/node1", "--peers", d.Addr(0) + "," + d.Addr(1)}
	if got := d.Args(0); !slices.Equal(got, wantMin) {
		t.Fatalf("Args(0) with defaults:\n got %q\nwant %q", got, wantMin)
	}
	if d.Addr(0) == d.Addr(1) || !strings.HasPrefix(d.Addr(0), "127.0.0.1:") {
		t.Fatalf("addresses %v", d.Addrs())
	}
	if d.LogPath(1) != "/logs/node2.log" || d.Shards() != DefaultShards {
		t.Fatalf("LogPath %q, Shards %d", d.LogPath(1), d.Shards())
	}
}

// fakeNode writes a stand-in for concord that runs until killed and, with
// stubborn, ignores SIGTERM: enough for the process handling alone.
func fakeNode(t *testing.T, stubborn bool) string {
	script := "#!/bin/sh\necho started \"$@\"\nexec sleep 1000\n"
	if stubborn {
		script = "#!/bin/sh\ntrap '' TERM\necho started\nwhile :; do sleep 1; done\n"
	}
	path := filepath.Join(t.TempDir(), "fake-concord")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// gone reports whether no process has pid any more.
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func TestSuperviseRestartsKilledNode(t *testing.T) {
	var mu sync.Mutex
	var exits []Exit
	restarted := make(chan int, 10)
	dir := t.TempDir()
	c, err := Start(Config{Binary: fakeNode(t, false), Dir: dir, Nodes: 2, LogDir: dir, Supervise: true,
		RestartDelay: 10 * time.Millisecond,
		OnExit:       func(e Exit) { mu.Lock(); exits = append(exits, e); mu.Unlock() },
		OnRestart:    func(i, pid int) { restarted <- i }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(0)
	old := c.PID(1)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil { // a crash: nobody asked
		t.Fatal(err)
	}
	if i := <-restarted; i != 1 {
		t.Fatalf("restarted node %d, want 1", i)
	}
	if pid := c.PID(1); pid == 0 || pid == old {
		t.Fatalf("node 1 pid %d after restart (was %d)", pid, old)
	}
	mu.Lock()
	if len(exits) != 1 || exits[0].Node != 1 || exits[0].PID != old || exits[0].Asked {
		t.Fatalf("exits %+v", exits)
	}
	mu.Unlock()
	if log, _ := os.ReadFile(c.LogPath(1)); strings.Count(string(log), "=== localcluster: start #") != 2 {
		t.Fatalf("log of node 1 should show two starts:\n%s", log)
	}

	// An exit the owner asked for is not undone.
	if err := c.Kill(0); err != nil {
		t.Fatal(err)
	}
	if c.Running(0) {
		t.Fatal("node 0 running after Kill")
	}
	pids := []int{old, c.PID(1)}
	c.Shutdown(0)
	if len(restarted) != 0 {
		t.Fatalf("%d unexpected restarts", len(restarted))
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Fatalf("pid %d still there after Shutdown", pid)
		}
	}
	if err := c.Start(0); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
}

func TestStopKillsStubbornNode(t *testing.T) {
	dir := t.TempDir()
	c, err := Start(Config{Binary: fakeNode(t, true), Dir: dir, Nodes: 1, LogDir: dir, StopTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(0)
	pid := c.PID(0)
	// The script must have set its trap before SIGTERM is sent.
	if _, err := WaitFor(context.Background(), 10*time.Second, func() error {
		if b, _ := os.ReadFile(c.LogPath(0)); !strings.Contains(string(b), "started") {
			return errors.New("not started yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(0); err == nil || !strings.Contains(err.Error(), "killed it") {
		t.Fatalf("Stop of a node ignoring SIGTERM: %v", err)
	}
	if !gone(pid) || c.PID(0) != 0 {
		t.Fatalf("pid %d survived Stop", pid)
	}
	if err := c.Kill(0); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Kill of a stopped node: %v", err)
	}
	if err := c.Exited(); err != nil {
		t.Fatalf("an asked-for exit reported: %v", err)
	}
}

// TestLifecycle runs a real 3-node cluster of the concord binary.
func TestLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs concord")
	}
	dir := t.TempDir()
	// The space guard off: this test is about processes, and the default
	// reserve (up to 1 GiB) would refuse its writes on a host with less free.
	c, err := Start(Config{Binary: concordBinary(t), Dir: dir, LogDir: dir, Nodes: 3, Shards: 4,
		ExtraArgs: []string{"--reserve-disk-bytes=0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(0)
	ctx := context.Background()
	if _, err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(0); !errors.Is(err, ErrRunning) {
		t.Fatalf("Start of a running node: %v", err)
	}
	if err := c.Stop(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	if err := c.Wipe(2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.DataDir(2)); !os.IsNotExist(err) {
		t.Fatalf("data dir of node 2 after Wipe: %v", err)
	}
	for _, i := range []int{0, 2} {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Exited(); err != nil {
		t.Fatal(err)
	}
	pids := []int{c.PID(0), c.PID(1), c.PID(2)}
	c.Shutdown(10 * time.Second)
	for i, pid := range pids {
		if pid == 0 || !gone(pid) {
			t.Fatalf("node %d pid %d not stopped by Shutdown", i, pid)
		}
	}
}

// TestAddJoinerArgs protects joiners' command lines: a new address and data
// dir, --join with the addresses of the nodes named (not --peers), the
// cluster's flags then its own; the initial nodes keep their --peers.
func TestAddJoinerArgs(t *testing.T) {
	addrs := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	c, err := New(Config{Binary: "concord", Dir: "/d", Addrs: addrs, ExtraArgs: []string{"--dead-after=3s"}})
	if err != nil {
		t.Fatal(err)
	}
	i, err := c.AddJoiner([]int{1, 0}, "--enable-fault-injection")
	if err != nil || i != 2 || c.N() != 3 {
		t.Fatalf("AddJoiner = %d, %v; N %d", i, err, c.N())
	}
	want := []string{"server", "--addr", c.Addr(2), "--data-dir", "/d/node3", "--join", "127.0.0.1:7002,127.0.0.1:7001",
		"--dead-after=3s", "--enable-fault-injection"}
	if got := c.Args(2); !slices.Equal(got, want) {
		t.Fatalf("joiner's Args:\n got %q\nwant %q", got, want)
	}
	if c.Addr(2) == addrs[0] || c.Addr(2) == addrs[1] || c.Index(c.Addr(2)) != 2 {
		t.Fatalf("joiner's address %s", c.Addr(2))
	}
	if got := c.Args(0); !slices.Contains(got, "--peers") || slices.Contains(got, c.Addr(2)) {
		t.Fatalf("an initial node's Args changed: %q", got)
	}
	if _, err := c.AddJoiner([]int{5}); err == nil {
		t.Fatal("AddJoiner through a node that does not exist succeeded")
	}
}

// TestSetNodeArgs: a node's own flags come after the cluster's, on that
// node alone, and setting none takes them away again.
func TestSetNodeArgs(t *testing.T) {
	c, err := New(Config{Binary: "concord", Dir: "/d", Addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002"}, ExtraArgs: []string{"--dead-after=3s"}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetNodeArgs(1, "--reserve-disk-bytes=5")
	if got := c.Args(1); !slices.Equal(got[len(got)-2:], []string{"--dead-after=3s", "--reserve-disk-bytes=5"}) {
		t.Fatalf("Args(1) = %q; want the cluster's flags, then the node's", got)
	}
	if got := c.Args(0); slices.Contains(got, "--reserve-disk-bytes=5") {
		t.Fatalf("another node got the flag: %q", got)
	}
	c.SetNodeArgs(1)
	if got := c.Args(1); slices.Contains(got, "--reserve-disk-bytes=5") {
		t.Fatalf("the flag stayed after SetNodeArgs with none: %q", got)
	}
}

func TestTLSArgs(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Binary: "concord", Dir: dir, Addrs: []string{"127.0.0.1:7001", "127.0.0.2:7002"}, TLS: true, AuthToken: "s3cret"}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "tls")
	want := []string{"--tls-cert", filepath.Join(tlsDir, "node.crt"), "--tls-key", filepath.Join(tlsDir, "node.key"),
		"--tls-ca", filepath.Join(tlsDir, "ca.crt"), "--auth-token-file", filepath.Join(dir, "auth-token")}
	if got := c.Args(1); !slices.Equal(got[len(got)-len(want):], want) {
		t.Fatalf("Args(1) ends %q, want %q", got, want)
	}
	if c.CAFile() != filepath.Join(tlsDir, "ca.crt") {
		t.Fatalf("CAFile %q", c.CAFile())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "auth-token")); err != nil || strings.TrimSpace(string(b)) != "s3cret" {
		t.Fatalf("token file %q, %v", b, err)
	}
	ca, err := os.ReadFile(c.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err != nil { // a second start reuses the certificates
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(c.CAFile()); string(again) != string(ca) {
		t.Fatal("a second New replaced the CA")
	}
	if plain, err := New(Config{Binary: "concord", Dir: t.TempDir(), Nodes: 1}); err != nil || plain.CAFile() != "" ||
		slices.Contains(plain.Args(0), "--tls-ca") {
		t.Fatalf("a cluster without TLS: CAFile %q, args %q, err %v", plain.CAFile(), plain.Args(0), err)
	}
}
