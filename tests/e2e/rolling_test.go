package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
	"github.com/concord-kv/concord/internal/version"
)

// TestRollingRestart follows docs/operations.md's rolling restart under a
// client workload, with TLS on every port: each node in turn gets SIGTERM (it hands its
// leaderships away first), is started again, and the next waits until its
// /readyz answers 200. Every write must succeed from the client's point of
// view (its retries absorb the moves) and every acknowledged write must be
// readable at the end.
func TestRollingRestart(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 4, HTTP: true, TLS: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		acked  sync.Map // key -> value
		nAcked atomic.Int64
		errs   []error
		errMu  sync.Mutex
		wg     sync.WaitGroup
	)
	for w := range 4 {
		cl := c.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k, v := fmt.Sprintf("roll-%d-%d", w, i), fmt.Sprintf("v%d", i)
				octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
				_, _, err := cl.Put(octx, []byte(k), []byte(v))
				ocancel()
				switch {
				case err == nil:
					acked.Store(k, v)
					nAcked.Add(1)
				case ctx.Err() == nil:
					errMu.Lock()
					errs = append(errs, fmt.Errorf("put %s: %w", k, err))
					errMu.Unlock()
				}
			}
		}()
	}
	waitAcked := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(readyTimeout)
		for nAcked.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the workload stalled at %d acknowledged writes", nAcked.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAcked(100)
	for i := range c.N() {
		c.Stop(i) // SIGTERM; the test fails unless the node exits 0
		c.Start(i)
		awaitHTTPReady(t, c.HTTPClient(), c.HTTPURL(i, "/readyz"))
		t.Logf("node %d restarted and ready; %d writes acknowledged so far", i, nAcked.Load())
		waitAcked(nAcked.Load() + 50) // the cluster takes writes again before the next node goes
	}
	cancel()
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}

	cl := c.Client(t)
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer rcancel()
	checked := 0
	acked.Range(func(k, v any) bool {
		got, found, err := cl.Get(rctx, []byte(k.(string)))
		if err != nil || !found || string(got) != v.(string) {
			t.Errorf("acknowledged %s=%s reads %q found=%v err=%v", k, v, got, found, err)
			return false
		}
		checked++
		return true
	})
	t.Logf("%d acknowledged writes read back, %d client errors", checked, len(errs))

	// Every node runs this binary, before and after its restart: the
	// cluster version is this binary's, and every node reports it.
	testcluster.WaitFor(t, readyTimeout, func() error {
		st, err := placementStatus(c)
		if err != nil {
			return err
		}
		if st.GetClusterVersion() != uint32(version.Binary) {
			return fmt.Errorf("cluster version %d, want %d", st.GetClusterVersion(), version.Binary)
		}
		for _, ns := range st.GetNodes() {
			if ns.GetVersion() != uint32(version.Binary) {
				return fmt.Errorf("node %d reports version %d, want %d", ns.GetNode().GetNodeId(), ns.GetVersion(), version.Binary)
			}
		}
		return nil
	})
}

// awaitHTTPReady polls a /readyz URL until it answers 200.
func awaitHTTPReady(t *testing.T, hc *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not 200 after %v (last: %v)", url, readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
