package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

// concordCLI runs the real binary's client verb against c and returns its
// output and exit status.
func concordCLI(t *testing.T, c *testcluster.Cluster, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--endpoints", strings.Join(c.Endpoints(), ","))
	out, err := exec.CommandContext(ctx, testcluster.Binary(t), args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("concord %v: %v, output %q", args, err, out)
	return "", 0
}

// TestPutTTLThroughCLI: `concord put --ttl` stores a key that `concord get`
// shows with its expiry (--output json) until the expiry passes, and as not
// found from then on; the Go client and a scan, on every node and with
// stale reads, agree.
func TestPutTTLThroughCLI(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	const ttl = 6 * time.Second
	before := time.Now()
	if out, code := concordCLI(t, c, "put", "ttl-key", "v", "--ttl", ttl.String()); code != 0 || strings.TrimSpace(out) != "OK" {
		t.Fatalf("concord put --ttl: exit %d, %q", code, out)
	}
	after := time.Now()
	out, code := concordCLI(t, c, "get", "ttl-key", "-o", "json")
	readAt := time.Now()
	var got struct {
		Found    bool   `json:"found"`
		Value    string `json:"value"`
		ExpireAt int64  `json:"expire_at_unix_ms"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("concord get -o json: %v in %q", err, out)
	}
	// The expiry is decided by the leader's clock (this machine's) between
	// the put's start and end, within a second of slack for clock rounding.
	lo, hi := before.Add(ttl).Add(-time.Second).UnixMilli(), after.Add(ttl).Add(time.Second).UnixMilli()
	if got.ExpireAt < lo || got.ExpireAt > hi {
		t.Fatalf("expire_at_unix_ms %d, want within [%d, %d]", got.ExpireAt, lo, hi)
	}
	expireAt := time.UnixMilli(got.ExpireAt)
	if readAt.Before(expireAt) && (code != 0 || !got.Found || got.Value != "v") {
		t.Fatalf("concord get before the expiry: exit %d, %q", code, out)
	}
	cl := c.Client(t)
	ctx := context.Background()
	if v, at, found, err := cl.GetWithExpiry(ctx, []byte("ttl-key")); time.Now().Before(expireAt) &&
		(err != nil || !found || string(v) != "v" || !at.Equal(expireAt)) {
		t.Fatalf("client GetWithExpiry before the expiry = %q, %v, %v, %v", v, at, found, err)
	}

	// After the expiry: absent through the CLI, on every node's stale
	// replica, and in scans.
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if time.Now().Before(expireAt) {
			return fmt.Errorf("not expired yet")
		}
		return nil
	})
	if out, code := concordCLI(t, c, "get", "ttl-key"); code != 1 || strings.TrimSpace(out) != "not found" {
		t.Fatalf("concord get after the expiry: exit %d, %q; want not found, exit 1", code, out)
	}
	for i := range c.N() {
		if _, found, err := c.NodeClient(t, i).Get(ctx, []byte("ttl-key"), client.Stale()); err != nil || found {
			t.Fatalf("stale get on node %d after the expiry: found %v, %v", i, found, err)
		}
	}
	kvs, err := cl.Scan(ctx, []byte("ttl-"), []byte("ttl."), 0)
	if err != nil || len(kvs) != 0 {
		t.Fatalf("scan after the expiry = %v, %v; want nothing", kvs, err)
	}
	if out, code := concordCLI(t, c, "put", "ttl-key", "v", "--ttl", "0s"); code == 0 {
		t.Fatalf("concord put --ttl 0s succeeded: %q", out)
	}
}

// TestIncrIsAtomic: INCR through gRPC Batch on one key from several
// goroutines (each its own client: its own session and connections) adds
// up to exactly the number of increments.
func TestIncrIsAtomic(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	const workers, each = 6, 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		cl := c.NodeClient(t, w%c.N()) // a client (and session) per worker
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				res, err := cl.Batch(ctx, []*concordpb.Op{{Type: concordpb.OpType_OP_INCR, Key: []byte("counter"), IntDelta: 1}})
				if err == nil && res[0].GetError() != 0 {
					err = fmt.Errorf("INCR failed: %v", res[0].GetError())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, found, err := c.Client(t).Get(ctx, []byte("counter"))
	if err != nil || !found || string(v) != fmt.Sprint(workers*each) {
		t.Fatalf("counter = %q, %v, %v; want %d", v, found, err, workers*each)
	}
}
