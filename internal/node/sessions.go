package node

import (
	"context"
	"fmt"
	"time"

	"github.com/concord-kv/concord/internal/expiry"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// expireSessions asks each shard this node leads to forget idle sessions.
// The cutoff travels in the command, so every replica drops the same ones;
// the state machine reads the stamp minus the cutoff as the TTL and measures
// it on the shard's clock (kv.MaxClockStep), so both come from one reading.
func (n *Node) expireSessions(ctx context.Context) {
	limit := sessionExpiryLimit(n.backend().ClusterVersion())
	for _, info := range n.host.Infos() {
		if !info.IsLeader || info.Shard == routing.MetaShard {
			continue
		}
		if cmds, err := n.expireShardSessions(ctx, info.Shard, n.cfg.SessionTTL, limit); err != nil {
			n.log.Debug("expire sessions", "shard", info.Shard, "commands", cmds, "err", err)
		}
	}
}

// sessionExpiryLimit is the max_records of the ExpireSessions commands a
// leader at cluster version v proposes: 0 (every record in one apply)
// until every replica applies the bound (version.BoundedSessionExpiry),
// since one reading every record would expire another set than one
// stopping at the bound.
func sessionExpiryLimit(v version.Level) uint32 {
	if v.Allows(version.BoundedSessionExpiry) {
		return kv.MaxSessionsPerExpiry
	}
	return 0
}

// expireShardSessions makes one pass of session expiry over shard: it
// proposes ExpireSessions reading at most limit records (0: all), and
// again from where the last one stopped (CommandResult.next_session_id)
// until one reads to the end, so no apply holds the host's loop for longer
// than limit records take. Each command carries its own stamp and cutoff.
// It returns how many commands it proposed; it stops at the first that
// fails (this node no longer leads, ctx ends): the next pass starts over.
func (n *Node) expireShardSessions(ctx context.Context, shard ids.ShardID, ttl time.Duration, limit uint32) (commands int, err error) {
	var from uint64
	for {
		now := time.Now()
		es := &storepb.ExpireSessions{IdleBeforeUnixNanos: now.Add(-ttl).UnixNano()}
		if limit != 0 {
			es.MaxRecords, es.FromSessionId = limit, from
		}
		res, err := n.host.Propose(ctx, shard, &storepb.Command{UnixNanos: now.UnixNano(),
			Kind: &storepb.Command_ExpireSessions{ExpireSessions: es}})
		commands++
		switch {
		case err != nil:
			return commands, err
		case res.GetErrorCode() != 0:
			return commands, fmt.Errorf("expire sessions of shard %d: %s", shard, res.GetErrorMessage())
		case limit == 0 || res.GetNextSessionId() == 0:
			return commands, nil
		case res.GetNextSessionId() <= from:
			// The next command would read what this one did: a pass that
			// never ends. Never so from a state machine that resumes.
			return commands, fmt.Errorf("expire sessions of shard %d: resumed at session %d, then asked to resume at %d", shard, from, res.GetNextSessionId())
		}
		from = res.GetNextSessionId()
	}
}

// sweepExpired deletes, through raft, keys whose expiry has passed on the
// shards this node leads (internal/expiry). Until the sweep gets to them
// they already read as absent. It first makes new leaderships' shards
// versioned (versionShards), on the same once-a-second beat.
func (n *Node) sweepExpired(ctx context.Context) {
	n.versionShards(ctx)
	onStamps := n.backend().ClusterVersion().Allows(version.ExpiryOnStamps)
	if deleted, err := expiry.Sweep(ctx, n.host, time.Now(), expiry.MaxKeysPerShard, onStamps); err != nil {
		n.log.Debug("expiry sweep", "deleted", deleted, "err", err)
	}
}

// versionShards proposes, on each user shard this node leads, one empty
// versioned KV command once the cluster's version allows versions
// (version.Versions), and once per shard per process: a shard's first
// versioned command fixes its first version (kv: values written before
// carry none, and a tentative write of an absent key is compared with
// it), at the highest stamp the shard applied before it. Proposed at once,
// that is about when the cluster was raised; left to the first client
// write, it could come after a tentative write was taken, and any stamped
// command in between (session expiry, a sweep) would make that write lose
// to writes that never were. Only the sweep's goroutine calls it.
func (n *Node) versionShards(ctx context.Context) {
	if !n.backend().ClusterVersion().Allows(version.Versions) {
		return
	}
	for _, info := range n.host.Infos() {
		if !info.IsLeader || info.Shard == routing.MetaShard || n.versionedShards[info.Shard] {
			continue
		}
		_, err := n.host.Propose(ctx, info.Shard, &storepb.Command{UnixNanos: time.Now().UnixNano(),
			Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{Versioned: true}}})
		if err != nil {
			n.log.Debug("version shard", "shard", info.Shard, "err", err)
			continue
		}
		if n.versionedShards == nil {
			n.versionedShards = map[ids.ShardID]bool{}
		}
		n.versionedShards[info.Shard] = true
	}
}
