package replica

import (
	"errors"
	"fmt"

	"github.com/concord-kv/concord/internal/ids"
)

// ErrDropped is returned when raft refused a proposal (no leader known, a
// leadership transfer in progress, or too much uncommitted data). The command
// was not applied; retrying is safe.
var ErrDropped = errors.New("replica: proposal dropped by raft")

// ErrAmbiguous is returned when a proposal was handed to raft but the replica
// lost leadership, or gave up waiting, before it applied: it may or may not
// apply. Retrying with the same session and sequence number is safe.
var ErrAmbiguous = errors.New("replica: outcome unknown (leadership lost or timed out after proposing)")

// ErrReadTimeout is returned when a linearizable read waited longer than
// PendingTimeoutTicks for its barrier (its ReadIndex round never came back,
// or it never got one). A read changes nothing, so unlike a proposal's
// timeout it is not ambiguous: it definitely did nothing, and retrying is
// safe.
var ErrReadTimeout = errors.New("replica: read not confirmed in time; nothing was changed, retry")

// ErrRemoved is returned for work on a replica that has been removed from its
// shard on this node.
var ErrRemoved = errors.New("replica: removed from this node")

// ErrVoteQuiet is returned by Campaign on a replica loaded less than an
// election timeout ago that may back a leader's read lease (lease.go).
var ErrVoteQuiet = errors.New("replica: loaded less than an election timeout ago; not campaigning yet")

// ErrRefusingLeadership is returned by Campaign on a replica that refuses
// leadership because its node is stopping (handoff.go).
var ErrRefusingLeadership = errors.New("replica: node is stopping; not campaigning")

// NotLeaderError is returned when a request that needs the shard leader
// reaches another replica. Nothing was applied.
type NotLeaderError struct {
	Shard ids.ShardID
	// LeaderNode is the node of the leader this replica knows of; 0 if none.
	LeaderNode ids.NodeID
}

func (e *NotLeaderError) Error() string {
	if e.LeaderNode == 0 {
		return fmt.Sprintf("shard %d: no leader known", e.Shard)
	}
	return fmt.Sprintf("shard %d: not the leader; leader is on node %d", e.Shard, e.LeaderNode)
}
