package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/multiraft"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// backend is the node as the front door sees it: it implements
// grpcapi.Backend by delegating to the node, so the node's own exported API
// stays what cli and tests use (New, Start, Stop, Shutdown, Addr, ID).
type backend struct{ n *Node }

var _ grpcapi.Backend = backend{}

func (n *Node) backend() backend { return backend{n: n} }

func (b backend) Ready() <-chan struct{} { return b.n.ready }
func (b backend) ID() ids.NodeID         { return b.n.ID() }
func (b backend) ClusterID() uint64      { return b.n.ident.Load().GetClusterId() }

func (b backend) Descriptors() map[ids.ShardID]*concordpb.ShardDescriptor {
	return b.n.shardDescriptors()
}

func (b backend) Table() *routing.Table                       { return b.n.routingTable() }
func (b backend) Leader(shard ids.ShardID) (ids.NodeID, bool) { return b.n.leaderOf(shard) }
func (b backend) Resolve(node ids.NodeID) (string, bool)      { return b.n.book.resolve(node) }
func (b backend) Nodes() []*concordpb.NodeDescriptor          { return b.n.book.all() }
func (b backend) Blocked(node ids.NodeID) bool                { return b.n.blocked(node) }
func (b backend) PlacementLeaderHint() ids.NodeID             { return b.n.placementLeaderHint() }

func (b backend) Conn(addr string) (grpc.ClientConnInterface, error) {
	c, err := b.n.conns.get(addr)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return c, nil
}

func (b backend) ClusterVersion() version.Level { return version.Level(b.n.clusterVersion.Load()) }

func (b backend) HasReplica(shard ids.ShardID) bool {
	info, ok := b.n.host.Info(shard)
	return ok && info.Desc != nil
}

func (b backend) Propose(ctx context.Context, shard ids.ShardID, cmd *storepb.Command) (*storepb.CommandResult, error) {
	start := time.Now()
	res, err := b.n.host.Propose(ctx, shard, cmd)
	b.n.metrics.Proposal(err == nil, time.Since(start))
	return res, err
}

func (b backend) ReadIndex(ctx context.Context, shard ids.ShardID) (grpcapi.ShardView, error) {
	v, err := b.n.host.ReadIndex(ctx, shard)
	if err != nil {
		return nil, err
	}
	if b.n.afterReadIndex != nil {
		b.n.afterReadIndex()
	}
	return shardView{v: v, shard: shard}, nil
}

// shardView reads one shard from the view a linearizable read was released
// with.
type shardView struct {
	v     *storage.ReadView
	shard ids.ShardID
}

func (s shardView) Get(key []byte) (value []byte, expireAt int64, found bool, err error) {
	err = s.v.Read(func(r storage.Reader) error {
		value, expireAt, found, err = kv.Get(r, uint64(s.shard), key, nowMs())
		return err
	})
	return value, expireAt, found, readErr(err)
}

// GetMany reads every key through one iterator of the view
// (storage.ReadView.ReadPoints), at one clock reading: a pipeline's GETs
// of the shard, released together, cost a positioning each, not a clone.
// A key asked for again (a hot key, redis-benchmark's one key) is read
// once: the view cannot change between the two, so its result is shared.
func (s shardView) GetMany(keys [][]byte, budget *kv.Budget) ([]*concordpb.OpResult, error) {
	now := nowMs()
	res := make([]*concordpb.OpResult, len(keys))
	all := make([]concordpb.OpResult, len(keys)) // one allocation for the results
	earlier := readBefore(keys)
	err := s.v.ReadPoints(func(r storage.Reader) error {
		for i, key := range keys {
			if err := budget.Spent(); err != nil {
				return err // spent by a read running beside this one
			}
			if j := earlier(i); j >= 0 {
				// Shared here, but its reply (a Redis MGET's) holds
				// the value once more: charged again.
				if err := budget.Take(len(res[j].GetValue())); err != nil {
					return err
				}
				res[i] = res[j]
				continue
			}
			value, expireAt, found, err := kv.Get(r, uint64(s.shard), key, now)
			if err != nil {
				return err
			}
			// Charged as read, so a batch over its budget fails at the
			// value that passes it instead of holding them all first.
			if err := budget.Take(len(value)); err != nil {
				return err
			}
			all[i].Ok, all[i].Value, all[i].ExpireAtUnixMs = found, value, expireAt
			res[i] = &all[i]
		}
		return nil
	})
	if err != nil {
		return nil, readErr(err)
	}
	return res, nil
}

