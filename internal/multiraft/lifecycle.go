package multiraft

import (
	"maps"
	"slices"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/replica"
)

// Start loads every replica recorded as hosted and starts the loop.
func (h *Host) Start() error {
	if err := h.cfg.validate(); err != nil {
		return err
	}
	// A crash while a replica was destroyed may have left its data.
	if err := h.eng.RemoveLeftovers(); err != nil {
		return err
	}
	hosted, err := h.eng.HostedReplicas()
	if err != nil {
		return err
	}
	for _, shard := range slices.Sorted(maps.Keys(hosted)) {
		r, err := h.loadReplica(shard, hosted[shard])
		if err != nil {
			return err
		}
		if r.Removed() {
			// It applied its own removal, and the node stopped before it
			// destroyed the replica (handleReady): nothing else ever will,
			// since no leader contacts it and placement's descriptor is
			// no newer than the one it applied.
			if err := h.removeReplica(r); err != nil {
				return err
			}
		}
	}
	// The preferred replica of each shard campaigns at once, so leaders start
	// spread as placed rather than wherever an election timer fires first.
	// A replica restarted past the bootstrap term refuses (ErrVoteQuiet):
	// it may back a leader's read lease (replica/lease.go).
	for _, r := range h.replicas {
		if d := r.Descriptor(); d != nil && len(d.GetReplicas()) > 0 && ids.ReplicaID(d.GetReplicas()[0].GetReplicaId()) == r.ID() {
			_ = r.Campaign()
		}
		h.dirty[r.Shard()] = r
	}
	go h.run()
	return nil
}

// Stop ends the loop. Waiting callers get ErrAmbiguous or an error.
func (h *Host) Stop() {
	if h.stopped.Swap(true) {
		<-h.doneC
		return
	}
	close(h.stopC)
	<-h.doneC
}

func (h *Host) replicaConfig(shard ids.ShardID, id ids.ReplicaID) replica.Config {
	return replica.Config{
		NodeID: h.cfg.NodeID, Shard: shard, ReplicaID: id,
		ElectionTicks: h.cfg.ElectionTicks, HeartbeatTicks: h.cfg.HeartbeatTicks,
		MaxSizePerMsgBytes: h.cfg.MaxSizePerMsgBytes, MaxInflightMsgs: h.cfg.MaxInflightMsgs,
		MaxInflightBytes: h.cfg.MaxInflightBytes, MaxCommittedBytesPerReady: h.cfg.MaxCommittedBytesPerReady,
		MaxUncommittedBytes: h.cfg.MaxUncommittedBytes,
		LogKeepEntries:      h.cfg.LogKeepEntries, LogTailEntries: h.cfg.LogTailEntries,
		PendingTimeoutTicks: h.policy.pendingTimeoutTicks,
		ReadCtxBase:         h.idBase,
		LeaseDuration:       int64(h.cfg.LeaseDuration()),
		Snapshot:            h.snapshotFunc(shard),
		Logger:              h.log,
	}
}

func (h *Host) loadReplica(shard ids.ShardID, id ids.ReplicaID) (*replica.Replica, error) {
	r, err := replica.Load(h.eng, h.replicaConfig(shard, id), h.newSM(shard))
	if err != nil {
		return nil, err
	}
	if h.refusing {
		r.RefuseLeadership()
	}
	h.replicas[shard] = r
	h.newLeaseSlot(shard)
	h.publish(r)
	return r, nil
}

// createReplica creates an uninitialized replica to receive the shard from
// its leader (by log or snapshot), once checkCreate accepted the message
// (validate.go): only then is anything persisted.
func (h *Host) createReplica(in inMsg) (*replica.Replica, error) {
	if err := h.checkCreate(in); err != nil {
		return nil, err
	}
	shard, id := in.shard, ids.ReplicaID(in.m.GetTo())
	if err := h.eng.SetHosted(shard, id); err != nil {
		h.fatal(err)
	}
	h.log.Info("created replica to receive shard", "shard", shard, "replica", id)
	return h.loadReplica(shard, id)
}

// destroyReplica removes a replica and its data, leaving a tombstone so
// that stale messages cannot recreate it. It unpublishes the replica before
// destroying the data, so a stale read that finds the replica still
// published after reading has read its data (node's LocalGet).
func (h *Host) destroyReplica(r *replica.Replica) {
	if err := h.removeReplica(r); err != nil {
		h.fatal(err)
	}
}

// removeReplica is destroyReplica, returning the storage error.
func (h *Host) removeReplica(r *replica.Replica) error {
	shard := r.Shard()
	h.dropLeaseSlot(shard) // before the data goes (fastread.go)
	h.engineChanged()
	r.Destroy()
	delete(h.replicas, shard)
	delete(h.dirty, shard)
	h.infoMu.Lock()
	delete(h.infos, shard)
	h.descGen.Add(1)
	h.publishLeaders()
	h.infoMu.Unlock()
	if err := h.eng.DestroyReplica(shard, r.ID()); err != nil {
		return err
	}
	h.log.Info("removed replica", "shard", shard, "replica", r.ID())
	return nil
}
