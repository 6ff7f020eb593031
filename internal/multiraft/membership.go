package multiraft

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/replica"
)

// Membership changes, proposed on a shard's leader. Each is one raft
// configuration change (a joint one for ChangeReplicas), applied into the
// shard's descriptor at apply time (replica.applyConfChange). A caller that
// planned a change from a descriptor passes that descriptor's epoch; if the
// shard's membership changed since, the change is refused (ErrStaleEpoch)
// and the caller plans again. Epoch 0 skips the check.

// ErrStaleEpoch is returned when a change was planned against an older
// membership than the shard's. Nothing was proposed; planning again on the
// current descriptor and retrying is safe.
var ErrStaleEpoch = errors.New("multiraft: shard membership changed since the change was planned")

// ErrChangePending is returned while the shard's previous membership change
// may still be unapplied (raft takes one at a time). Nothing was proposed;
// retrying later is safe.
var ErrChangePending = errors.New("multiraft: another membership change of the shard is in progress")

// ErrRefused wraps the reason a change or transfer makes no sense for the
// shard's current membership (a node that already holds a replica, a
// replica that is not a member, removing the leader). Nothing was proposed.
var ErrRefused = errors.New("multiraft: refused")

// ChangeReplicas replaces replica remove of shard by a new replica on node
// addNode, in one joint-consensus step. Must run on the shard's leader.
func (h *Host) ChangeReplicas(ctx context.Context, shard ids.ShardID, epoch uint64, remove ids.ReplicaID, addNode ids.NodeID) (*concordpb.ShardDescriptor, error) {
	return h.changeConf(ctx, shard, epoch, func(r *replica.Replica, id uint64) (*pb.ConfChangeV2, error) {
		return replica.ReplaceChange(r.Descriptor(), id, remove, addNode)
	})
}

// AddLearner adds a fresh replica of shard on node as a learner: it
// receives the log (or a snapshot) but neither votes nor counts for quorum
// until PromoteLearner. Must run on the shard's leader.
func (h *Host) AddLearner(ctx context.Context, shard ids.ShardID, epoch uint64, node ids.NodeID) (*concordpb.ShardDescriptor, error) {
	return h.changeConf(ctx, shard, epoch, func(r *replica.Replica, id uint64) (*pb.ConfChangeV2, error) {
		return replica.AddLearnerChange(r.Descriptor(), id, node)
	})
}

// ErrNotCaughtUp is returned when a learner did not catch up before the
// caller's deadline: nothing was proposed; retrying later is safe.
var ErrNotCaughtUp = errors.New("multiraft: learner has not caught up")

// errAbandoned: a change's context ended before its turn on the loop ran,
// so the turn proposed nothing.
var errAbandoned = errors.New("multiraft: abandoned before proposing")

// promotePoll is how often PromoteLearner looks again at a lagging
// learner's progress.
const promotePoll = 5 * time.Millisecond

// PromoteLearner makes learner learner of shard a voter once the leader's
// own raft progress shows it caught up: the leader streams appends to it
// and it has acknowledged, as persisted, every entry the leader had
// committed when the promotion was asked for. Until then it waits (polling
// on the loop); if ctx ends first it returns an error wrapping
// ErrNotCaughtUp and proposes nothing. The check and the proposal run in
// one loop turn, so a leadership lost in between fails the promotion
// rather than promoting on another leader's word. Judging by the leader's
// progress, not by heartbeat reports, is what makes a promoted learner
// hold the log, and it promotes as soon as the learner has it rather than
// a report later. Must run on the shard's leader.
func (h *Host) PromoteLearner(ctx context.Context, shard ids.ShardID, epoch uint64, learner ids.ReplicaID) (*concordpb.ShardDescriptor, error) {
	var target uint64 // the leader's commit index at the first attempt
	var targetSet bool
	for {
		d, err := h.changeConf(ctx, shard, epoch, func(r *replica.Replica, id uint64) (*pb.ConfChangeV2, error) {
			cc, err := replica.PromoteChange(r.Descriptor(), id, learner)
			if err != nil {
				return nil, err
			}
			if !targetSet {
				target, targetSet = r.Status().GetCommit(), true
			}
			return cc, caughtUp(r, learner, target)
		})
		if errors.Is(err, errAbandoned) {
			// Ended before the learner was judged caught up: the promise
			// is ErrNotCaughtUp, nothing proposed.
			return nil, fmt.Errorf("%w: %w", ErrNotCaughtUp, err)
		}
		if !errors.Is(err, ErrNotCaughtUp) {
			return d, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("shard %d: %w: %w", shard, err, ctx.Err())
		case <-h.doneC:
			return nil, ErrStopped
		case <-time.After(promotePoll):
		}
	}
}

// caughtUp returns nil if leader r streams appends to learner and the
// learner has persisted the log up to target; else an error wrapping
// ErrNotCaughtUp that says how far it is.
func caughtUp(r *replica.Replica, learner ids.ReplicaID, target uint64) error {
	match, replicating, ok := r.Progress(learner)
	if ok && replicating && match >= target {
		return nil
	}
	return fmt.Errorf("%w: replica %d has persisted up to %d of %d (streaming: %t)", ErrNotCaughtUp, learner, match, target, replicating)
}

// RemoveReplica removes replica rm from shard; its node destroys it (data
// and all) when it applies the change, or, if it misses it, when it learns
// the newer descriptor (CollectStrays). Refused for the leader itself
// (transfer leadership first) and for a voter whose removal leaves fewer
// voters than a majority of the current ones, or than minVoters when that
// is lower and not 0 (replica.RemoveChange). Must run on the shard's
// leader.
func (h *Host) RemoveReplica(ctx context.Context, shard ids.ShardID, epoch uint64, rm ids.ReplicaID, minVoters int) (*concordpb.ShardDescriptor, error) {
	return h.changeConf(ctx, shard, epoch, func(r *replica.Replica, id uint64) (*pb.ConfChangeV2, error) {
		return replica.RemoveChange(r.Descriptor(), id, rm, r.ID(), minVoters)
	})
}

