package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/client"
)

// groupShare is the percentage of each client's operations that go to a
// group's keys (groups.go): a third of those are single-key operations on
// one member, the rest multi-key operations over two or three members
// (about 10 % of all), so the single-key coverage stays what it was.
const groupShare = 15

// groupTags are the workload's groups: two, so that an operation on one
// group is no evidence about the other.
var groupTags = []string{"g0", "g1"}

// pick chooses what the next operation acts on: one key (key), or keys of
// one group for a multi-key operation (keys, distinct, in random order).
func (w *workload) pick(rng *rand.Rand) (key string, keys []string) {
	if rng.IntN(100) >= groupShare || len(w.groups) == 0 {
		return w.keys[rng.IntN(len(w.keys))], nil
	}
	g := w.groups[rng.IntN(len(w.groups))]
	if rng.IntN(3) == 0 {
		return g[rng.IntN(len(g))], nil
	}
	perm := rng.Perm(len(g))[:2+rng.IntN(len(g)-1)]
	for _, i := range perm {
		keys = append(keys, g[i])
	}
	return "", keys
}

// multiValues are the values a multi-key write of op v puts: one per key,
// each naming its key, so that a value put under the wrong key shows.
func multiValues(v string, keys []string) []string {
	vals := make([]string, len(keys))
	for j, k := range keys {
		vals[j] = v + "@" + k
	}
	return vals
}

// nextGRPCMulti picks a gRPC multi-key operation, a Batch over keys: 40 %
// gets, 40 % puts returning each previous value (some with a TTL, one for
// every key: pickTTL), 20 % deletes.
func nextGRPCMulti(rng *rand.Rand, v string, keys []string) kvInput {
	switch p := rng.IntN(100); {
	case p < 40:
		return kvInput{Kind: opMGet, Keys: keys}
	case p < 80:
		return kvInput{Kind: opMSet, Keys: keys, Values: multiValues(v, keys), TTLMs: pickTTL(rng, multiTTLShare)}
	default:
		return kvInput{Kind: opMDel, Keys: keys}
	}
}

// nextRESPMulti picks a Redis multi-key command over keys: 15 % MGET, 15 %
// MULTI/EXEC of GETs, 20 % MSET (blind), 20 % MULTI/EXEC of SET ... GETs
// (some SET ... PX ... GETs, one TTL for every key: pickTTL), 15 % DEL
// (answers a count), 15 % MSETNX.
func nextRESPMulti(rng *rand.Rand, v string, keys []string) kvInput {
	switch p := rng.IntN(100); {
	case p < 15:
		return kvInput{Kind: opMGet, Keys: keys}
	case p < 30:
		return kvInput{Kind: opMGet, Keys: keys, Tx: true}
	case p < 50:
		return kvInput{Kind: opMSet, Keys: keys, Values: multiValues(v, keys), Blind: true}
	case p < 70:
		return kvInput{Kind: opMSet, Keys: keys, Values: multiValues(v, keys), Tx: true, TTLMs: pickTTL(rng, multiTTLShare)}
	case p < 85:
		return kvInput{Kind: opMDel, Keys: keys, CountOnly: true}
	default:
		return kvInput{Kind: opMSetNX, Keys: keys, Values: multiValues(v, keys)}
	}
}

// doBatch runs a multi-key operation as one gRPC Batch: atomic, since the
// keys share a shard. A result count that does not match goes into the
// history as it came (the checker rejects it); an op that failed alone
// (none of these should) may leave the others applied, which the model
// cannot express, so the batch counts as ambiguous, or, a read, as failed.
func doBatch(ctx context.Context, c *client.Client, in kvInput) (kvOutput, error) {
	ops := make([]*concordpb.Op, len(in.Keys))
	for j, k := range in.Keys {
		ops[j] = &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: []byte(k)}
		switch in.Kind {
		case opMSet:
			ops[j] = &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(in.Values[j]), ReturnPrev: true, TtlMs: in.TTLMs}
		case opMDel:
			ops[j].Type = concordpb.OpType_OP_DELETE
		}
	}
	res, err := c.Batch(ctx, ops)
	if err != nil {
		return kvOutput{}, err
	}
	out := kvOutput{Multi: make([]kvState, len(res))}
	for j, r := range res {
		if r.GetError() != concordpb.OpError_OP_ERROR_NONE {
			return kvOutput{}, fmt.Errorf("%w: op %d of the batch failed alone: %v", client.ErrAmbiguous, j, r.GetError())
		}
		// GET: ok is found; PUT with return_prev: ok is "a previous value
		// existed"; DELETE: ok is "existed".
		out.Multi[j] = keyState(r.GetOk(), string(r.GetValue()))
	}
	return out, nil
}

