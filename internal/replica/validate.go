package replica

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/confchange"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// ErrInvalidMessage wraps the reason a peer's message was refused before it
// reached raft. Nothing was stepped; the caller drops the message.
var ErrInvalidMessage = errors.New("invalid raft message")

// maxIndex bounds every index and term a peer may name: far beyond any real
// log (2^62 entries, or elections), and far enough below 2^64 that raft's
// index and term arithmetic (index+1, term+1) can never wrap.
const maxIndex = 1 << 62

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
}

// checkStep refuses what this replica can tell a legitimate peer never
// sends: a sender inconsistent with the replica ids it knows, and the
// malformed messages raft trusts its peers not to send (raft panics on them,
// taking the node down: entries not following m.Index, a heartbeat
// commit beyond this log, a snapshot whose configuration cannot be
// restored). It cannot tell a well-formed message forged in the name of a
// member from the member's own: the peer port is not authenticated.
func (r *Replica) checkStep(fromNode ids.NodeID, m *pb.Message) error {
	last, _ := r.log.LastIndex()
	return checkMessage(r.cfg.ReplicaID, r.nodes, r.desc, last, fromNode, m)
}

// CheckFirst is checkStep for the first message of replica id, not created
// yet: it knows no peer and holds no log. The host calls it before it
// records the replica, so that no invalid message persists anything.
func CheckFirst(id ids.ReplicaID, fromNode ids.NodeID, m *pb.Message) error {
	return checkMessage(id, nil, nil, 0, fromNode, m)
}

// checkMessage is checkStep for replica self, which knows the nodes of the
// replica ids in nodes, has applied descriptor desc (nil: uninitialized) and
// holds a log up to index last.
func checkMessage(self ids.ReplicaID, nodes map[ids.ReplicaID]ids.NodeID, desc *concordpb.ShardDescriptor, last uint64,
	fromNode ids.NodeID, m *pb.Message) error {
	from := ids.ReplicaID(m.GetFrom())
	switch {
	case from == 0 || from == self || ids.ReplicaID(m.GetTo()) != self:
		return invalid("from replica %d to replica %d at replica %d", from, m.GetTo(), self)
	case m.GetTerm() == 0 || m.GetTerm() >= maxIndex || m.GetIndex() >= maxIndex || m.GetLogTerm() >= maxIndex || m.GetCommit() >= maxIndex:
		return invalid("term %d, index %d, log term %d, commit %d out of range", m.GetTerm(), m.GetIndex(), m.GetLogTerm(), m.GetCommit())
	}
	// A replica id lives on one node for ever (ids are never reused).
	if node, ok := nodes[from]; ok && node != fromNode {
		return invalid("replica %d is on node %d, not on the sender, node %d", from, node, fromNode)
	} else if !ok && desc != nil && uint64(from) < desc.GetNextReplicaId() {
		// Allocated by a configuration this replica has applied, and not a
		// member it knows of: removed, never to come back.
		return invalid("replica %d was removed from the shard", from)
	}
	switch m.GetType() {
	case pb.MsgApp:
		// raft appends m.Entries after m.Index without checking that they
		// follow it (maybeAppend panics on a conflict at or below commit).
		prevTerm := m.GetLogTerm()
		for i, e := range m.GetEntries() {
			if e.GetIndex() != m.GetIndex()+1+uint64(i) || e.GetTerm() < prevTerm || e.GetTerm() > m.GetTerm() {
				return invalid("entry %d (index %d, term %d) does not follow index %d, log term %d in term %d",
					i, e.GetIndex(), e.GetTerm(), m.GetIndex(), prevTerm, m.GetTerm())
			}
			prevTerm = e.GetTerm()
		}
	case pb.MsgHeartbeat:
		// A leader sends a follower's commit as at most what it acknowledged;
		// raft panics on a commit beyond its log.
		if m.GetCommit() > last {
			return invalid("heartbeat commit %d beyond last index %d", m.GetCommit(), last)
		}
	case pb.MsgSnap:
		return checkSnapshot(m)
	}
	return nil
}

// checkSnapshot refuses a snapshot raft would panic on restoring.
func checkSnapshot(m *pb.Message) error {
	md := m.GetSnapshot().GetMetadata()
	if md.GetIndex() == 0 || md.GetIndex() >= maxIndex || md.GetTerm() == 0 || md.GetTerm() > m.GetTerm() {
		return invalid("snapshot at index %d, term %d in term %d", md.GetIndex(), md.GetTerm(), m.GetTerm())
	}
	cs := md.GetConfState()
	if cs == nil || len(cs.GetVoters()) == 0 {
		return invalid("snapshot without voters")
	}
	trk := tracker.MakeProgressTracker(1, 0)
	cfg, prs, err := confchange.Restore(confchange.Changer{Tracker: trk, LastIndex: md.GetIndex()}, cs)
	if err != nil {
		return invalid("snapshot configuration: %v", err)
	}
	trk.Config, trk.Progress = cfg, prs
	if err := cs.Equivalent(trk.ConfState()); err != nil {
		return invalid("snapshot configuration: %v", err)
	}
	return nil
}

// CheckSupersede reports whether a leader's message m from fromNode, to
// replica m.To of this shard above this replica's id, may replace this
// replica (which is then destroyed and tombstoned). Only a leader's first
// messages create a replica, and the leader must be a member of this
// replica's configuration or of a newer one: a member of the descriptor this
// replica applied (on the node that descriptor names), or a replica id
// allocated after it. And m.To must be allocated after this replica's
// configuration (an id below its next replica id that it does not list was
// removed). newer, if not nil, is a newer descriptor of the shard the caller
// knows (placement's): a sender in it counts as a member.
//
// An uninitialized replica (no descriptor) holds nothing; the caller's own
// creation checks decide alone.
func (r *Replica) CheckSupersede(fromNode ids.NodeID, m *pb.Message, newer *concordpb.ShardDescriptor) error {
	d := r.desc
	if d == nil {
		return nil
	}
	from, to := m.GetFrom(), m.GetTo()
	if to < d.GetNextReplicaId() {
		return invalid("replica %d is not newer than this replica's configuration (next id %d)", to, d.GetNextReplicaId())
	}
	if member(d, from, fromNode) {
		return nil
	}
	if newer != nil && newer.GetEpoch() > d.GetEpoch() && member(newer, from, fromNode) {
		return nil
	}
	return invalid("replica %d on node %d is no member of the shard's configuration (epoch %d) or a newer one", from, fromNode, d.GetEpoch())
}

// member reports whether replica id of d's shard is on node per d.
func member(d *concordpb.ShardDescriptor, id uint64, node ids.NodeID) bool {
	for _, rd := range d.GetReplicas() {
		if rd.GetReplicaId() == id {
			return ids.NodeID(rd.GetNodeId()) == node
		}
	}
	return false
}