// changeConf proposes the change build makes from the shard's replica (on
// the loop) and waits until it applied, returning the new descriptor.
func (h *Host) changeConf(ctx context.Context, shard ids.ShardID, epoch uint64, build func(r *replica.Replica, id uint64) (*pb.ConfChangeV2, error)) (*concordpb.ShardDescriptor, error) {
	id := h.nextID()
	done := make(chan replica.Outcome, 1)
	err := h.onLeader(ctx, shard, epoch, func(r *replica.Replica) error {
		if r.ConfChangePending() {
			return fmt.Errorf("shard %d: %w", shard, ErrChangePending)
		}
		cc, err := build(r, id)
		switch {
		case errors.Is(err, ErrNotCaughtUp):
			return err
		case err != nil:
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
		r.ProposeConfChange(&replica.Proposal{ID: id, CC: cc, Done: done})
		h.dirty[shard] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := h.wait(ctx, &replica.Proposal{Done: done}); err != nil {
		return nil, err
	}
	// The outcome arrives during the apply, before the loop publishes the
	// turn's Info: read the descriptor on the loop, after that turn.
	var desc *concordpb.ShardDescriptor
	if err := h.Do(ctx, func() {
		if r := h.replicas[shard]; r != nil {
			desc = proto.Clone(r.Descriptor()).(*concordpb.ShardDescriptor)
		}
	}); err != nil {
		return nil, err
	}
	if desc == nil {
		info, _ := h.Info(shard)
		desc = info.Desc
	}
	return desc, nil
}

// onLeader runs f on the loop with shard's replica, if it leads at epoch
// (leaderReplica), and returns what Do, that check or f refused. Not
// abandoned when ctx ends: f may propose once queued, so the caller waits
// for it (one loop turn) to learn whether it did. Otherwise a promotion
// cancelled here returned ctx's error while f went on to check, and a
// learner that caught up just then was still promoted (PromoteLearner
// promises ErrNotCaughtUp and nothing proposed).
func (h *Host) onLeader(ctx context.Context, shard ids.ShardID, epoch uint64, f func(r *replica.Replica) error) error {
	var ferr error
	err := h.Do(context.WithoutCancel(ctx), func() {
		if cause := context.Cause(ctx); cause != nil {
			// The caller gave up while this turn was queued: it is told
			// nothing was proposed, so nothing may be (a promotion its
			// caller was told did not happen would still raise the
			// quorum, on a node it may have judged down meanwhile).
			ferr = fmt.Errorf("shard %d: %w: %w", shard, errAbandoned, cause)
			return
		}
		r, err := h.leaderReplica(shard, epoch)
		if err != nil {
			ferr = err
			return
		}
		ferr = f(r)
	})
	return errors.Join(err, ferr)
}

// leaderReplica returns shard's replica if it leads and its descriptor is
// at epoch (0: any). On the loop.
func (h *Host) leaderReplica(shard ids.ShardID, epoch uint64) (*replica.Replica, error) {
	r := h.replicas[shard]
	if r == nil {
		return nil, ErrNoReplica
	}
	if !r.IsLeader() {
		return nil, &replica.NotLeaderError{Shard: shard, LeaderNode: r.LeaderNode()}
	}
	if cur := r.Descriptor().GetEpoch(); epoch != 0 && epoch != cur {
		return nil, fmt.Errorf("shard %d: planned at epoch %d, now at %d: %w", shard, epoch, cur, ErrStaleEpoch)
	}
	return r, nil
}

// TransferLeader hands leadership of shard to voter target and waits until
// target leads, the transfer is abandoned (raft gives up after an election
// timeout if target does not take over), or ctx ends. Must run on the
// shard's leader; a target that already leads is success.
func (h *Host) TransferLeader(ctx context.Context, shard ids.ShardID, epoch uint64, target ids.ReplicaID) error {
	err := h.onLeader(ctx, shard, epoch, func(r *replica.Replica) error {
		if r.ID() == target {
			return nil
		}
		rd := memberDesc(r.Descriptor(), target)
		switch {
		case rd == nil:
			return fmt.Errorf("%w: shard %d has no replica %d", ErrRefused, shard, target)
		case rd.GetRole() != concordpb.ReplicaRole_REPLICA_VOTER:
			return fmt.Errorf("%w: replica %d of shard %d is a learner, which cannot lead", ErrRefused, target, shard)
		}
		err := r.TransferLeader(target)
		h.publish(r) // so the wait below sees the transfer under way
		h.dirty[shard] = r
		return err
	})
	if err != nil {
		return err
	}
	for {
		info, ok := h.Info(shard)
		switch {
		case !ok:
			return ErrNoReplica
		case info.LeaderReplica == target:
			return nil
		case info.IsLeader && info.Transferee == 0:
			return fmt.Errorf("shard %d: leadership transfer to replica %d abandoned (not caught up or unreachable); still led here", shard, target)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d: leadership transfer to replica %d: %w", shard, target, ctx.Err())
		case <-h.doneC:
			return ErrStopped
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func memberDesc(d *concordpb.ShardDescriptor, id ids.ReplicaID) *concordpb.ReplicaDescriptor {
	for _, rd := range d.GetReplicas() {
		if ids.ReplicaID(rd.GetReplicaId()) == id {
			return rd
		}
	}
	return nil
}
