package placement

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

const meta = uint64(routing.MetaShard)

// StateMachine applies placement commands in the meta shard.
type StateMachine struct{}

// New returns the meta shard's state machine.
func New() *StateMachine { return &StateMachine{} }

// Apply applies cmd into b (an indexed batch).
func (sm *StateMachine) Apply(b *pebble.Batch, _ *concordpb.ShardDescriptor, cmd *storepb.Command) (*storepb.CommandResult, error) {
	switch k := cmd.GetKind().(type) {
	case *storepb.Command_AddNode:
		return addNode(b, k.AddNode.GetAddress())
	case *storepb.Command_UpdateDescriptor:
		return &storepb.CommandResult{}, updateDescriptor(b, k.UpdateDescriptor.GetShard())
	case *storepb.Command_ExpireSessions:
		return &storepb.CommandResult{}, nil // the meta shard keeps no sessions
	default:
		return &storepb.CommandResult{
			ErrorCode:    uint32(codes.InvalidArgument),
			ErrorMessage: fmt.Sprintf("command %T is not a placement command", k),
		}, nil
	}
}

// addNode registers address under a fresh node id. An UP node already at
// that address lost its data (a fresh process now answers there), so it is
// marked REPLACED; its replicas get replaced by the new node's.
func addNode(b *pebble.Batch, address string) (*storepb.CommandResult, error) {
	var ctr storepb.MetaCounters
	if _, err := storage.GetProto(b, keys.MetaCounters(meta), &ctr); err != nil {
		return nil, err
	}
	id := ctr.GetNextNodeId()
	nodes, err := Nodes(b)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.GetAddress() == address && n.GetState() == concordpb.NodeState_NODE_UP {
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
	nodes, err = Nodes(b)
	if err != nil {
		return nil, err
	}
	return &storepb.CommandResult{NodeId: id, Nodes: nodes}, nil
}

func updateDescriptor(b *pebble.Batch, d *concordpb.ShardDescriptor) error {
	var cur concordpb.ShardDescriptor
	found, err := storage.GetProto(b, keys.MetaShard(meta, d.GetShardId()), &cur)
	if err != nil || (found && cur.GetEpoch() >= d.GetEpoch()) {
		return err
	}
	return storage.SetProto(b, keys.MetaShard(meta, d.GetShardId()), d)
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
