// Package expiry is the background sweep that deletes expired keys through
// Raft. A key reads as absent from the moment its expiry passes (internal/kv
// compares it with the reader's clock); the sweep reclaims its storage.
//
// On each user shard this node leads, a round reads up to MaxKeysPerShard
// entries of the shard's expiry index (kv.Expired: ordered by time, so a
// round costs O(expired keys), not O(keys)) through the engine's guarded
// reader, and proposes one command of OP_DELETE_EXPIRED ops. The state
// machine re-checks each key's expiry when it applies (at the highest stamp
// the shard has seen once the cluster's version allows it, on the shard's
// clock before: kv.MaxClockStep),
// so a key set again after the round read the index survives, and every
// replica deletes the same keys. Each op carries its index entry's time: an
// entry a blind PUT left stale (the key now has another expiry, or none) is
// removed by it. The node runs a round every Interval
// (internal/node); tests run rounds themselves.
package expiry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

const (
	// Interval is how often the node sweeps.
	Interval = time.Second
	// MaxKeysPerShard bounds one round's work on one shard: one command of
	// at most this many ops (the front door's batch limit), so a backlog of
	// expired keys drains at about this many keys a second per shard
	// without one huge entry.
	MaxKeysPerShard = 1000
)

// Host is what a round needs of the replica host (multiraft.Host).
type Host interface {
	Infos() []multiraft.ReplicaInfo
	Engine() *storage.Engine
	Propose(ctx context.Context, shard ids.ShardID, cmd *storepb.Command) (*storepb.CommandResult, error)
}

// Sweep runs one round on every user shard h leads, at time now (this
// node's clock: it picks the candidates and stamps the command), deleting
// at most limit keys per shard. onStamps sets the commands'
// expiry_on_stamps (the cluster's version allows it). It returns how many
// keys the applied commands deleted and the errors of shards whose round
// failed (the next round retries them).
func Sweep(ctx context.Context, h Host, now time.Time, limit int, onStamps bool) (deleted int, err error) {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, info := range h.Infos() {
		if !info.IsLeader || info.Shard == routing.MetaShard {
			continue
		}
		wg.Add(1)
		go func() { // one shard's stuck proposal must not hold up the others
			defer wg.Done()
			n, err := sweepShard(ctx, h, info.Shard, now, limit, onStamps)
			mu.Lock()
			defer mu.Unlock()
			deleted += n
			errs = append(errs, err)
		}()
	}
	wg.Wait()
	return deleted, errors.Join(errs...)
}

func sweepShard(ctx context.Context, h Host, shard ids.ShardID, now time.Time, limit int, onStamps bool) (int, error) {
	var expired []kv.ExpiredKey
	err := h.Engine().Read(func(r storage.Reader) (err error) {
		expired, err = kv.Expired(r, uint64(shard), now.UnixMilli(), limit)
		return err
	})
	if err != nil || len(expired) == 0 {
		return 0, err
	}
	ops := make([]*concordpb.Op, len(expired))
	for i, x := range expired {
		ops[i] = &concordpb.Op{Type: concordpb.OpType_OP_DELETE_EXPIRED, Key: x.Key, ExpireAtUnixMs: x.AtMs}
	}
	res, err := h.Propose(ctx, shard, &storepb.Command{UnixNanos: now.UnixNano(),
		Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Ops: ops, ExpiryOnStamps: onStamps}}})
	if err != nil {
		return 0, err
	}
	if res.GetErrorCode() != 0 {
		return 0, errors.New(res.GetErrorMessage())
	}
	n := 0
	for _, r := range res.GetResults() {
		if r.GetOk() {
			n++
		}
	}
	return n, nil
}
