package node

import (
	"context"
	"time"

	"github.com/concord-kv/concord/internal/expiry"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// expireSessions asks each shard this node leads to forget idle sessions.
// The cutoff travels in the command, so every replica drops the same ones;
// the state machine reads the stamp minus the cutoff as the TTL and measures
// it on the shard's clock (kv.MaxClockStep), so both come from one reading.
func (n *Node) expireSessions(ctx context.Context) {
	now := time.Now()
	cutoff := now.Add(-n.cfg.SessionTTL).UnixNano()
	for _, info := range n.host.Infos() {
		if !info.IsLeader || info.Shard == routing.MetaShard {
			continue
		}
		_, err := n.host.Propose(ctx, info.Shard, &storepb.Command{UnixNanos: now.UnixNano(),
			Kind: &storepb.Command_ExpireSessions{ExpireSessions: &storepb.ExpireSessions{IdleBeforeUnixNanos: cutoff}}})
		if err != nil {
			n.log.Debug("expire sessions", "shard", info.Shard, "err", err)
		}
	}
}

// sweepExpired deletes, through raft, keys whose expiry has passed on the
// shards this node leads (internal/expiry). Until the sweep gets to them
// they already read as absent.
func (n *Node) sweepExpired(ctx context.Context) {
	onStamps := n.backend().ClusterVersion().Allows(version.ExpiryOnStamps)
	if deleted, err := expiry.Sweep(ctx, n.host, time.Now(), expiry.MaxKeysPerShard, onStamps); err != nil {
		n.log.Debug("expiry sweep", "deleted", deleted, "err", err)
	}
}
