package resp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestConcurrentPipelinesMerge protects the merging of write batches from
// different connections into one raft entry (at the shard's leader, and
// forwarded from the other nodes): many connections on every node pipeline
// writes at once, to keys of their own and to one shared counter, so that
// their batches meet in the merge queues. Every reply must still be the
// command's own and in order (APPEND's lengths and GETs follow the
// connection's earlier writes), INCR must stay atomic per key (the shared
// counter ends at the number of INCRs, each connection sees it grow), and
// a command that fails on its own (INCR of a string, a TTL that overflows)
// fails alone. (A TTL the shard's clock cannot place was refused whole by
// the state machine, which made the merged proposal go again part by part;
// the node now refuses it first, as Redis does, so that path is covered by
// internal/grpcapi's proposemerge_test.go and writemerge_test.go.)
func TestConcurrentPipelinesMerge(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t)
	const conns, rounds, sets = 6, 12, 12 // per node
	var wg sync.WaitGroup
	errs := make(chan error, 3*conns)
	for node := range 3 {
		rc := client(t, c, node, func(o *redis.Options) { o.PoolSize = conns })
		for g := range conns {
			id := fmt.Sprintf("%d.%d", node, g)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- mergedPipelines(rc, id, rounds, sets)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	total := must(client(t, c, 0).Get(ctx, "merge:ctr").Int())(t, "GET merge:ctr")
	if want := 3 * conns * rounds * 2; total != want {
		t.Fatalf("shared counter = %d after %d INCRs: an increment was lost or doubled", total, want)
	}
}

// mergedPipelines runs rounds pipelines on one connection of rc and checks
// each reply against what running the commands one by one would answer.
func mergedPipelines(rc *redis.Client, id string, rounds, sets int) error {
	ctx := context.Background()
	key := func(j int) string { return fmt.Sprintf("merge:%s:k%d", id, j%4) }
	logKey, strKey := "merge:"+id+":log", "merge:"+id+":str"
	if err := rc.Set(ctx, strKey, "text", 0).Err(); err != nil {
		return err
	}
	logLen, lastCtr := 0, int64(0)
	for r := range rounds {
		pipe := rc.Pipeline()
		var setCmds []*redis.StatusCmd
		var appends []*redis.IntCmd
		var ctrs []*redis.IntCmd
		for j := range sets {
			setCmds = append(setCmds, pipe.Set(ctx, key(j), fmt.Sprintf("%d-%d", r, j), 0))
			appends = append(appends, pipe.Append(ctx, logKey, fmt.Sprintf("[%d-%d]", r, j)))
			if j == 0 || j == sets/2 {
				ctrs = append(ctrs, pipe.Incr(ctx, "merge:ctr"))
			}
		}
		notInt := pipe.Incr(ctx, strKey)
		// Refused before proposing, as Redis refuses it (now + the TTL
		// overflows): the others' replies must not change.
		badTTL := pipe.Do(ctx, "SET", "merge:"+id+":bad", "v", "PX", "9223372036854775000")
		get := pipe.Get(ctx, key(sets-1))
		_, _ = pipe.Exec(ctx) // the errors are the commands' own, checked below
		for j, s := range setCmds {
			if s.Err() != nil || s.Val() != "OK" {
				return fmt.Errorf("%s round %d: SET %d = %q, %v", id, r, j, s.Val(), s.Err())
			}
		}
		for j, a := range appends {
			logLen += len(fmt.Sprintf("[%d-%d]", r, j))
			if a.Err() != nil || a.Val() != int64(logLen) {
				return fmt.Errorf("%s round %d: APPEND %d = %d, %v; want %d (the connection's appends in order)", id, r, j, a.Val(), a.Err(), logLen)
			}
		}
		for _, ctr := range ctrs {
			if ctr.Err() != nil || ctr.Val() <= lastCtr {
				return fmt.Errorf("%s round %d: INCR of the shared counter = %d, %v after %d: not increasing", id, r, ctr.Val(), ctr.Err(), lastCtr)
			}
			lastCtr = ctr.Val()
		}
		if err := notInt.Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR value is not an integer") {
			return fmt.Errorf("%s round %d: INCR of a string: %v, want ERR value is not an integer", id, r, err)
		}
		if err := badTTL.Err(); err == nil || err.Error() != "ERR invalid expire time in 'set' command" {
			return fmt.Errorf("%s round %d: SET with an overflowing PX: %v, want ERR invalid expire time in 'set' command", id, r, err)
		}
		if want := fmt.Sprintf("%d-%d", r, sets-1); get.Val() != want {
			return fmt.Errorf("%s round %d: GET after the pipeline's SET = %q, %v; want %q", id, r, get.Val(), get.Err(), want)
		}
	}
	var want strings.Builder
	for r := range rounds {
		for j := range sets {
			fmt.Fprintf(&want, "[%d-%d]", r, j)
		}
	}
	if got, err := rc.Get(ctx, logKey).Result(); err != nil || got != want.String() {
		return fmt.Errorf("%s: log = %q, %v; want the appends in order %q", id, got, err, want.String())
	}
	return nil
}