// readBefore returns, for keys, a function telling the index of an
// earlier occurrence of key i (-1: none). A pipeline's batch is small, so
// it compares with the keys before, without a map, up to 32 keys.
func readBefore(keys [][]byte) func(i int) int {
	if len(keys) <= 32 {
		return func(i int) int {
			for j := range i {
				if bytes.Equal(keys[j], keys[i]) {
					return j
				}
			}
			return -1
		}
	}
	first := make(map[string]int, len(keys))
	return func(i int) int {
		if j, ok := first[string(keys[i])]; ok {
			return j
		}
		first[string(keys[i])] = i
		return -1
	}
}

func (s shardView) Scan(start, end []byte, page kv.Page) (kvs []*concordpb.KeyValue, more bool, err error) {
	err = s.v.Read(func(r storage.Reader) error {
		kvs, more, err = kv.Scan(r, uint64(s.shard), start, end, page, nowMs())
		return err
	})
	return kvs, more, readErr(err)
}

func (s shardView) State() (applied uint64, desc *concordpb.ShardDescriptor, err error) {
	err = s.v.Read(func(r storage.Reader) error {
		var as storepb.AppliedState
		if _, err := storage.GetProto(r, keys.Applied(uint64(s.shard)), &as); err != nil {
			return err
		}
		desc = &concordpb.ShardDescriptor{}
		_, err := storage.GetProto(r, keys.Descriptor(uint64(s.shard)), desc)
		applied = as.GetIndex()
		return err
	})
	return applied, desc, readErr(err)
}

// Export reads one chunk of a backup through the view; each chunk is its
// own short read, so a slow backup client never holds the engine open
// (Stop waits for reads in progress, not for the stream).
func (s shardView) Export(start []byte, maxBytes int, atMs int64) (recs []*concordpb.BackupRecord, more bool, err error) {
	err = s.v.Read(func(r storage.Reader) error {
		recs, more, err = kv.Export(r, uint64(s.shard), start, maxBytes, atMs)
		return err
	})
	return recs, more, readErr(err)
}

func (s shardView) Close() { s.v.Release() }

// LocalGet and LocalScan serve stale reads from the engine's current state.
// The replica may be removed while they read, its data destroyed: they
// answer only if the same initialized replica is still published after the
// read (the host unpublishes a replica before destroying its data), so a
// removed replica's empty span is never reported as "not found".
func (b backend) LocalGet(shard ids.ShardID, key []byte) (value []byte, expireAt int64, found bool, err error) {
	err = b.readReplica(shard, func(r storage.Reader) error {
		value, expireAt, found, err = kv.Get(r, uint64(shard), key, nowMs())
		return err
	})
	return value, expireAt, found, err
}

// LocalGetMany reads keys from one view of the engine (one instant, as a
// raft batch of GETs would), through GetMany.
func (b backend) LocalGetMany(shard ids.ShardID, keys [][]byte, budget *kv.Budget) (res []*concordpb.OpResult, err error) {
	err = b.readReplica(shard, func(storage.Reader) error {
		v, err := b.n.eng.NewReadView(1)
		if err != nil {
			return err
		}
		defer v.Release()
		res, err = shardView{v: v, shard: shard}.GetMany(keys, budget)
		return err
	})
	return res, err
}

