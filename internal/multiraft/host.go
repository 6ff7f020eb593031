package multiraft

import (
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
)

// Transport sends raft traffic to other nodes. Send must not block: it may
// drop a message (raft retransmits) and report the peer unreachable.
type Transport interface {
	Send(toNode ids.NodeID, shard ids.ShardID, m *pb.Message)
	// SendSnapshot streams the shard's state-machine keys from snap to
	// toNode, with m (a MsgSnap) as the header, and calls done when the
	// receiver has stepped it (ok) or the stream failed.
	SendSnapshot(toNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.Snapshot, done func(ok bool))
	// Flush hands the messages queued by Send to the network.
	Flush()
}

// NewStateMachine returns the state machine of a shard.
type NewStateMachine func(shard ids.ShardID) replica.StateMachine

// Host drives every replica of a node. See the package doc.
type Host struct {
	cfg       Config
	policy    policy
	eng       *storage.Engine
	transport Transport
	newSM     NewStateMachine
	log       *slog.Logger

	mu    sync.Mutex
	inbox inbox // guarded by mu
	// inboxBytes is the size of the raft messages in inbox (guarded by mu);
	// spaceC is closed, and replaced, when the loop takes the inbox (see
	// Config.MaxInboxBytes).
	inboxBytes int64
	spaceC     chan struct{}
	notifyC    chan struct{}

	// Owned by the loop.
	replicas map[ids.ShardID]*replica.Replica
	dirty    map[ids.ShardID]*replica.Replica
	ticks    uint64
	// now is Config.Clock as read in this loop turn, after taking the inbox.
	now int64
	// campaigns are the turns to campaign of followers whose leader's node
	// is gone (gone.go), by shard.
	campaigns map[ids.ShardID]pendingCampaign
	// refusing: the node is stopping, and its replicas, those loaded
	// later included, take no leadership (RefuseLeadership).
	refusing bool

	// Lease reads off the loop (fastread.go): leases maps a shard to its
	// replica's *leaseSlot, for readers; slots is the same, for the loop;
	// view is the engine view fast reads borrow (nil: the next read takes
	// one), taken and withdrawn under viewMu, and viewStale says the
	// engine changed since the last withdrawal (loop-owned). viewClosed:
	// the loop ended, no view may be taken. viewsTaken counts views taken.
	leases     sync.Map
	slots      map[ids.ShardID]*leaseSlot
	view       atomic.Pointer[storage.ReadView]
	viewMu     sync.Mutex
	viewClosed bool
	viewStale  bool
	viewsTaken atomic.Uint64
	// fastReadHook, if set (tests, before any read), runs in a fast read
	// between the checks of its lease and the borrowing of the view.
	fastReadHook func(shard ids.ShardID)

	infoMu sync.RWMutex
	infos  map[ids.ShardID]ReplicaInfo // guarded by infoMu
	// leaders holds what Leader answers: each replica's leader fields of
	// infos, in an immutable map replaced (under infoMu) when one changes,
	// so that routing a request reads them without a lock.
	leaders atomic.Pointer[map[ids.ShardID]leaderState]
	// descGen counts changes to the published descriptors (a replica
	// added or removed, a descriptor replaced), so that readers can cache
	// what they derive from them (the node's routing table).
	descGen atomic.Uint64

	snaps outgoingSnapshots
	drops dropLog // owned by the loop: refused peer messages (validate.go)

	idBase  uint64
	idCount atomic.Uint64

	stopC   chan struct{}
	doneC   chan struct{}
	stopped atomic.Bool
}

// New creates a Host over eng. Start loads the hosted replicas and runs the loop.
func New(cfg Config, eng *storage.Engine, t Transport, newSM NewStateMachine) *Host {
	cfg = cfg.withDefaults()
	idBase := cfg.IDBase
	if idBase == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		idBase = binary.BigEndian.Uint64(b[:])
	}
	return &Host{
		cfg: cfg, policy: newPolicy(cfg), eng: eng, transport: t, newSM: newSM, log: cfg.Logger,
		notifyC:   make(chan struct{}, 1),
		spaceC:    make(chan struct{}),
		replicas:  map[ids.ShardID]*replica.Replica{},
		dirty:     map[ids.ShardID]*replica.Replica{},
		campaigns: map[ids.ShardID]pendingCampaign{},
		slots:     map[ids.ShardID]*leaseSlot{},
		infos:     map[ids.ShardID]ReplicaInfo{},
		snaps:     outgoingSnapshots{m: map[uint64]*outSnap{}},
		idBase:    idBase,
		stopC:     make(chan struct{}),
		doneC:     make(chan struct{}),
	}
}
