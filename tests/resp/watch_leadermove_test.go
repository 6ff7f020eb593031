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
	k := "wlm:counter"
	const clients, target, minMoves, perMove = 6, 150, 4, 10

	var ok, aborted, ambiguous, refused atomic.Int64
	var moves atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		rc := client(t, c, i%c.N())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ok.Load() < target || moves.Load() < minMoves {
				select {
				case <-done:
					return
				default:
				}
				switch err := incrementWatched(ctx, rc, k); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, redis.TxFailedErr):
					aborted.Add(1)
				case strings.HasPrefix(err.Error(), "AMBIGUOUS"):
					ambiguous.Add(1)
				case strings.HasPrefix(err.Error(), "UNAVAILABLE"):
					refused.Add(1) // not applied (a write that may have is AMBIGUOUS): try again
				case ctx.Err() != nil:
					return
				default:
					t.Errorf("client %d: %v", i, err)
					return
				}
			}
		}()
	}
	moveLeaderWhileCounting(t, ctx, c, k, &ok, &moves, minMoves, perMove, &wg, done)
	wg.Wait()
	if t.Failed() {
		return
	}

	final, err := client(t, c, 0).Get(ctx, k).Int64()
	if err != nil {
		t.Fatalf("GET %s: %v", k, err)
	}
	t.Logf("%d EXECs applied, %d aborted by WATCH, %d ambiguous, %d refused; %d leader moves; counter %d",
		ok.Load(), aborted.Load(), ambiguous.Load(), refused.Load(), moves.Load(), final)
	if final < ok.Load() || final > ok.Load()+ambiguous.Load() {
		t.Fatalf("counter = %d after %d applied EXECs and %d ambiguous ones: increments were lost or doubled",
			final, ok.Load(), ambiguous.Load())
	}
	if aborted.Load() == 0 {
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

// moveLeaderWhileCounting hands the leadership of key's shard to another
// voter, then waits for perMove more applied EXECs (or the clients to
// stop), until the clients stop; it fails the test if fewer than minMoves
// moves succeeded by then, and closes done when it returns.
func moveLeaderWhileCounting(t *testing.T, ctx context.Context, c *testcluster.Cluster, key string,
	ok, moves *atomic.Int64, minMoves, perMove int64, clients *sync.WaitGroup, done chan struct{}) {
	t.Helper()
	defer close(done)
	stopped := make(chan struct{})
	go func() { clients.Wait(); close(stopped) }()
	shard := routingTable(t, c).Lookup([]byte(key)).GetShardId()
	cl := c.Client(t)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for attempt := 0; ; attempt++ {
		if moveLeaderOnce(ctx, c, cl, shard, attempt) {
			moves.Add(1)
		}
		// Let the clients work under this leader before the next move.
		for since := ok.Load(); ok.Load() < since+perMove; {
			select {
			case <-stopped:
				if moves.Load() < minMoves {
					t.Errorf("only %d leader moves succeeded", moves.Load())
				}
				return
			case <-ctx.Done():
				t.Errorf("timed out: %d applied EXECs, %d leader moves", ok.Load(), moves.Load())
				return
			case <-tick.C:
			}
		}
	}
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
