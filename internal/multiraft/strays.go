package multiraft

import (
	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/replica"
)

// collectStrays destroys, data and all (destroyReplica: tombstone, then
// the data), every replica here that its shard has removed without this
// node applying the removal: a node cut off or down while its replica was
// removed never hears from the shard again (a leader contacts only
// members). (A crash while a replica is destroyed is recovered at the next
// start instead: Start.)
// The authority is placement's descriptor (Config.Placement, the meta
// shard's view from heartbeats), which lags the shard; so a replica is
// collected only when that descriptor is newer than the replica's own
// (higher epoch), does not list it, and allocated its id (the id is below
// the descriptor's next replica id): a replica added after the view was
// taken is none of these, and one the view does not know yet is kept. On
// the loop.
func (h *Host) collectStrays() {
	if h.cfg.Placement == nil {
		return
	}
	for shard, r := range h.replicas {
		d, known := h.cfg.Placement(shard)
		if !known || d == nil || !stray(r, d) {
			continue
		}
		h.log.Info("destroying stray replica: its shard removed it", "shard", shard, "replica", r.ID(),
			"replica_epoch", r.Descriptor().GetEpoch(), "placement_epoch", d.GetEpoch())
		h.destroyReplica(r)
	}
}

// stray reports whether d, placement's descriptor of r's shard, shows r
// removed (see collectStrays).
func stray(r *replica.Replica, d *concordpb.ShardDescriptor) bool {
	if uint64(r.ID()) >= d.GetNextReplicaId() || memberDesc(d, r.ID()) != nil {
		return false
	}
	return d.GetEpoch() > r.Descriptor().GetEpoch()
}
