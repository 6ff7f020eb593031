package cli

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/localcluster"
)

// TestClusterUpCommandLine pins what `cluster up` runs: consecutive ports
// from --base-port, data dirs DATA/node1..., and the server flags it has
// always passed.
func TestClusterUpCommandLine(t *testing.T) {
	f := clusterUpFlags{nodes: 3, basePort: 7001, httpBasePort: 8001, shards: 16, replicas: 3, dataDir: "./data", host: "127.0.0.1",
		supervise: true, faults: true, restartDelay: time.Second, extra: []string{"--log-level=debug"}}
	cfg := upConfig(f, "/bin/concord")
	c, err := localcluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	peers := "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
	want := []string{"server", "--addr", "127.0.0.1:7002", "--data-dir", "data/node2", "--peers", peers,
		"--shards", "16", "--replicas", "3", "--enable-fault-injection", "--http-addr", "127.0.0.1:8002", "--log-level=debug"}
	if got := c.Args(1); !slices.Equal(got, want) {
		t.Fatalf("node 2's command line:\n got %q\nwant %q", got, want)
	}
	if !cfg.Supervise || cfg.RestartDelay != time.Second || cfg.Binary != "/bin/concord" {
		t.Fatalf("supervision or binary not passed on: %+v", cfg)
	}
}

// TestClusterUpEndsWhenEveryNodeExited: without --supervise, `cluster up`
// whose nodes all exit by themselves (here a binary that fails at once,
// as a node does on a flag it cannot take or a port in use) fails instead
// of running on with no node until Ctrl-C, and exiting 0 then.
func TestClusterUpEndsWhenEveryNodeExited(t *testing.T) {
	fail, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1) binary to stand for a node that fails at start")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	f := clusterUpFlags{nodes: 2, basePort: port, shards: 1, replicas: 1, dataDir: t.TempDir(), host: "127.0.0.1"}
	// The deadline stands for the Ctrl-C that the command waited for.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = runClusterUp(ctx, f, fail)
	if ctx.Err() != nil {
		t.Fatalf("cluster up ran on until it was stopped (err %v), with every node gone", err)
	}
	if err == nil || !strings.Contains(err.Error(), "every node exited") {
		t.Fatalf("cluster up whose nodes all failed: err = %v, want one saying every node exited", err)
	}
}

// TestClusterUpBannerCountsNodes: the banner counts the nodes in words that
// fit the count: "Concord cluster of 1 node" (before: "of 1 nodes").
func TestClusterUpBannerCountsNodes(t *testing.T) {
	fail, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1) binary to stand for the nodes")
	}
	for _, tc := range []struct {
		nodes int
		want  string
	}{
		{1, "Concord cluster of 1 node is starting"},
		{2, "Concord cluster of 2 nodes is starting"},
	} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := lis.Addr().(*net.TCPAddr).Port
		lis.Close()
		f := clusterUpFlags{nodes: tc.nodes, basePort: port, shards: 1, replicas: 1, dataDir: t.TempDir(), host: "127.0.0.1"}
		c, err := localcluster.Start(upConfig(f, fail))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		printBanner(&out, f, c)
		c.Shutdown(10 * time.Second)
		if first, _, _ := strings.Cut(out.String(), "\n"); !strings.HasPrefix(first, tc.want) {
			t.Errorf("--nodes %d: banner starts %q, want %q", tc.nodes, first, tc.want)
		}
	}
}
