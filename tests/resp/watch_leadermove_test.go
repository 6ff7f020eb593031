package resp

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	concord "github.com/concord-kv/concord/client"
	"github.com/concord-kv/concord/internal/testcluster"
)

// TestWatchCounterUnderLeaderMoves: WATCH's optimistic lock holds while
// the leadership of the counter's shard moves. Clients on every node loop
// WATCH k, GET k, MULTI, SET k n+1, EXEC; a mover hands the shard's
// leadership to another voter again and again while they run, so WATCHes
// read from one leader and EXECs apply under the next, forwarded or not.
// The counter must end at exactly the number of EXECs that answered an
// array: an EXEC applied over a change it did not see (a check that let a
// stale write through) loses an increment, one applied twice or answered
// null after it applied adds one. An EXEC answered AMBIGUOUS may have
// applied: each may account for one increment, no more.
func TestWatchCounterUnderLeaderMoves(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	const k = "wlm:counter"
	tally := startCounterClients(t, ctx, c, k)
	shard := routingTable(t, c).Lookup([]byte(k)).GetShardId()
	cl := c.Client(t)
	moves := 0
	for attempt := 0; moves < 12; attempt++ {
		if moveLeaderOnce(ctx, c, cl, shard, attempt) {
			moves++
		}
		tally.await(t, ctx, 10) // the clients work under this leader before the next move
	}
	tally.stopAndCheck(t, ctx, c, k)
	t.Logf("%d leader moves", moves)
}

// TestWatchCounterUnderLeaderCrashes: the same optimistic counter while
// the leader of the counter's shard is killed (SIGKILL) and restarted,
// three times. A client whose node dies or whose EXEC meets the crash
// does not know whether that EXEC applied: each such error may account
// for one increment, no more, and the applied EXECs for one each.
func TestWatchCounterUnderLeaderCrashes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	const k = "wlc:counter"
	tally := startCounterClients(t, ctx, c, k)
	shard := routingTable(t, c).Lookup([]byte(k)).GetShardId()
	for range 3 {
		tally.await(t, ctx, 20)
		l := c.LeaderOf(t, shard, 30*time.Second)
		c.Kill(l)
		tally.await(t, ctx, 20) // through the new leader
		c.Start(l)
	}
	tally.await(t, ctx, 20)
	tally.stopAndCheck(t, ctx, c, k)
}

// counterTally counts the outcomes of the clients' increments.
type counterTally struct {
	ok, aborted, unknown, refused atomic.Int64
	stop                          chan struct{}
	wg                            sync.WaitGroup
}

// startCounterClients starts six clients, two per node, each incrementing
// k with WATCH until stopAndCheck.
func startCounterClients(t *testing.T, ctx context.Context, c *testcluster.Cluster, k string) *counterTally {
	tl := &counterTally{stop: make(chan struct{})}
	for i := range 6 {
		rc := client(t, c, i%c.N(), func(o *redis.Options) { o.ReadTimeout, o.DialTimeout = 5*time.Second, time.Second })
		tl.wg.Add(1)
		go func() {
			defer tl.wg.Done()
			for ctx.Err() == nil {
				select {
				case <-tl.stop:
					return
				default:
				}
				tl.count(incrementWatched(ctx, rc, k))
			}
		}()
	}
	return tl
}

// count tallies one increment's outcome.
func (tl *counterTally) count(err error) {
	switch {
	case err == nil:
		tl.ok.Add(1)
	case errors.Is(err, redis.TxFailedErr):
		tl.aborted.Add(1)
	case strings.HasPrefix(err.Error(), "UNAVAILABLE"):
		tl.refused.Add(1)                 // not applied: a write that may have is AMBIGUOUS
		time.Sleep(10 * time.Millisecond) // not a spin while the shard elects
	default:
		// AMBIGUOUS, or a connection that broke (its node died): the
		// EXEC, if it was sent, may have applied.
		tl.unknown.Add(1)
		time.Sleep(10 * time.Millisecond) // not a spin while the node is down
	}
}

// await polls until n more EXECs have applied.
func (tl *counterTally) await(t *testing.T, ctx context.Context, n int64) {
	t.Helper()
	for target := tl.ok.Load() + n; tl.ok.Load() < target; {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %d applied EXECs (%d so far)", n, tl.ok.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopAndCheck stops the clients and checks the counter against them.
func (tl *counterTally) stopAndCheck(t *testing.T, ctx context.Context, c *testcluster.Cluster, k string) {
	t.Helper()
	close(tl.stop)
	tl.wg.Wait()
	final, err := client(t, c, 0).Get(ctx, k).Int64()
	if err != nil {
		t.Fatalf("GET %s: %v", k, err)
	}
	ok, unknown := tl.ok.Load(), tl.unknown.Load()
	t.Logf("%d EXECs applied, %d aborted by WATCH, %d of unknown outcome, %d refused; counter %d",
		ok, tl.aborted.Load(), unknown, tl.refused.Load(), final)
	if final < ok || final > ok+unknown {
		t.Fatalf("counter = %d after %d applied EXECs and %d of unknown outcome: increments were lost or doubled", final, ok, unknown)
	}
	if tl.aborted.Load() == 0 {
		t.Fatalf("no EXEC was aborted by WATCH: the clients did not race")
	}
}

// incrementWatched is one optimistic increment of k: WATCH k, GET k,
// MULTI, SET k n+1, EXEC on one connection. nil when EXEC applied it,
// redis.TxFailedErr when EXEC answered null.
func incrementWatched(ctx context.Context, rc *redis.Client, k string) error {
	return rc.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, k).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, k, strconv.FormatInt(n+1, 10), 0)
			return nil
		})
		return err
	}, k)
}

// moveLeaderOnce asks shard's leader to hand its leadership to one of the
// other voters (which one turns with attempt) and reports whether it did.
func moveLeaderOnce(ctx context.Context, c *testcluster.Cluster, cl *concord.Client, shard uint64, attempt int) bool {
	rt, err := c.RoutingTable(ctx, attempt%c.N())
	if err != nil {
		return false
	}
	for _, sr := range rt.GetShards() {
		if sr.GetShard().GetShardId() != shard {
			continue
		}
		var others []uint64
		for _, r := range sr.GetShard().GetReplicas() {
			if r.GetNodeId() != sr.GetLeaderNodeId() {
				others = append(others, r.GetNodeId())
			}
		}
		if len(others) == 0 {
			return false
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := cl.TransferLeader(tctx, shard, others[attempt%len(others)])
		return err == nil
	}
	return false
}