// doRESPMulti runs a multi-key operation as one Redis command, or as one
// MULTI/EXEC transaction (in.Tx). Errors are classified by the caller.
func doRESPMulti(ctx context.Context, node *redis.Client, in kvInput) (kvOutput, error) {
	pairs := make([]interface{}, 0, 2*len(in.Values))
	for j, v := range in.Values {
		pairs = append(pairs, in.Keys[j], v)
	}
	switch {
	case in.Kind == opMGet && !in.Tx:
		vals, err := node.MGet(ctx, in.Keys...).Result()
		out := kvOutput{Multi: make([]kvState, len(vals))}
		for j, v := range vals {
			s, ok := v.(string)
			out.Multi[j] = keyState(ok, s)
		}
		return out, err
	case in.Kind == opMSet && in.Blind:
		return kvOutput{}, node.MSet(ctx, pairs...).Err()
	case in.Kind == opMDel:
		n, err := node.Del(ctx, in.Keys...).Result()
		return kvOutput{N: int(n)}, err
	case in.Kind == opMSetNX:
		ok, err := node.MSetNX(ctx, pairs...).Result()
		return kvOutput{Ok: ok}, err
	}
	return doTx(ctx, node, in)
}

// doTx sends GETs (mget) or SET ... GETs (mset) of in's keys as one
// MULTI/EXEC, which Concord runs as one batch; each answers the key's
// state (before the SET, for SET ... GET).
func doTx(ctx context.Context, node *redis.Client, in kvInput) (kvOutput, error) {
	// The commands are kept as queued: the slice TxPipelined returns also
	// holds MULTI's and EXEC's replies. (GET is a StringCmd, SET ... GET a
	// StatusCmd; both answer a string or redis.Nil.)
	var cmds []interface{ Result() (string, error) }
	_, err := node.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for j, k := range in.Keys {
			if in.Kind == opMGet {
				cmds = append(cmds, p.Get(ctx, k))
			} else {
				ttl := time.Duration(in.TTLMs) * time.Millisecond // 0: none
				cmds = append(cmds, p.SetArgs(ctx, k, in.Values[j], redis.SetArgs{Get: true, TTL: ttl}))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		if cerr := queuedNoSpace(cmds); cerr != nil && strings.HasPrefix(err.Error(), "EXECABORT ") {
			// The space alarm refused a command as it was queued, and
			// EXEC discarded the transaction: nothing ran (docs/redis.md).
			return kvOutput{}, fmt.Errorf("%w: %w (queued: %w)", client.ErrNoSpace, err, cerr)
		}
		return kvOutput{}, err // EXEC refused or failed: the error says which
	}
	out := kvOutput{Multi: make([]kvState, len(cmds))}
	for j, c := range cmds {
		v, cerr := c.Result()
		if cerr != nil && !errors.Is(cerr, redis.Nil) {
			return kvOutput{}, fmt.Errorf("%w: command %d of EXEC failed alone: %w", client.ErrAmbiguous, j, cerr)
		}
		out.Multi[j] = keyState(cerr == nil, v)
	}
	return out, nil
}

// queuedNoSpace is the space alarm's refusal (-NOSPACE) of one of a
// transaction's commands as it was queued, nil if none had one.
func queuedNoSpace(cmds []interface{ Result() (string, error) }) error {
	for _, c := range cmds {
		if _, err := c.Result(); refusedForSpace(err) {
			return err
		}
	}
	return nil
}

// multiForms are, per protocol, the forms of multi-key operation the
// workload sends; a history in which one was never answered (every try
// failed or was ambiguous) checks nothing of it and fails (coverage.gaps).
var multiForms = [2][]string{
	overGRPC: {"batch of gets", "batch of puts", "batch of puts with a TTL", "batch of deletes"},
	overRESP: {"MGET", "MULTI/EXEC of GETs", "MSET", "MULTI/EXEC of SET ... GETs", "MULTI/EXEC of SET ... PX ... GETs",
		"DEL of several keys", "MSETNX"},
}

// formOf names in's form in multiForms.
func formOf(in kvInput, p int) string {
	if p == overGRPC && in.Kind == opMSet && in.TTLMs > 0 {
		return "batch of puts with a TTL"
	}
	if p == overGRPC {
		return map[opKind]string{opMGet: "batch of gets", opMSet: "batch of puts", opMDel: "batch of deletes"}[in.Kind]
	}
	switch {
	case in.Kind == opMSet && in.Tx && in.TTLMs > 0:
		return "MULTI/EXEC of SET ... PX ... GETs"
	case in.Kind == opMGet && in.Tx:
		return "MULTI/EXEC of GETs"
	case in.Kind == opMGet:
		return "MGET"
	case in.Kind == opMSet && in.Tx:
		return "MULTI/EXEC of SET ... GETs"
	case in.Kind == opMSet:
		return "MSET"
	case in.Kind == opMDel:
		return "DEL of several keys"
	}
	return "MSETNX"
}

// countMulti counts a multi-key operation that constrains the checker:
// a read, or an answered mutation.
func (c *coverage) countMulti(p int, in kvInput, out kvOutput) {
	if out.Unknown {
		return
	}
	if c.multi[p] == nil {
		c.multi[p] = map[string]int{}
	}
	c.multi[p][formOf(in, p)]++
}

// multiGaps says which of protocol p's multi-key forms the history has no
// answered one of.
func (c coverage) multiGaps(p int) []string {
	var why []string
	for _, f := range multiForms[p] {
		if c.multi[p][f] == 0 {
			why = append(why, fmt.Sprintf("no %s %s was answered: the history checks no atomicity of it", protocolNames[p], f))
		}
	}
	return why
}

// noteSeen records what a successful operation shows its keys hold, for
// the next CAS's expected value.
func noteSeen(seen map[string]string, in kvInput, out kvOutput) {
	if len(in.Keys) == 0 {
		if v, ok := observed(in, out); ok {
			seen[in.Key] = v
		}
		return
	}
	for j, k := range in.Keys {
		switch {
		case in.Kind == opMSet:
			seen[k] = in.Values[j]
		case in.Kind == opMGet && j < len(out.Multi) && out.Multi[j].Exists:
			seen[k] = out.Multi[j].Value
		}
	}
}

// kindCounts says how many of the history's operations are of each kind,
// and how many multi-key ones of each form were answered, for the log.
func kindCounts(ops []porcupine.Operation, c coverage) string {
	n := map[opKind]int{}
	for _, o := range ops {
		n[o.Input.(kvInput).Kind]++
	}
	var parts []string
	for k := opGet; k <= opExpire; k++ {
		parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
	}
	s := strings.Join(parts, ", ") + "; answered multi-key:"
	for p, forms := range multiForms {
		for _, f := range forms {
			s += fmt.Sprintf(" %s %s %d,", protocolNames[p], f, c.multi[p][f])
		}
	}
	s = strings.TrimSuffix(s, ",") + "; answered expiry commands:"
	for p, forms := range expiryForms {
		for _, f := range forms {
			s += fmt.Sprintf(" %s %s %d,", protocolNames[p], f, c.expiry[p][f])
		}
	}
	s = strings.TrimSuffix(s, ",")
	return s + fmt.Sprintf("; answered puts with a TTL %d, reads that saw one run out %d", c.ttlPuts, c.expiredReads)
}
