package node

import (
	"context"
	"time"

	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
)

// expireSessions asks each shard this node leads to forget idle sessions.
// The cutoff travels in the command, so every replica drops the same ones.
func (n *Node) expireSessions(ctx context.Context) {
	cutoff := time.Now().Add(-n.cfg.SessionTTL).UnixNano()
	for _, info := range n.host.Infos() {
		if !info.IsLeader || info.Shard == routing.MetaShard {
			continue
		}
		_, err := n.host.Propose(ctx, info.Shard, &storepb.Command{UnixNanos: time.Now().UnixNano(),
			Kind: &storepb.Command_ExpireSessions{ExpireSessions: &storepb.ExpireSessions{IdleBeforeUnixNanos: cutoff}}})
		if err != nil {
			n.log.Debug("expire sessions", "shard", info.Shard, "err", err)
		}
	}
}
