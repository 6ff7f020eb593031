package multiraftest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/multiraft/multiraftest"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
)

// getFrom reads key of shard 1 from a linearizable read's view.
func getFrom(t *testing.T, v *storage.ReadView, key string) (string, bool) {
	t.Helper()
	var val []byte
	var found bool
	if err := v.Read(func(r storage.Reader) (err error) {
		val, _, found, err = kv.Get(r, 1, []byte(key), 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return string(val), found
}

// removeLeaderReplica replaces the leader's replica of shard 1 by one on a
// new node, in the background, and returns its outcome's channel.
func removeLeaderReplica(c *multiraftest.Cluster, leader ids.NodeID) chan error {
	added := c.AddNode()
	h := c.Node(leader).Host
	changed := make(chan error, 1)
	go func() {
		_, err := h.ChangeReplicas(context.Background(), 1, ids.ReplicaID(leader), added) // initial replica ids are node ids
		changed <- err
	}()
	return changed
}

// TestReadReleasedBeforeItsReplicaIsRemoved protects linearizable reads
// against the removal of their replica: a read is released on the leader
// (its index applied), but the goroutine serving it runs only after the
// leader's replica has been removed and its data destroyed. It must still
// read the value, from the state it was released at, never "not found".
// Once the replica is gone, a new read fails cleanly.
func TestReadReleasedBeforeItsReplicaIsRemoved(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	type result struct {
		v   *storage.ReadView
		err error
	}
	done := make(chan result, 1)
	go func() { v, err := h.ReadIndex(context.Background(), 1); done <- result{v, err} }()
	c.RunUntil("the read", 100, func() bool { return len(done) > 0 })
	rd := <-done
	if rd.err != nil {
		t.Fatalf("ReadIndex on the leader: %v", rd.err)
	}
	removeLeaderReplica(c, leader)
	c.RunUntil("the leader's replica to be destroyed", 500, func() bool { _, ok := h.Info(1); return !ok })
	if _, found := c.Get(leader, "k"); found {
		t.Fatal("the removed replica's data is still in the engine; the test proves nothing")
	}
	if v, found := getFrom(t, rd.v, "k"); !found || v != "v" {
		t.Fatalf("a read released before its replica was removed read found=%v %q, want \"v\"", found, v)
	}
	rd.v.Release()
	if _, err := h.ReadIndex(context.Background(), 1); !errors.Is(err, multiraft.ErrNoReplica) {
		t.Fatalf("ReadIndex after the replica was removed: %v, want ErrNoReplica", err)
	}
}

// TestReadsWhileTheLeaderIsRemoved protects the same with reads racing the
// removal: readers loop on the leader while its replica is replaced; each
// read either fails cleanly (not leader, removed, no replica) or finds the
// value, whether it reads at once or only after the replica is destroyed
// (some read in the very loop turn that applies the removal).
func TestReadsWhileTheLeaderIsRemoved(t *testing.T) {
	c := multiraftest.New(t, multiraftest.Options{})
	leader := c.WaitLeader(1)
	c.Put("k", "v")
	h := c.Node(leader).Host
	gone := func() bool { _, ok := h.Info(1); return !ok }
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		late    []*storage.ReadView // read after the replica is destroyed
		served  int
		badErrs []error
	)
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := h.ReadIndex(context.Background(), 1)
				var nl *replica.NotLeaderError
				switch {
				case err == nil:
				case errors.Is(err, multiraft.ErrNoReplica):
					return // the replica is gone
				case errors.As(err, &nl), errors.Is(err, replica.ErrRemoved):
					continue
				default:
					mu.Lock()
					badErrs = append(badErrs, err)
					mu.Unlock()
					continue
				}
				mu.Lock()
				served++
				if i%2 == 0 {
					late = append(late, v)
					mu.Unlock()
					continue
				}
				mu.Unlock()
				if val, found := getFrom(t, v, "k"); !found || val != "v" {
					t.Errorf("read on the leader during its removal: found=%v %q, want \"v\"", found, val)
				}
				v.Release()
			}
		}()
	}
	changed := removeLeaderReplica(c, leader)
	c.RunUntil("the leader's replica to be destroyed", 500, func() bool { return len(changed) > 0 && gone() })
	close(stop)
	wg.Wait()
	if err := <-changed; err != nil {
		t.Fatalf("ChangeReplicas: %v", err)
	}
	for _, v := range late {
		if val, found := getFrom(t, v, "k"); !found || val != "v" {
			t.Fatalf("read released before the removal, run after it: found=%v %q, want \"v\"", found, val)
		}
		v.Release()
	}
	if len(badErrs) > 0 {
		t.Fatalf("reads failed with %v, want only clean refusals", badErrs)
	}
	if served == 0 || len(late) == 0 {
		t.Fatalf("%d reads served (%d read late): the test proves nothing", served, len(late))
	}
	t.Logf("%d reads served, %d of them read after the replica was destroyed", served, len(late))
}
