package cli

import (
	"slices"
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
