package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/client"
)

// respClientBase is the porcupine client id of the first RESP client: far
// above the gRPC clients' ids (0..len(clients), the last for the final
// reads), so a history's clients never share an id.
const respClientBase = 100

// respClient issues the workload's operations over the Redis protocol, to a
// node's main port (served through internal/portmux), a random node per
// operation. It has no session and go-redis does not retry (MaxRetries -1),
// so each command is sent once: a mutation whose reply is not a clear
// refusal is recorded as ambiguous.
type respClient struct {
	id    int
	nodes []*redis.Client

	recorded, ambiguous, failed atomic.Int64
}

func newRESPClient(id int, addrs []string, opTimeout time.Duration) *respClient {
	rc := &respClient{id: id}
	for _, a := range addrs {
		rc.nodes = append(rc.nodes, redis.NewClient(&redis.Options{
			Addr: a, MaxRetries: -1, PoolSize: 2, DialTimeout: opTimeout,
			ReadTimeout: opTimeout, WriteTimeout: opTimeout, ContextTimeoutEnabled: true,
		}))
	}
	return rc
}

func (rc *respClient) close() {
	for _, n := range rc.nodes {
		n.Close()
	}
}

// run issues operations until ctx ends, recording them in rec.
func (rc *respClient) run(ctx context.Context, w *workload) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(rc.id)))
	for n := 0; ctx.Err() == nil; n++ {
		k, keys := w.pick(rng)
		var in kvInput
		if keys != nil {
			in = nextRESPMulti(rng, fmt.Sprintf("r%d.%d", rc.id, n), keys)
		} else {
			in = rc.nextOp(rng, n, k)
		}
		node := rc.nodes[rc.pick(rng.IntN(len(rc.nodes)), w.members)]
		call := w.rec.begin(&in)
		out, err := rc.do(node, in, w.opTimeout)
		if w.rec.record(rc.id, call, in, out, err) {
			rc.recorded.Add(1)
		}
		switch {
		case err == nil:
		case errors.Is(err, client.ErrAmbiguous):
			rc.ambiguous.Add(1)
		default:
			rc.failed.Add(1)
		}
		if err != nil {
			// Without retries of its own, a client of a broken cluster
			// would fail as fast as it can send; pause as a client would.
			sleepCtx(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond)
		}
	}
}

// pick returns node i, or the next one after it that is not gone for good
// (a node killed to stay dead, or removed, only refuses connections).
func (rc *respClient) pick(i int, members *liveSet) int {
	for range rc.nodes {
		if !members.isGone(i) {
			return i
		}
		i = (i + 1) % len(rc.nodes)
	}
	return i
}

// nextOp picks an operation: 15% an expiry command (PEXPIRE, PERSIST,
// GETEX, ...: expire.go), 20% GET, 10% INCR (which a key's leader may merge with other
// connections' INCRs of the key into one op: INCR runs), 20% SET, 15%
// SET ... GET (SETs some with a TTL, pickTTL, some KEEPTTL, keepTTL), 10%
// DEL, 10% SET ... NX GET (a CAS expecting the key absent). Values SET
// here are not integers, so an INCR counts from a DEL or an absent key,
// or is refused.
func (rc *respClient) nextOp(rng *rand.Rand, n int, k string) kvInput {
	v := fmt.Sprintf("r%d.%d", rc.id, n)
	switch p := rng.IntN(100); {
	case p < 15:
		return nextRESPExpire(rng, k)
	case p < 35:
		return kvInput{Kind: opGet, Key: k}
	case p < 45:
		return kvInput{Kind: opIncr, Key: k}
	case p < 65:
		ttl := pickTTL(rng, ttlShare)
		return kvInput{Kind: opPut, Key: k, Value: v, Blind: true, TTLMs: ttl, KeepTTL: keepTTL(rng, ttl)}
	case p < 80:
		ttl := pickTTL(rng, ttlShare)
		return kvInput{Kind: opPut, Key: k, Value: v, TTLMs: ttl, KeepTTL: keepTTL(rng, ttl)}
	case p < 90:
		return kvInput{Kind: opDelete, Key: k}
	default:
		return kvInput{Kind: opCAS, Key: k, Value: v, Absent: true}
	}
}