func (b backend) LocalScan(shard ids.ShardID, start, end []byte, page kv.Page) (kvs []*concordpb.KeyValue, more bool, err error) {
	err = b.readReplica(shard, func(r storage.Reader) error {
		kvs, more, err = kv.Scan(r, uint64(shard), start, end, page, nowMs())
		return err
	})
	return kvs, more, err
}

// nowMs is the time a read outside apply measures expiry against: this
// node's wall clock, read when the read runs (after its barrier), so a key
// is absent from the moment it expires whether or not the sweep has
// deleted it yet.
func nowMs() int64 { return time.Now().UnixMilli() }

func (b backend) readReplica(shard ids.ShardID, f func(r storage.Reader) error) error {
	before, ok := b.n.host.Info(shard)
	if !ok || before.Desc == nil {
		return multiraft.ErrNoReplica
	}
	if err := b.n.eng.Read(f); err != nil {
		return readErr(err)
	}
	if after, ok := b.n.host.Info(shard); !ok || after.ReplicaID != before.ReplicaID {
		return multiraft.ErrNoReplica
	}
	return nil
}

// readErr makes a read that arrived after storage closed (the node is
// stopping) fail as the host's work does then: Unavailable.
func readErr(err error) error {
	if errors.Is(err, storage.ErrClosed) {
		return fmt.Errorf("%w: %w", multiraft.ErrStopped, err)
	}
	return err
}

func (b backend) ChangeReplicas(ctx context.Context, c grpcapi.Change) (*concordpb.ShardDescriptor, error) {
	h := b.n.host
	switch c.Kind {
	case concordpb.ChangeKind_CHANGE_ADD_LEARNER:
		return h.AddLearner(ctx, c.Shard, c.Epoch, c.Node)
	case concordpb.ChangeKind_CHANGE_PROMOTE:
		return h.PromoteLearner(ctx, c.Shard, c.Epoch, c.Replica)
	case concordpb.ChangeKind_CHANGE_REMOVE:
		return h.RemoveReplica(ctx, c.Shard, c.Epoch, c.Replica, c.MinVoters)
	default:
		return h.ChangeReplicas(ctx, c.Shard, c.Epoch, c.Replica, c.Node)
	}
}

func (b backend) TransferLeader(ctx context.Context, shard ids.ShardID, epoch uint64, target ids.ReplicaID) error {
	return b.n.host.TransferLeader(ctx, shard, epoch, target)
}

func (b backend) AnswerProbe(req *concordpb.ProbeRequest) *concordpb.ProbeResponse {
	return b.n.answerProbe(req)
}

func (b backend) AddNode(ctx context.Context, addr string, token []byte, level version.Level) (ids.NodeID, []*concordpb.NodeDescriptor, error) {
	return b.n.addNode(ctx, addr, token, level)
}

func (b backend) AddressRejoining(addr string) { b.n.addressRejoining(addr) }

func (b backend) RemoveNode(ctx context.Context, node ids.NodeID) (*concordpb.NodeDescriptor, error) {
	return b.n.removeNode(ctx, node)
}

func (b backend) HandleHeartbeat(ctx context.Context, req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	return b.n.handleHeartbeat(ctx, req)
}

func (b backend) ClusterStatus(ctx context.Context, linearizable bool) (*concordpb.StatusResponse, error) {
	return b.n.clusterStatus(ctx, linearizable)
}
func (b backend) LocalStatus() *concordpb.StatusResponse { return b.n.localStatus() }

func (b backend) RaftReceiver() concordpb.RaftTransportServer { return b.n.transport.Server() }

func (b backend) Die(clean bool)                            { b.n.die(clean) }
func (b backend) Partition(reachable []string) []ids.NodeID { return b.n.partitionFrom(reachable) }
func (b backend) Heal()                                     { b.n.heal() }
func (b backend) DiskLow(low bool) error                    { return b.n.setDiskLow(low) }
