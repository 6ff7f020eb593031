package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

const meta = uint64(routing.MetaShard)

// StateMachine applies placement commands in the meta shard.
type StateMachine struct{}

// New returns the meta shard's state machine.
func New() *StateMachine { return &StateMachine{} }

// SnapshotInstalled is a no-op: the meta shard's state machine keeps
// nothing in memory, so a raft snapshot replacing its state leaves nothing
// stale.
func (sm *StateMachine) SnapshotInstalled() {}

// Flush is a no-op: Apply writes everything into the batch itself.
func (sm *StateMachine) Flush(*pebble.Batch, *storepb.AppliedState) error { return nil }

// Apply applies cmd into b (an indexed batch).
func (sm *StateMachine) Apply(b *pebble.Batch, _ *concordpb.ShardDescriptor, cmd *storepb.Command) (*storepb.CommandResult, error) {
	switch k := cmd.GetKind().(type) {
	case *storepb.Command_AddNode:
		return addNode(b, k.AddNode)
	case *storepb.Command_MarkNode:
		return markNode(b, k.MarkNode)
	case *storepb.Command_UpdateDescriptor:
		return &storepb.CommandResult{}, updateDescriptor(b, k.UpdateDescriptor.GetShard())
	case *storepb.Command_SetClusterVersion:
		return setClusterVersion(b, k.SetClusterVersion)
	case *storepb.Command_ExpireSessions:
		return &storepb.CommandResult{}, nil // the meta shard keeps no sessions
	default:
		return &storepb.CommandResult{
			ErrorCode:    uint32(codes.InvalidArgument),
			ErrorMessage: fmt.Sprintf("command %T is not a placement command", k),
		}, nil
	}
}

// addNode registers address under a fresh node id. An UP, SUSPECT or DEAD
// node already at that address lost its data (a fresh process now answers
// there), so it is marked REPLACED; its replicas get replaced by the new
// node's.
//
// A join token makes the join idempotent: a retry whose first answer was
// lost sends the same token and gets the id the first attempt registered,
// changing nothing (without it, the retry would mark the first new id
// REPLACED by a second one, a chain whose replicas are never replaced). The
// token of a REMOVED node is refused: a removed identity never comes back.
//
// A join is refused below the cluster's version (joinRefusal), here and
// not only where the placement leader checked it: another placement
// leader's raise may have applied in between.
func addNode(b *pebble.Batch, add *storepb.AddNode) (*storepb.CommandResult, error) {
	address, token := add.GetAddress(), add.GetJoinToken()
	if address == "" {
		return refuse(codes.InvalidArgument, "add node: empty address"), nil
	}
	cv, err := ClusterVersion(b)
	if err != nil {
		return nil, err
	}
	if res := joinRefusal(cv, version.Level(add.GetLevel())); res != nil {
		return res, nil
	}
	nodes, err := Nodes(b)
	if err != nil {
		return nil, err
	}
	if len(token) > 0 {
		id, found, err := tokenNode(b, token)
		if err != nil || found {
			return registered(nodes, id, address), err
		}
	}
	var ctr storepb.MetaCounters
	if _, err := storage.GetProto(b, keys.MetaCounters(meta), &ctr); err != nil {
		return nil, err
	}
	id := ctr.GetNextNodeId()
	for _, n := range nodes {
		if n.GetAddress() == address && replaceable(n.GetState()) {
			n.State, n.ReplacedBy = concordpb.NodeState_NODE_REPLACED, id
			if err := storage.SetProto(b, keys.MetaNode(meta, n.GetNodeId()), n); err != nil {
				return nil, err
			}
		}
	}
	n := &concordpb.NodeDescriptor{NodeId: id, Address: address}
	if err := storage.SetProto(b, keys.MetaNode(meta, id), n); err != nil {
		return nil, err
	}
	ctr.NextNodeId = id + 1
	if err := storage.SetProto(b, keys.MetaCounters(meta), &ctr); err != nil {
		return nil, err
	}
	if len(token) > 0 {
		if err := b.Set(keys.MetaJoinToken(meta, token), binary.BigEndian.AppendUint64(nil, id), nil); err != nil {
			return nil, err
		}
	}
	nodes, err = Nodes(b)
	if err != nil {
		return nil, err
	}
	return &storepb.CommandResult{NodeId: id, Nodes: nodes}, nil
}

// joinRefusal refuses a join from a binary at level joiner (Unknown: the
// proposal named none) to a cluster at version cv, or returns nil. From
// version.OrderedJoins on, every placement leader names the joiner's
// level, so a join without one was checked against an older version, by a
// leader that had not applied the raise since: it is refused as
// Unavailable, and the joiner's retry is checked against the version now.
func joinRefusal(cv, joiner version.Level) *storepb.CommandResult {
	switch {
	case joiner == version.Unknown && cv.Allows(version.OrderedJoins):
		return refuse(codes.Unavailable, fmt.Sprintf(
			"this join was checked against a cluster version below %d, which has risen since; retry it", cv))
	case joiner != version.Unknown && joiner < cv:
		return refuse(codes.FailedPrecondition, version.JoinRefusal(cv, joiner))
	}
	return nil
}

