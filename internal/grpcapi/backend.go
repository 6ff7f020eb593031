package grpcapi

import (
	"context"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// Backend is everything the services need from the node that runs them. The
// node implements it (internal/node/backend.go); tests implement it with a
// fake. Each service takes only the part it uses, so a reader sees at a
// glance what a service can do to the node.
//
// Every method is called from the goroutine of one RPC, many at once, so all
// must be safe for concurrent use. Methods that read raft state (everything
// except Ready, ID, Blocked, AnswerProbe and the Faults) may be called only
// after Ready is closed; the services check Ready first.
type Backend interface {
	KVBackend
	ClusterBackend
	RaftBackend
	Faults
}

// Router is the node's view of where shards and peers are, and its
// connections to peers: what a service needs to forward a request.
type Router interface {
	// Ready is closed once the node has an identity and raft runs.
	Ready() <-chan struct{}
	// ID is this node's id, 0 until it has one.
	ID() ids.NodeID
	// Descriptors returns every shard this node knows of, the meta shard
	// included: its own replicas' descriptors, else the placement leader's
	// view from heartbeats. The caller may not modify them.
	Descriptors() map[ids.ShardID]*concordpb.ShardDescriptor
	// Table is the routing table of Descriptors, cached by the node
	// between changes (a lookup per request must not rebuild it).
	Table() *routing.Table
	// Leader returns the node leading shard as far as this node knows (0 if
	// unknown) and whether that is this node.
	Leader(shard ids.ShardID) (node ids.NodeID, local bool)
	// Resolve returns the address of node from the address book.
	Resolve(node ids.NodeID) (addr string, ok bool)
	// Conn returns the pooled connection to addr; the caller must not close
	// it. Calls on it carry this node's id (see StampFromNode).
	Conn(addr string) (grpc.ClientConnInterface, error)
	// Blocked reports whether a fault-injected partition cuts this node off
	// from node; always false without a partition.
	Blocked(node ids.NodeID) bool
	// ClusterVersion is the cluster's version as this node last learned it
	// (version.Unknown before it learned any): a proposal may use a feature
	// only where it Allows the feature's level, since every replica can
	// then apply it, and a joining binary below it is refused (package
	// version).
	ClusterVersion() version.Level
}

// KVBackend is what the KV service needs: the local replicas' raft and
// their applied state.
type KVBackend interface {
	Router
	// ClusterID is the id of the node's cluster, 0 until it has one: a
	// call forwarded by a node of another cluster is refused (stream.go).
	ClusterID() uint64
	// HasReplica reports whether this node hosts an initialized replica of
	// shard, which a stale read may read.
	HasReplica(shard ids.ShardID) bool
	// Propose proposes cmd to the local replica of shard and waits until it
	// applies, fails, or ctx ends. Errors are internal (see toStatus).
	Propose(ctx context.Context, shard ids.ShardID, cmd *storepb.Command) (*storepb.CommandResult, error)
	// ReadIndex returns once the local replica of shard, as leader, has
	// applied everything committed before the call, with a view of the
	// shard's state as of that moment, which a linearizable read reads (the
	// replica may be removed, its data destroyed, before the read runs). The
	// caller must Close the view.
	ReadIndex(ctx context.Context, shard ids.ShardID) (ShardView, error)
	// LocalGet and LocalScan read the local replica's current applied state
	// with no raft involvement, as a stale read does. They fail (Unavailable)
	// rather than answer for a replica removed while they read. Like a
	// ShardView, they treat a key expired by this node's clock as absent.
	LocalGet(shard ids.ShardID, key []byte) (value []byte, expireAtUnixMs int64, found bool, err error)
	LocalScan(shard ids.ShardID, start, end []byte, page kv.Page) ([]*concordpb.KeyValue, bool, error)
	// LocalGetMany reads keys as LocalGet does, all at one instant (a
	// stale batch of GETs stays atomic); results as ShardView.GetMany's.
	LocalGetMany(shard ids.ShardID, keys [][]byte, budget *kv.Budget) ([]*concordpb.OpResult, error)
}

// ShardView is one shard's applied state at one instant, from ReadIndex.
// Errors are internal (see toStatus). A key whose expiry has passed by the
// serving node's clock is absent: Get does not find it, Scan skips it (and
// still returns limit live keys where they exist). Get also returns the
// key's expiry (Unix ms, 0: none).
type ShardView interface {
	Get(key []byte) (value []byte, expireAtUnixMs int64, found bool, err error)
	// GetMany reads keys as Get does, in order, cheaper per key than a Get
	// each (a batch of reads of the shard): result i is key i's, as an
	// OP_GET's result (ok: found, value, expire_at_unix_ms). Each value
	// is charged to budget as it is read; the read fails with the
	// budget's error, holding no more, once one does not fit.
	GetMany(keys [][]byte, budget *kv.Budget) ([]*concordpb.OpResult, error)
	// Scan reads one page of the shard's live pairs in [start, end)
	// (kv.Scan): more reports that pairs may follow the page.
	Scan(start, end []byte, page kv.Page) (kvs []*concordpb.KeyValue, more bool, err error)
	// State is the applied index the view is at and the shard's
	// descriptor as of that index.
	State() (appliedIndex uint64, desc *concordpb.ShardDescriptor, err error)
	// Export reads the records live at atMs (Unix ms) with keys at or
	// after start, in key order, about maxBytes of keys and values (at
	// least one record), with their expiry; more reports that records may
	// follow (kv.Export).
	Export(start []byte, maxBytes int, atMs int64) (recs []*concordpb.BackupRecord, more bool, err error)
	// Close releases the view; it must be called exactly once.
	Close()
}

// ClusterBackend is what the Cluster service needs: the node's identity and
// what it does as (or for) the placement leader, the meta shard's leader.
type ClusterBackend interface {
	Router
	// ClusterID is the id of the node's cluster, 0 until it has one.
	ClusterID() uint64
	// Nodes returns the address book, sorted by node id.
	Nodes() []*concordpb.NodeDescriptor
	// AnswerProbe tells a fresh node whether its initial id is unused. It
	// works before Ready.
	AnswerProbe(req *concordpb.ProbeRequest) *concordpb.ProbeResponse
	// PlacementLeaderHint names a node to ask for placement requests when
	// the meta shard's leader is unknown; 0 if there is none.
	PlacementLeaderHint() ids.NodeID
	// ChangeReplicas, on the shard's leader, makes change (validated) and
	// returns the shard's new descriptor.
	ChangeReplicas(ctx context.Context, change Change) (*concordpb.ShardDescriptor, error)
	// TransferLeader, on the shard's leader, hands leadership to voter
	// target and returns once it moved.
	TransferLeader(ctx context.Context, shard ids.ShardID, epoch uint64, target ids.ReplicaID) error
	// AddNode, on the placement leader, allocates a node id for a node
	// joining at addr (or, for a join token seen before, returns the id it
	// registered) and records the new address book.
	AddNode(ctx context.Context, addr string, token []byte, level version.Level) (node ids.NodeID, nodes []*concordpb.NodeDescriptor, err error)
	// AddressRejoining is told, on every node a join reaches, that a fresh
	// process (one with an empty data dir) asks to join from addr: the
	// process that held addr before is gone, and replicas here that follow
	// a leader on it elect another at once instead of waiting for raft's
	// election timeout. It must return at once.
	AddressRejoining(addr string)
	// RemoveNode, on the placement leader, marks node LEAVING so that it is
	// drained; it refuses (FailedPrecondition) when that would leave fewer
	// nodes up than the replication factor.
	RemoveNode(ctx context.Context, node ids.NodeID) (*concordpb.NodeDescriptor, error)
	// HandleHeartbeat, on the placement leader, records a node's report and
	// answers with the cluster's nodes and shard routes; it refuses
	// (Unavailable) if it cannot confirm, within ctx, that this node still
	// leads the meta shard: a deposed leader's state may be stale.
	HandleHeartbeat(ctx context.Context, req *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error)
	// ClusterStatus is the placement leader's whole-cluster view. If
	// linearizable, it first confirms, within ctx, that this node still
	// leads the meta shard, and refuses (Unavailable) if it cannot: a
	// deposed leader's state may be stale.
	ClusterStatus(ctx context.Context, linearizable bool) (*concordpb.StatusResponse, error)
	// LocalStatus reports only this node's replicas, for a stale status
	// request when the placement leader cannot be reached.
	LocalStatus() *concordpb.StatusResponse
}

// RaftBackend is what the RaftTransport service needs.
type RaftBackend interface {
	// Ready is closed once RaftReceiver may be called.
	Ready() <-chan struct{}
	// RaftReceiver is the receive side of the raft transport.
	RaftReceiver() concordpb.RaftTransportServer
}

// Faults are the fault-injection hooks the Admin service calls once it has
// checked that fault injection is enabled. They work before Ready.
type Faults interface {
	// Die stops the process, cleanly (as SIGTERM does) or as kill -9 would.
	// It returns at once, so the caller can answer before the process ends.
	Die(clean bool)
	// Partition cuts this node off from every peer whose address is not in
	// reachable, and returns the ids of the peers now cut off.
	Partition(reachable []string) (blocked []ids.NodeID)
	// Heal ends the partition.
	Heal()
	// DiskLow makes the node's disk space measurement read 0 free bytes
	// (low) or the real figure again, for the space guard to act on as it
	// would on a full disk. It fails, changing nothing, on a node whose
	// guard is off: the fault would have no effect.
	DiskLow(low bool) error
}

// Change is one validated ChangeReplicas request.
type Change struct {
	Kind  concordpb.ChangeKind
	Shard ids.ShardID
	// Epoch is the descriptor epoch the change was planned against; 0: any.
	Epoch uint64
	// Replica is the replica removed (replace, remove) or promoted.
	Replica ids.ReplicaID
	// Node is the node of the new replica (replace, add learner).
	Node ids.NodeID
	// MinVoters (remove) is the fewest voters the removal may leave, if
	// below a majority of the current ones; 0: a majority.
	MinVoters int
}