// do runs in as one Redis command. An error wraps client.ErrAmbiguous when
// a mutation may have applied.
func (rc *respClient) do(node *redis.Client, in kvInput, timeout time.Duration) (kvOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out kvOutput
	var err error
	switch in.Kind {
	case opMGet, opMSet, opMDel, opMSetNX:
		out, err = doRESPMulti(ctx, node, in)
	case opExpire:
		out, err = doRESPExpire(ctx, node, in)
	case opGet:
		var v string
		v, err = node.Get(ctx, in.Key).Result()
		out = kvOutput{Ok: err == nil, Value: v}
	case opPut:
		if in.KeepTTL {
			out, err = respKeepTTLSet(ctx, node, in)
			break
		}
		// A TTL goes as SET ... PX (go-redis sends PX for a duration that
		// is not whole seconds, EX otherwise: either places the same time).
		ttl := time.Duration(in.TTLMs) * time.Millisecond
		if in.Blind {
			err = node.Set(ctx, in.Key, in.Value, ttl).Err()
			break
		}
		var prev string
		prev, err = node.SetArgs(ctx, in.Key, in.Value, redis.SetArgs{Get: true, TTL: ttl}).Result()
		out = kvOutput{Ok: err == nil, Value: prev}
	case opDelete:
		var n int64
		n, err = node.Del(ctx, in.Key).Result()
		out = kvOutput{Ok: n == 1}
	case opCAS:
		// SET NX GET answers the value before: nil when the key was
		// absent, and then the put was made.
		var prev string
		prev, err = node.SetArgs(ctx, in.Key, in.Value, redis.SetArgs{Mode: "NX", Get: true}).Result()
		out = kvOutput{Ok: errors.Is(err, redis.Nil), Exists: err == nil, Value: prev}
	case opIncr:
		var n int64
		n, err = node.Incr(ctx, in.Key).Result()
		out = kvOutput{Ok: err == nil, Value: strconv.FormatInt(n, 10)}
		if err != nil && strings.Contains(err.Error(), "not an integer") {
			err = nil // the state machine's answer: the value is not an integer, nothing changed
		}
	}
	if errors.Is(err, redis.Nil) {
		err = nil // absent: a valid answer, not a failure
	}
	return out, classify(in, err)
}

// classify marks a mutation's error as the recorder reads it: wrapping
// client.ErrNoSpace when the space alarm refused it (before proposing: a
// definite failure), client.ErrAmbiguous when it may have applied, and as
// it is when it certainly did not (refused).
func classify(in kvInput, err error) error {
	switch {
	case err == nil || in.Kind.isRead() || errors.Is(err, client.ErrNoSpace):
		return err
	case refusedForSpace(err):
		return fmt.Errorf("%w: %w", client.ErrNoSpace, err)
	case !refused(err):
		return fmt.Errorf("%w: %w", client.ErrAmbiguous, err)
	}
	return err
}

// refusedForSpace reports whether err is the space alarm's refusal,
// "-NOSPACE ..." (docs/redis.md), given before the command was proposed.
// Only that word: an error that merely mentions space is no refusal.
func refusedForSpace(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSPACE ")
}

// refused reports whether an error says for certain that the command was
// not applied: the node could not be dialled, the reply is an ERR reply
// (bad input; not an internal error), or an UNAVAILABLE one that names a
// refusal before proposing (the texts the Go client trusts,
// client.isRefusal). Anything else (AMBIGUOUS, a forward that may have
// arrived, a timeout, a broken connection) may have applied.
func refused(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true // no connection, so nothing was sent
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "ERR ") {
		return !strings.HasPrefix(msg, "ERR internal error")
	}
	if !strings.HasPrefix(msg, "UNAVAILABLE ") {
		return false
	}
	for _, s := range []string{"no leader known", "not the leader", "not initialized", "does not know the shard",
		"dropped by raft", "already forwarded", "no replica of the shard", "has no known address"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
