package multiraft

import (
	"time"

	"github.com/concord-kv/concord/internal/storage"
)

// policy is the Config's intervals converted to ticks, once, in New: the
// loop counts ticks, not wall time, so that a Host driven by a manual tick
// source behaves exactly as one driven by the clock.
type policy struct {
	// leaderPreferenceTicks: how often leaders offer leadership back to
	// their shard's preferred replica.
	leaderPreferenceTicks uint64
	// logTruncationTicks: how often logs are truncated and unsent snapshot
	// handles expired.
	logTruncationTicks uint64
	// snapshotTTLTicks: the age at which an unsent snapshot handle expires.
	snapshotTTLTicks uint64
	// pendingTimeoutTicks: replica.Config.PendingTimeoutTicks.
	pendingTimeoutTicks uint64
	// strayCheckTicks: how often replicas are checked against placement's
	// descriptors (collectStrays).
	strayCheckTicks uint64
}

func newPolicy(cfg Config) policy {
	return policy{
		leaderPreferenceTicks: ticksOf(cfg.LeaderPreferenceInterval, cfg.TickInterval),
		logTruncationTicks:    ticksOf(cfg.LogTruncationInterval, cfg.TickInterval),
		snapshotTTLTicks:      ticksOf(cfg.SnapshotHandleTTL, cfg.TickInterval),
		pendingTimeoutTicks:   ticksOf(cfg.PendingTimeout, cfg.TickInterval),
		strayCheckTicks:       ticksOf(cfg.StrayCheckInterval, cfg.TickInterval),
	}
}

// ticksOf converts d to whole ticks, rounding down (as the loop always
// has: 60 s at 100 ms is 600 ticks), and at least 1 so every periodic
// action still runs.
func ticksOf(d, tick time.Duration) uint64 {
	if tick <= 0 || d < tick {
		return 1
	}
	return uint64(d / tick)
}

// runPolicies runs, after tick h.ticks, the periodic actions that are due.
func (h *Host) runPolicies() {
	if !h.cfg.NoLeaderPreference && h.ticks%h.policy.leaderPreferenceTicks == 0 {
		h.preferLeaders()
	}
	if h.ticks%h.policy.logTruncationTicks == 0 {
		h.truncateLogs()
		h.snaps.expire(h.ticks, h.policy.snapshotTTLTicks)
		for _, r := range h.replicas {
			r.ExpireStagedSnapshots(h.policy.snapshotTTLTicks)
		}
	}
	// The first tick checks too: a node restarted after missing a removal
	// sheds the stray as soon as it learns placement's view.
	if h.ticks == 1 || h.ticks%h.policy.strayCheckTicks == 0 {
		h.collectStrays()
	}
}

// preferLeaders hands each leadership held by a replica that is not its
// shard's preferred one back to the preferred replica, once that one is
// caught up (see replica.TransferToPreferred): leaders stay spread as the
// placement intended, also after failovers.
func (h *Host) preferLeaders() {
	for _, r := range h.replicas {
		r.TransferToPreferred()
	}
}

// truncateLogs drops the applied entries no follower needs any more
// (Replica.TruncationTarget), once at least LogTruncateEntries can go: one
// range deletion and one record per shard, every LogTruncationInterval,
// often enough that under load most entries are deleted while still in
// Pebble's memtable, whose flush then drops them instead of writing them
// to L0 for a compaction to drop (docs/benchmarks.md, "Leader-aware log
// truncation").
func (h *Host) truncateLogs() {
	b := h.eng.NewBatch()
	defer b.Close()
	for _, r := range h.replicas {
		target := r.TruncationTarget()
		if trunc, _ := r.RaftLog().Truncated(); target < trunc+h.cfg.LogTruncateEntries {
			continue
		}
		if err := r.RaftLog().Truncate(b, target); err != nil {
			h.fatal(err)
		}
	}
	if b.Empty() {
		return
	}
	if err := storage.Commit(b, false); err != nil {
		h.fatal(err)
	}
}
