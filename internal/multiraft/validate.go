package multiraft

import (
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/replica"
)

// What the host accepts from peers. The raft port is open to anyone who can
// reach the node, and the cluster id is no secret, so every message is
// checked before it can act, and nothing is persisted for a message before
// all its checks passed. A refused message is dropped (dropLog); the node
// stays up. The port is not authenticated: a well-formed message forged in
// the name of a member, with that member's node and replica ids, passes.
// The checks keep everything else out: strangers (the transport: a sender
// with no address in the book), message types no peer sends, messages
// inconsistent with what the node knows of the shard, and malformed
// messages raft would panic on (replica.checkStep).
//
// Message types, per stream (peerMessage). On the raft stream: appends,
// heartbeats, votes and pre-votes, their responses, and MsgTimeoutNow (a
// leader handing over). Never:
//   - MsgProp: replicas run with DisableProposalForwarding, so a follower
//     never forwards a proposal; one from a peer would let anyone append
//     commands (or conf changes that panic apply) through the leader;
//   - MsgReadIndex and its response: Concord asks raft for a read index only
//     while raft leads (replica.FlushReads checks raft's own state; reads
//     queued on a replica that stepped down meanwhile fail at once), so a
//     replica never forwards one and a peer's is never legitimate;
//   - MsgSnap: a snapshot comes only on the snapshot stream, whose data was
//     staged first (without data, raft would accept a snapshot that
//     InstallSnapshot cannot install: a fatal error);
//   - local types (MsgHup, MsgBeat, MsgUnreachable, MsgSnapStatus,
//     MsgCheckQuorum, MsgTransferLeader, MsgForgetLeader, storage messages).
//
// On the snapshot stream: MsgSnap only.
//
// Creating a replica (a message for a shard with no replica here) needs,
// in order (checkCreate):
//  1. a leader's message (MsgApp, MsgHeartbeat, MsgSnap): only a leader
//     contacts a replica it added; anything else is stale and ignored;
//  2. m.To above the shard's tombstone here (a removed replica never comes
//     back), else ignored as stale;
//  3. the message well-formed for an empty replica (replica.CheckFirst);
//  4. with placement information (Config.Placement): the shard exists; the
//     sender hosts replica m.From per the newest descriptor placement knows
//     (the leader is an established member); m.To, if that descriptor lists
//     it, is on this node, and if it does not, was allocated after it (an id
//     below its next replica id it does not list was removed). Placement
//     lags the shard by a heartbeat or two: a leader added since is refused
//     until placement knows it, and the leader retries (a delay, not a
//     stall; placement always catches up with the shard's configuration).
//     Without placement information at all (a node before its first
//     heartbeat answer) creation waits too. Only the in-process harness runs
//     with no Placement; there steps 1–3 decide alone.
//
// Only then is the replica recorded (SetHosted) and created.
//
// Replacing a replica (a message for a higher replica id of a shard whose
// replica here has a lower one): the creation checks above, and the
// message must come from a member of the replica's own configuration or of
// a newer one that placement knows (replica.CheckSupersede). Only then is
// the old replica destroyed and tombstoned. A message to a lower replica id
// than ours is stale and ignored.

// via is the stream a message came on.
type via uint8

const (
	viaRaftStream via = iota
	viaSnapshotStream
)

// peerMessage reports whether a peer legitimately sends type t on stream s.
func peerMessage(t pb.MessageType, s via) bool {
	if s == viaSnapshotStream {
		return t == pb.MsgSnap
	}
	switch t {
	case pb.MsgApp, pb.MsgAppResp, pb.MsgHeartbeat, pb.MsgHeartbeatResp,
		pb.MsgVote, pb.MsgVoteResp, pb.MsgPreVote, pb.MsgPreVoteResp, pb.MsgTimeoutNow:
		return true
	}
	return false
}

// errStale marks a message that is legitimate but late (to a removed or
// older replica, or a response reaching a shard no longer hosted here): it
// is dropped silently, as raft drops stale messages.
var errStale = errors.New("stale message")

// errNotYet marks a message placement cannot vouch for yet: as during
// every replica replacement, until placement learns the new configuration.
// It is dropped and logged at Debug only (the leader retries).
var errNotYet = errors.New("placement does not know it yet")

func notYet(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNotYet, fmt.Sprintf(format, args...))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", replica.ErrInvalidMessage, fmt.Sprintf(format, args...))
}

