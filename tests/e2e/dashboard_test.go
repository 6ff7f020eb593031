package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/testcluster"
)

// chromium finds a headless-capable Chromium (Debian's, which `make test`
// installs when missing), or skips the test saying why.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on this machine (make test installs Debian's chromium with apt when it can; it could not here): the dashboard test needs a browser")
	return ""
}

// runChromium loads url headless, lets its scripts run for a few seconds
// of virtual time, and returns what it printed (the DOM with --dump-dom).
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=4000"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.Stderr = nil // Chromium is chatty on stderr about missing D-Bus and GPU
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return out
}

var (
	nodeRow  = regexp.MustCompile(`<tr data-node="(\d+)" data-state="(\w+)">`)
	shardRow = regexp.MustCompile(`<tr data-shard="(\d+)" data-leader="(\d+)"`)
	// shardSize is a shard row's size cell: the bytes /api/status gave,
	// and the text shown (as the CLI's SIZE column: internal/cli's
	// TestDashboardSizeLikeCLI checks the formatting).
	shardSize = regexp.MustCompile(`<tr data-shard="(\d+)"[^>]*>(?:<td>[^<]*</td>)*<td class="size" data-bytes="(\d+)">([^<]*)</td>`)
	sizeText  = regexp.MustCompile(`^\d+\.\d[KMG]$`)
)

// TestDashboard drives the dashboard in headless Chromium against a live
// 3-node cluster: its tables must show the cluster's real nodes, every
// shard's real leader and its size as /api/status gives it ("-": unknown).
// It saves a screenshot.
func TestDashboard(t *testing.T) {
	bin := chromium(t)
	c := startCluster(t, testcluster.Options{HTTP: true, Shards: 4})
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		if _, _, err := cl.Put(ctx, []byte(fmt.Sprintf("dash-%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	url := "http://" + c.HTTPAddr(1) + "/"

	// Leaders may move while the page loads (the balancer): compare only
	// shards whose leader was the same before and after, and retry until
	// a load sees them all settled.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		before := clusterStatus(t, cl)
		dom := runChromium(t, bin, "--dump-dom", url)
		after := clusterStatus(t, cl)
		if lastErr = checkDashboard(dom, before, after); lastErr == nil {
			break
		}
		t.Logf("attempt %d: %v", attempt+1, lastErr)
	}
	if lastErr != nil {
		t.Fatal(lastErr)
	}

	shot := filepath.Join(os.TempDir(), "concord-dashboard.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1400,1100", "--hide-scrollbars", url)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %v)", shot, err, fi)
	}
	t.Logf("dashboard screenshot saved to %s", shot)
}

func clusterStatus(t *testing.T, cl interface {
	Status(context.Context) (*concordpb.StatusResponse, error)
}) *concordpb.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// checkDashboard compares the rendered tables with the cluster's status.
func checkDashboard(dom []byte, before, after *concordpb.StatusResponse) error {
	nodes := map[uint64]string{}
	for _, m := range nodeRow.FindAllSubmatch(dom, -1) {
		id, _ := strconv.ParseUint(string(m[1]), 10, 64)
		nodes[id] = string(m[2])
	}
	if len(nodes) != len(after.GetNodes()) {
		return fmt.Errorf("dashboard shows %d nodes, the cluster has %d", len(nodes), len(after.GetNodes()))
	}
	for _, n := range after.GetNodes() {
		if got, ok := nodes[n.GetNode().GetNodeId()]; !ok || got != n.GetNode().GetState().String() {
			return fmt.Errorf("node %d: dashboard shows %q, status says %s", n.GetNode().GetNodeId(), got, n.GetNode().GetState())
		}
	}
	leaders := map[uint64]uint64{}
	for _, m := range shardRow.FindAllSubmatch(dom, -1) {
		id, _ := strconv.ParseUint(string(m[1]), 10, 64)
		l, _ := strconv.ParseUint(string(m[2]), 10, 64)
		leaders[id] = l
	}
	if len(leaders) != len(after.GetShards()) {
		return fmt.Errorf("dashboard shows %d shards, the cluster has %d", len(leaders), len(after.GetShards()))
	}
	was := map[uint64]uint64{}
	sizeWas := map[uint64]uint64{}
	for _, s := range before.GetShards() {
		was[s.GetShard().GetShardId()] = s.GetLeaderNodeId()
		sizeWas[s.GetShard().GetShardId()] = s.GetApproxBytes()
	}
	type size struct {
		bytes uint64
		text  string
	}
	sizes := map[uint64]size{}
	for _, m := range shardSize.FindAllSubmatch(dom, -1) {
		id, _ := strconv.ParseUint(string(m[1]), 10, 64)
		b, _ := strconv.ParseUint(string(m[2]), 10, 64)
		sizes[id] = size{b, string(m[3])}
	}
	for _, s := range after.GetShards() {
		id, l := s.GetShard().GetShardId(), s.GetLeaderNodeId()
		if l == 0 || was[id] != l {
			return fmt.Errorf("shard %d's leader moved while the page loaded (%d → %d)", id, was[id], l)
		}
		if leaders[id] != l {
			return fmt.Errorf("shard %d: dashboard shows leader %d, status says %d", id, leaders[id], l)
		}
		// Sizes are measured every 10 s: the page's may be either.
		sz, ok := sizes[id]
		switch {
		case !ok:
			return fmt.Errorf("shard %d: no size cell", id)
		case sz.bytes != s.GetApproxBytes() && sz.bytes != sizeWas[id]:
			return fmt.Errorf("shard %d: dashboard shows %d bytes, status says %d, then %d", id, sz.bytes, sizeWas[id], s.GetApproxBytes())
		case sz.bytes == 0 && sz.text != "-", sz.bytes != 0 && !sizeText.MatchString(sz.text):
			return fmt.Errorf("shard %d: %d bytes shown as %q, want - for 0, else like 12.3M", id, sz.bytes, sz.text)
		}
	}
	return nil
}