// replaceable reports whether a node in state s is taken over by a fresh
// process at its address: one that may still hold replicas. A node already
// REPLACED points at its own successor; LEAVING and REMOVED are the
// operator's, and draining handles their replicas.
func replaceable(s concordpb.NodeState) bool {
	switch s {
	case concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD:
		return true
	}
	return false
}

// tokenNode returns the node id token registered, if any.
func tokenNode(r pebble.Reader, token []byte) (uint64, bool, error) {
	v, closer, err := r.Get(keys.MetaJoinToken(meta, token))
	if err == pebble.ErrNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("placement: join token record of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// registered answers a repeated join token: the node it registered, unless
// that identity was removed, or the retry comes from another address.
func registered(nodes []*concordpb.NodeDescriptor, id uint64, address string) *storepb.CommandResult {
	for _, n := range nodes {
		if n.GetNodeId() != id {
			continue
		}
		switch {
		case n.GetState() == concordpb.NodeState_NODE_REMOVED:
			return refuse(codes.FailedPrecondition, fmt.Sprintf(
				"node %d, which this join token registered, was removed and cannot rejoin; wipe the data dir to join as a new node", id))
		case n.GetAddress() != address:
			return refuse(codes.FailedPrecondition, fmt.Sprintf(
				"this join token registered node %d at %s, not %s", id, n.GetAddress(), address))
		}
		return &storepb.CommandResult{NodeId: id, Nodes: nodes}
	}
	return refuse(codes.Internal, fmt.Sprintf("join token names node %d, which placement does not know", id))
}

// markNode sets a node's state, if the transition is allowed (see
// allowedMark).
func markNode(b *pebble.Batch, m *storepb.MarkNode) (*storepb.CommandResult, error) {
	nodes, err := Nodes(b)
	if err != nil {
		return nil, err
	}
	var n *concordpb.NodeDescriptor
	remaining := 0
	for _, d := range nodes {
		switch {
		case d.GetNodeId() == m.GetNodeId():
			n = d
		case d.GetState() == concordpb.NodeState_NODE_UP || d.GetState() == concordpb.NodeState_NODE_SUSPECT:
			remaining++
		}
	}
	if n == nil {
		return refuse(codes.NotFound, fmt.Sprintf("node %d is not a member of the cluster", m.GetNodeId())), nil
	}
	from, to := n.GetState(), m.GetState()
	if from == to {
		return &storepb.CommandResult{NodeId: n.GetNodeId(), Nodes: nodes}, nil
	}
	if err := allowedMark(from, to); err != nil {
		return refuse(codes.FailedPrecondition, fmt.Sprintf("node %d: %v", n.GetNodeId(), err)), nil
	}
	// A dead node takes no capacity with it; an UP or SUSPECT one does.
	if to == concordpb.NodeState_NODE_LEAVING && from != concordpb.NodeState_NODE_DEAD && remaining < int(m.GetMinRemaining()) {
		return refuse(codes.FailedPrecondition, fmt.Sprintf(
			"removing node %d would leave %d up nodes, fewer than the %d replicas each shard needs; add a node first",
			n.GetNodeId(), remaining, m.GetMinRemaining())), nil
	}
	n.State = to
	if err := storage.SetProto(b, keys.MetaNode(meta, n.GetNodeId()), n); err != nil {
		return nil, err
	}
	return &storepb.CommandResult{NodeId: n.GetNodeId(), Nodes: nodes}, nil
}

// allowedMark says whether MarkNode may move a node from state from to
// state to: REMOVED is final; LEAVING goes only to REMOVED (a drain is not
// undone); UP, SUSPECT and DEAD move among themselves (liveness) and to
// LEAVING (removal starts); a REPLACED node may only be REMOVED. REPLACED is
// set by AddNode alone, which names the successor.
func allowedMark(from, to concordpb.NodeState) error {
	switch from {
	case concordpb.NodeState_NODE_REMOVED:
		return errors.New("it was removed, which is final")
	case concordpb.NodeState_NODE_LEAVING, concordpb.NodeState_NODE_REPLACED:
		if to != concordpb.NodeState_NODE_REMOVED {
			return fmt.Errorf("a %s node can only become REMOVED, not %s", stateName(from), stateName(to))
		}
		return nil
	}
	switch to {
	case concordpb.NodeState_NODE_UP, concordpb.NodeState_NODE_SUSPECT, concordpb.NodeState_NODE_DEAD, concordpb.NodeState_NODE_LEAVING:
		return nil
	case concordpb.NodeState_NODE_REMOVED:
		return fmt.Errorf("a %s node must be LEAVING (drained) before it is REMOVED", stateName(from))
	}
	return fmt.Errorf("cannot mark a node %s", stateName(to))
}

func stateName(s concordpb.NodeState) string { return strings.TrimPrefix(s.String(), "NODE_") }

func refuse(code codes.Code, msg string) *storepb.CommandResult {
	return &storepb.CommandResult{ErrorCode: uint32(code), ErrorMessage: msg}
}

func updateDescriptor(b *pebble.Batch, d *concordpb.ShardDescriptor) error {
	var cur concordpb.ShardDescriptor
	found, err := storage.GetProto(b, keys.MetaShard(meta, d.GetShardId()), &cur)
	if err != nil || (found && cur.GetEpoch() >= d.GetEpoch()) {
		return err
	}
	return storage.SetProto(b, keys.MetaShard(meta, d.GetShardId()), d)
}

// setClusterVersion raises the cluster's version to set.version; the
// version is never lowered, so a proposal that arrives late or twice
// changes nothing. A raise that names the registrations it was decided on
// (next_node_id) is refused if a node registered since: its decision did
// not see that node, which a placement leader other than the proposer may
// have let in at a lower level.
func setClusterVersion(b *pebble.Batch, set *storepb.SetClusterVersion) (*storepb.CommandResult, error) {
	var ctr storepb.MetaCounters
	if _, err := storage.GetProto(b, keys.MetaCounters(meta), &ctr); err != nil {
		return nil, err
	}
	v := version.Level(set.GetVersion())
	if v <= version.Level(ctr.GetClusterVersion()) {
		return &storepb.CommandResult{}, nil
	}
	if basis := set.GetNextNodeId(); basis != 0 && basis != ctr.GetNextNodeId() {
		return refuse(codes.FailedPrecondition, fmt.Sprintf(
			"raise of the cluster version to %d: decided on the nodes registered before id %d, and %d registered since",
			v, basis, ctr.GetNextNodeId()-basis)), nil
	}
	ctr.ClusterVersion = uint32(v)
	return &storepb.CommandResult{}, storage.SetProto(b, keys.MetaCounters(meta), &ctr)
}

// NextNodeID reads the id the next node to register gets: it changes with
// every registration, so a raise of the cluster's version names it to say
// which nodes it was decided on (SetClusterVersion.next_node_id).
func NextNodeID(r pebble.Reader) (uint64, error) {
	var ctr storepb.MetaCounters
	_, err := storage.GetProto(r, keys.MetaCounters(meta), &ctr)
	return ctr.GetNextNodeId(), err
}

// ClusterVersion reads the cluster's version: Base until the placement
// leader first raised it (a cluster bootstrapped at any level starts at
// Base, so that every bootstrapping node writes the same records whatever
// its binary).
func ClusterVersion(r pebble.Reader) (version.Level, error) {
	var ctr storepb.MetaCounters
	if _, err := storage.GetProto(r, keys.MetaCounters(meta), &ctr); err != nil {
		return version.Unknown, err
	}
	return max(version.Base, version.Level(ctr.GetClusterVersion())), nil
}

// Bootstrap writes the initial placement records into w.
func Bootstrap(w pebble.Writer, nodes []*concordpb.NodeDescriptor, shards []*concordpb.ShardDescriptor) error {
	next := uint64(1) // node id 0 means "no node"
	for _, n := range nodes {
		if err := storage.SetProto(w, keys.MetaNode(meta, n.GetNodeId()), n); err != nil {
			return err
		}
		next = max(next, n.GetNodeId()+1)
	}
	for _, d := range shards {
		if err := storage.SetProto(w, keys.MetaShard(meta, d.GetShardId()), d); err != nil {
			return err
		}
	}
	return storage.SetProto(w, keys.MetaCounters(meta), &storepb.MetaCounters{NextNodeId: next})
}

// Nodes reads every node descriptor, in node id order.
func Nodes(r pebble.Reader) ([]*concordpb.NodeDescriptor, error) {
	lo, hi := keys.MetaNodeSpan(meta)
	return scanProtos(r, lo, hi, func() *concordpb.NodeDescriptor { return &concordpb.NodeDescriptor{} })
}

// Shards reads every shard descriptor, in shard id order.
func Shards(r pebble.Reader) ([]*concordpb.ShardDescriptor, error) {
	lo, hi := keys.MetaShardSpan(meta)
	return scanProtos(r, lo, hi, func() *concordpb.ShardDescriptor { return &concordpb.ShardDescriptor{} })
}

func scanProtos[T proto.Message](r pebble.Reader, lo, hi []byte, mk func() T) ([]T, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var out []T
	for ok := it.First(); ok; ok = it.Next() {
		m := mk()
		if err := proto.Unmarshal(it.Value(), m); err != nil {
			it.Close()
			return nil, fmt.Errorf("placement: decode %x: %w", it.Key(), err)
		}
		out = append(out, m)
	}
	return out, it.Close()
}