// checkEnvelope makes the checks that need no state: the message type
// against its stream, and non-zero, distinct replica ids.
func checkEnvelope(in inMsg) error {
	m := in.m
	if !peerMessage(m.GetType(), in.via) {
		return invalid("%v from a peer on the %s stream", m.GetType(), in.via)
	}
	if m.GetTo() == 0 || m.GetFrom() == 0 || m.GetFrom() == m.GetTo() {
		return invalid("from replica %d to replica %d", m.GetFrom(), m.GetTo())
	}
	return nil
}

func (s via) String() string {
	if s == viaSnapshotStream {
		return "snapshot"
	}
	return "raft"
}

// checkCreate decides whether in may create replica in.m.To of its shard
// here (see the top of this file). It persists nothing.
func (h *Host) checkCreate(in inMsg) error {
	m := in.m
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
	default:
		return errStale
	}
	to, from := ids.ReplicaID(m.GetTo()), ids.ReplicaID(m.GetFrom())
	tomb, err := h.eng.Tombstone(in.shard)
	if err != nil {
		return err
	}
	if to <= tomb {
		return errStale
	}
	if err := replica.CheckFirst(to, in.fromNode, m); err != nil {
		return err
	}
	if h.cfg.Placement == nil {
		return nil
	}
	d, known := h.cfg.Placement(in.shard)
	switch {
	case !known:
		return notYet("no placement information")
	case d == nil:
		return invalid("shard %d does not exist", in.shard)
	}
	if node, ok := nodeOf(d, from); !ok || node != in.fromNode {
		return notYet("sender node %d does not host replica %d of shard %d (epoch %d)", in.fromNode, from, in.shard, d.GetEpoch())
	}
	if node, ok := nodeOf(d, to); ok && node != h.cfg.NodeID {
		return invalid("replica %d of shard %d is on node %d", to, in.shard, node)
	} else if !ok && uint64(to) < d.GetNextReplicaId() {
		return invalid("replica %d of shard %d was removed (epoch %d)", to, in.shard, d.GetEpoch())
	}
	return nil
}

// checkSupersede decides whether in, for a higher replica id than r's, may
// destroy r to create that replica (see the top of this file).
func (h *Host) checkSupersede(r *replica.Replica, in inMsg) error {
	if err := h.checkCreate(in); err != nil {
		return err
	}
	var newer *concordpb.ShardDescriptor
	if h.cfg.Placement != nil {
		newer, _ = h.cfg.Placement(in.shard)
	}
	return r.CheckSupersede(in.fromNode, in.m, newer)
}

// nodeOf returns the node of replica id in d.
func nodeOf(d *concordpb.ShardDescriptor, id ids.ReplicaID) (ids.NodeID, bool) {
	for _, rd := range d.GetReplicas() {
		if ids.ReplicaID(rd.GetReplicaId()) == id {
			return ids.NodeID(rd.GetNodeId()), true
		}
	}
	return 0, false
}

// dropWarnTicks is how often, at most, refused messages are reported at
// Warn level (about a minute at the default tick); each is logged at Debug.
const dropWarnTicks = 600

// dropLog counts and reports refused peer messages without letting a flood
// of garbage flood the log. Owned by the loop.
type dropLog struct {
	count    uint64 // refused since the last warning
	warnedAt uint64 // the loop's tick count at the last warning
	warned   bool
}

// drop records that in was refused for err: stale messages silently,
// others at Debug, and invalid ones also in a Warn at most every
// dropWarnTicks, with their count.
func (h *Host) drop(in inMsg, err error) {
	if errors.Is(err, errStale) {
		return
	}
	h.log.Debug("dropped peer raft message", "from_node", in.fromNode, "shard", in.shard,
		"type", in.m.GetType(), "from", in.m.GetFrom(), "to", in.m.GetTo(), "err", err)
	if errors.Is(err, errNotYet) {
		return
	}
	d := &h.drops
	d.count++
	if d.warned && h.ticks-d.warnedAt < dropWarnTicks {
		return
	}
	h.log.Warn("dropped invalid peer raft messages", "count", d.count, "last_from_node", in.fromNode,
		"last_shard", in.shard, "last_type", in.m.GetType(), "last_err", err)
	d.count, d.warnedAt, d.warned = 0, h.ticks, true
}
