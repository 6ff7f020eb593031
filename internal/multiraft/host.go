package multiraft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// ErrNoReplica is returned for work on a shard this node hosts no replica of.
var ErrNoReplica = errors.New("multiraft: no replica of the shard on this node")

// ErrStopped is returned once the host is stopping.
var ErrStopped = errors.New("multiraft: host stopped")

// Transport sends raft traffic to other nodes. Send must not block: it may
// drop a message (raft retransmits) and report the peer unreachable.
type Transport interface {
	Send(toNode, shard uint64, m *pb.Message)
	// SendSnapshot streams the shard's state-machine keys from snap to
	// toNode, with m (a MsgSnap) as the header, and calls done when the
	// receiver has stepped it (ok) or the stream failed.
	SendSnapshot(toNode, shard uint64, m *pb.Message, snap *storage.Snapshot, done func(ok bool))
	// Flush hands the messages queued by Send to the network.
	Flush()
}

// Config configures a Host.
type Config struct {
	NodeID uint64
	// TickInterval is the length of one raft tick.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks: raft timeouts in ticks (election
	// should be at least 10 heartbeats).
	ElectionTicks, HeartbeatTicks int
	// LogKeepEntries is how many applied entries a replica keeps in its log
	// for slow followers; LogTruncateEntries is how many more it lets pile up
	// before truncating back down to LogKeepEntries.
	LogKeepEntries, LogTruncateEntries uint64
	// MaxSizePerMsgBytes, MaxInflightMsgs, MaxUncommittedBytes: raft flow control.
	MaxSizePerMsgBytes  uint64
	MaxInflightMsgs     int
	MaxUncommittedBytes uint64
	// MaxOutgoingSnapshots bounds snapshots being streamed at once.
	MaxOutgoingSnapshots int
	Logger               *slog.Logger
}

// DefaultConfig returns the production settings.
func DefaultConfig(nodeID uint64) Config {
	return Config{
		NodeID:               nodeID,
		TickInterval:         100 * time.Millisecond,
		ElectionTicks:        10,
		HeartbeatTicks:       1,
		LogKeepEntries:       5000,
		LogTruncateEntries:   5000,
		MaxSizePerMsgBytes:   1 << 20,
		MaxInflightMsgs:      256,
		MaxUncommittedBytes:  64 << 20,
		MaxOutgoingSnapshots: 4,
		Logger:               slog.Default(),
	}
}

// ReplicaInfo is a published, read-only view of one replica.
type ReplicaInfo struct {
	Shard, ReplicaID uint64
	Desc             *concordpb.ShardDescriptor
	IsLeader         bool
	LeaderReplica    uint64
	LeaderNode       uint64
	Term             uint64
	Commit, Applied  uint64
}

// NewStateMachine returns the state machine of a shard.
type NewStateMachine func(shard uint64) replica.StateMachine

// Host drives every replica of a node. See the package doc.
type Host struct {
	cfg       Config
	eng       *storage.Engine
	transport Transport
	newSM     NewStateMachine
	log       *slog.Logger

	mu      sync.Mutex
	inbox   inbox // guarded by mu
	notifyC chan struct{}

	// Owned by the loop.
	replicas map[uint64]*replica.Replica
	dirty    map[uint64]*replica.Replica
	ticks    uint64

	infoMu sync.RWMutex
	infos  map[uint64]ReplicaInfo // guarded by infoMu

	snaps outgoingSnapshots

	idBase  uint64
	idCount atomic.Uint64

	stopC   chan struct{}
	doneC   chan struct{}
	stopped atomic.Bool
}

type inbox struct {
	msgs  []inMsg
	props []shardProposal
	reads []shardRead
	fns   []func()
}

type inMsg struct {
	fromNode, shard uint64
	m               *pb.Message
}

type shardProposal struct {
	shard uint64
	p     *replica.Proposal
}

type shardRead struct {
	shard uint64
	r     *replica.Read
}

// New creates a Host over eng. Start loads the hosted replicas and runs the loop.
func New(cfg Config, eng *storage.Engine, t Transport, newSM NewStateMachine) *Host {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Host{
		cfg: cfg, eng: eng, transport: t, newSM: newSM, log: cfg.Logger,
		notifyC:  make(chan struct{}, 1),
		replicas: map[uint64]*replica.Replica{},
		dirty:    map[uint64]*replica.Replica{},
		infos:    map[uint64]ReplicaInfo{},
		snaps:    outgoingSnapshots{m: map[uint64]*outSnap{}},
		idBase:   binary.BigEndian.Uint64(b[:]),
		stopC:    make(chan struct{}),
		doneC:    make(chan struct{}),
	}
}

// Start loads every replica recorded as hosted and starts the loop.
func (h *Host) Start() error {
	hosted, err := h.eng.HostedReplicas()
	if err != nil {
		return err
	}
	for _, shard := range slices.Sorted(maps.Keys(hosted)) {
		if _, err := h.loadReplica(shard, hosted[shard]); err != nil {
			return err
		}
	}
	// The preferred replica of each shard campaigns at once, so leaders start
	// spread as placed rather than wherever an election timer fires first.
	for _, r := range h.replicas {
		if d := r.Descriptor(); d != nil && len(d.GetReplicas()) > 0 && d.GetReplicas()[0].GetReplicaId() == r.ID() {
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

func (h *Host) replicaConfig(shard, id uint64) replica.Config {
	return replica.Config{
		NodeID: h.cfg.NodeID, Shard: shard, ReplicaID: id,
		ElectionTicks: h.cfg.ElectionTicks, HeartbeatTicks: h.cfg.HeartbeatTicks,
		MaxSizePerMsgBytes: h.cfg.MaxSizePerMsgBytes, MaxInflightMsgs: h.cfg.MaxInflightMsgs,
		MaxUncommittedBytes: h.cfg.MaxUncommittedBytes,
		PendingTimeoutTicks: uint64(60 * time.Second / h.cfg.TickInterval),
		Snapshot:            h.snapshotFunc(shard),
		Logger:              h.log,
	}
}

func (h *Host) loadReplica(shard, id uint64) (*replica.Replica, error) {
	r, err := replica.Load(h.eng, h.replicaConfig(shard, id), h.newSM(shard))
	if err != nil {
		return nil, err
	}
	h.replicas[shard] = r
	h.publish(r)
	return r, nil
}

// run is the loop. It is the only goroutine that touches a replica.
func (h *Host) run() {
	defer close(h.doneC)
	ticker := time.NewTicker(h.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-h.stopC:
			h.shutdown()
			return
		case <-ticker.C:
			h.tick()
		case <-h.notifyC:
		}
		h.drain()
		h.handleReady()
	}
}

func (h *Host) shutdown() {
	h.drain()
	for _, r := range h.replicas {
		r.Destroy()
	}
	h.snaps.releaseAll()
}

// fatal stops the process: a storage failure leaves raft inoperable, and a
// replica must never continue from state it could not persist.
func (h *Host) fatal(err error) {
	h.log.Error("fatal storage error; stopping the node", "node", h.cfg.NodeID, "err", err)
	os.Exit(2)
}

func (h *Host) enqueue(f func(in *inbox)) error {
	if h.stopped.Load() {
		return ErrStopped
	}
	h.mu.Lock()
	f(&h.inbox)
	h.mu.Unlock()
	select {
	case h.notifyC <- struct{}{}:
	default:
	}
	return nil
}

// Do runs f on the loop goroutine, where it may touch replicas, and waits.
func (h *Host) Do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	if err := h.enqueue(func(in *inbox) { in.fns = append(in.fns, func() { f(); close(done) }) }); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.doneC:
		return ErrStopped
	}
}

func (h *Host) nextID() uint64 { return h.idBase + h.idCount.Add(1) }

func (h *Host) tick() {
	h.ticks++
	for _, r := range h.replicas {
		r.Tick()
		h.dirty[r.Shard()] = r
	}
	if h.ticks%50 == 0 { // every 5 s at the default tick
		for _, r := range h.replicas {
			r.TransferToPreferred()
		}
	}
	if h.ticks%10 == 0 {
		h.truncateLogs()
		h.snaps.expire(time.Minute)
	}
}

// drain takes the inbox and feeds it to the replicas.
func (h *Host) drain() {
	h.mu.Lock()
	in := h.inbox
	h.inbox = inbox{}
	h.mu.Unlock()
	for _, m := range in.msgs {
		h.step(m)
	}
	for _, sp := range in.props {
		if r := h.replicas[sp.shard]; r != nil {
			r.Propose(sp.p)
			h.dirty[sp.shard] = r
		} else {
			sp.p.Done <- replica.Outcome{Err: ErrNoReplica}
		}
	}
	for _, r := range h.dirty {
		r.FlushProposals()
	}
	for _, sr := range in.reads {
		if r := h.replicas[sr.shard]; r != nil {
			r.ReadIndex(sr.r)
			h.dirty[sr.shard] = r
		} else {
			sr.r.Done <- ErrNoReplica
		}
	}
	for _, f := range in.fns {
		f()
	}
}

// step delivers a peer's message, creating the replica if this is the first
// message a newly added replica receives.
func (h *Host) step(in inMsg) {
	r := h.replicas[in.shard]
	to := in.m.GetTo()
	if r != nil && r.ID() != to {
		if to < r.ID() {
			return // addressed to an older replica of this shard here
		}
		h.destroyReplica(r) // a newer replica of the shard was added here
		r = nil
	}
	if r == nil {
		var err error
		if r, err = h.createReplica(in.shard, to, in.m); r == nil {
			if err != nil {
				h.log.Warn("cannot create replica", "shard", in.shard, "replica", to, "err", err)
			}
			return
		}
	}
	if err := r.Step(in.fromNode, in.m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		h.log.Debug("step failed", "shard", in.shard, "type", in.m.GetType(), "err", err)
	}
	h.dirty[in.shard] = r
}

// createReplica creates an uninitialized replica to receive the shard from
// its leader (by log or snapshot). Only a leader's messages create one, and
// never a replica id at or below the shard's tombstone here.
func (h *Host) createReplica(shard, id uint64, m *pb.Message) (*replica.Replica, error) {
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
	default:
		return nil, nil
	}
	tomb, err := h.eng.Tombstone(shard)
	if err != nil {
		return nil, err
	}
	if id <= tomb {
		return nil, nil
	}
	if err := h.eng.SetHosted(shard, id); err != nil {
		h.fatal(err)
	}
	h.log.Info("created replica to receive shard", "shard", shard, "replica", id)
	return h.loadReplica(shard, id)
}

// destroyReplica removes a replica and its data, leaving a tombstone so
// that stale messages cannot recreate it.
func (h *Host) destroyReplica(r *replica.Replica) {
	shard := r.Shard()
	r.Destroy()
	delete(h.replicas, shard)
	delete(h.dirty, shard)
	if err := h.eng.DestroyReplica(shard, r.ID()); err != nil {
		h.fatal(err)
	}
	h.infoMu.Lock()
	delete(h.infos, shard)
	h.infoMu.Unlock()
	h.log.Info("removed replica", "shard", shard, "replica", r.ID())
}

type cycle struct {
	r    *replica.Replica
	rd   raft.Ready
	late []replica.Outbound // messages that wait for the batch to be durable
}

// handleReady runs one Ready cycle for every replica that has one; see the
// package doc for the order and why.
func (h *Host) handleReady() {
	b := h.eng.NewIndexedBatch()
	var cycles []cycle
	mustSync := false
	for shard, r := range h.dirty {
		delete(h.dirty, shard)
		if !r.HasReady() {
			continue
		}
		rd := r.Ready()
		if !raft.IsEmptySnap(rd.Snapshot) {
			if err := r.InstallSnapshot(rd); err != nil {
				h.fatal(err)
			}
		}
		if err := r.Persist(b, rd); err != nil {
			h.fatal(err)
		}
		if err := r.Apply(b, rd); err != nil {
			h.fatal(err)
		}
		mustSync = mustSync || rd.MustSync
		early, late := r.Messages(rd)
		h.send(r, early) // a leader's appends overlap its own fsync
		cycles = append(cycles, cycle{r, rd, late})
	}
	if len(cycles) == 0 {
		b.Close()
		return
	}
	h.transport.Flush() // the early messages, before this node's fsync
	if err := storage.Commit(b, mustSync); err != nil {
		h.fatal(err)
	}
	b.Close()
	for _, c := range cycles {
		h.send(c.r, c.late)
	}
	h.transport.Flush()
	for _, c := range cycles {
		c.r.Advance(c.rd)
		if c.r.Removed() {
			h.destroyReplica(c.r)
			continue
		}
		h.publish(c.r)
		if c.r.HasReady() {
			h.dirty[c.r.Shard()] = c.r
		}
	}
	if len(h.dirty) > 0 {
		select {
		case h.notifyC <- struct{}{}:
		default:
		}
	}
}

func (h *Host) send(r *replica.Replica, out []replica.Outbound) {
	for _, ob := range out {
		if ob.Msg.GetType() == pb.MsgSnap {
			h.sendSnapshot(r, ob)
			continue
		}
		h.transport.Send(ob.ToNode, r.Shard(), ob.Msg)
	}
}

func (h *Host) sendSnapshot(r *replica.Replica, ob replica.Outbound) {
	shard, to := r.Shard(), ob.Msg.GetTo()
	snap := h.snaps.take(ob.Msg.GetSnapshot().GetData())
	if snap == nil {
		h.log.Warn("snapshot handle unknown; reporting failure", "shard", shard, "to", to)
		r.ReportSnapshot(to, false)
		return
	}
	h.log.Info("sending snapshot", "shard", shard, "to_replica", to, "to_node", ob.ToNode,
		"index", ob.Msg.GetSnapshot().GetMetadata().GetIndex())
	h.transport.SendSnapshot(ob.ToNode, shard, ob.Msg, snap, func(ok bool) {
		snap.Close()
		h.snaps.done()
		_ = h.enqueue(func(in *inbox) {
			in.fns = append(in.fns, func() {
				if r := h.replicas[shard]; r != nil {
					r.ReportSnapshot(to, ok)
					h.dirty[shard] = r
				}
			})
		})
	})
}

// publish records r's state for readers outside the loop.
func (h *Host) publish(r *replica.Replica) {
	st := r.Status()
	info := ReplicaInfo{
		Shard: r.Shard(), ReplicaID: r.ID(), Desc: r.Descriptor(),
		IsLeader: r.IsLeader(), LeaderReplica: st.Lead, LeaderNode: r.LeaderNode(),
		Term: st.GetTerm(), Commit: st.GetCommit(), Applied: r.Applied(),
	}
	h.infoMu.Lock()
	h.infos[r.Shard()] = info
	h.infoMu.Unlock()
}

// truncateLogs drops applied entries beyond what slow followers may need.
func (h *Host) truncateLogs() {
	b := h.eng.NewBatch()
	defer b.Close()
	for _, r := range h.replicas {
		first, _ := r.RaftLog().FirstIndex()
		applied := r.Applied()
		if applied < first || applied-first < h.cfg.LogKeepEntries+h.cfg.LogTruncateEntries {
			continue
		}
		if err := r.RaftLog().Truncate(b, applied-h.cfg.LogKeepEntries); err != nil {
			h.fatal(err)
		}
	}
	if b.Empty() {
		return
	}
	if err := storage.Commit(b, false); err != nil {
		h.fatal(err)
	}
}

// snapshotFunc returns the raft.Storage Snapshot function of shard: a
// handle to a Pebble snapshot taken now, at the applied index. Called on the
// loop, after the last batch was committed, so the two agree.
func (h *Host) snapshotFunc(shard uint64) func() (*pb.Snapshot, error) {
	return func() (*pb.Snapshot, error) {
		if !h.snaps.reserve(h.cfg.MaxOutgoingSnapshots) {
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		snap := h.eng.NewSnapshot()
		var as storepb.AppliedState
		cs := &pb.ConfState{}
		_, err1 := snap.GetProto(keys.Applied(shard), &as)
		_, err2 := snap.GetProto(keys.ConfState(shard), cs)
		if err := errors.Join(err1, err2); err != nil {
			snap.Close()
			h.snaps.done()
			return nil, err
		}
		handle := h.snaps.put(snap)
		return &pb.Snapshot{
			Data:     handle,
			Metadata: &pb.SnapshotMetadata{Index: new(as.GetIndex()), Term: new(as.GetTerm()), ConfState: cs},
		}, nil
	}
}

// Propose replicates cmd through shard's raft group and returns its result
// once applied. An error wrapping replica.ErrAmbiguous (or a context error)
// means the command may or may not apply.
func (h *Host) Propose(ctx context.Context, shard uint64, cmd *storepb.Command) (*storepb.CommandResult, error) {
	cmd = proto.CloneOf(cmd)
	cmd.Id = h.nextID()
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	p := &replica.Proposal{ID: cmd.Id, Data: data, Done: make(chan replica.Outcome, 1)}
	if err := h.enqueue(func(in *inbox) { in.props = append(in.props, shardProposal{shard, p}) }); err != nil {
		return nil, err
	}
	return h.wait(ctx, p)
}

func (h *Host) wait(ctx context.Context, p *replica.Proposal) (*storepb.CommandResult, error) {
	select {
	case o := <-p.Done:
		return o.Result, o.Err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", replica.ErrAmbiguous, ctx.Err())
	case <-h.doneC:
		return nil, fmt.Errorf("%w: %w", replica.ErrAmbiguous, ErrStopped)
	}
}

// ReadIndex returns nil once shard's local state reflects every write
// committed before the call (a linearizable read may then read locally).
func (h *Host) ReadIndex(ctx context.Context, shard uint64) error {
	rctx := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, h.idBase), h.idCount.Add(1))
	rd := &replica.Read{Ctx: rctx, Done: make(chan error, 1)}
	if err := h.enqueue(func(in *inbox) { in.reads = append(in.reads, shardRead{shard, rd}) }); err != nil {
		return err
	}
	select {
	case err := <-rd.Done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-h.doneC:
		return ErrStopped
	}
}

// ChangeReplicas replaces replica remove of shard by a new replica on node
// addNode, in one joint-consensus step. Must run on the shard's leader.
func (h *Host) ChangeReplicas(ctx context.Context, shard, remove, addNode uint64) (*concordpb.ShardDescriptor, error) {
	id := h.nextID()
	done := make(chan replica.Outcome, 1)
	var perr error
	err := h.Do(ctx, func() {
		r := h.replicas[shard]
		if r == nil {
			perr = ErrNoReplica
			return
		}
		cc, err := replica.ReplaceChange(r.Descriptor(), id, remove, addNode)
		if err != nil {
			perr = err
			return
		}
		r.ProposeConfChange(&replica.Proposal{ID: id, CC: cc, Done: done})
		h.dirty[shard] = r
	})
	if err := errors.Join(err, perr); err != nil {
		return nil, err
	}
	if _, err := h.wait(ctx, &replica.Proposal{Done: done}); err != nil {
		return nil, err
	}
	info, _ := h.Info(shard)
	return info.Desc, nil
}

// Deliver queues messages a peer node sent.
func (h *Host) Deliver(fromNode uint64, envs []*concordpb.RaftEnvelope) error {
	msgs := make([]inMsg, 0, len(envs))
	for _, env := range envs {
		m := &pb.Message{}
		if err := proto.Unmarshal(env.GetMessage(), m); err != nil {
			return fmt.Errorf("decode raft message for shard %d: %w", env.GetShardId(), err)
		}
		msgs = append(msgs, inMsg{fromNode: fromNode, shard: env.GetShardId(), m: m})
	}
	return h.enqueue(func(in *inbox) { in.msgs = append(in.msgs, msgs...) })
}

// DeliverSnapshot stages a received snapshot's data and steps its MsgSnap;
// the data is ingested when raft accepts the snapshot. The replica takes
// ownership of snap, or it is discarded.
func (h *Host) DeliverSnapshot(ctx context.Context, fromNode, shard uint64, m *pb.Message, snap *storage.StagedSnapshot) error {
	return h.Do(ctx, func() {
		h.step(inMsg{fromNode: fromNode, shard: shard, m: m})
		if r := h.replicas[shard]; r != nil && r.ID() == m.GetTo() {
			r.StageSnapshot(m.GetSnapshot().GetMetadata().GetIndex(), snap)
		} else {
			snap.Discard()
		}
	})
}

// ReportUnreachable tells every replica that messages to node failed.
func (h *Host) ReportUnreachable(node uint64) {
	_ = h.enqueue(func(in *inbox) {
		in.fns = append(in.fns, func() {
			for _, r := range h.replicas {
				for id, n := range r.Nodes() {
					if n == node {
						r.ReportUnreachable(id)
					}
				}
			}
		})
	})
}

// Info returns the published state of the replica of shard on this node.
func (h *Host) Info(shard uint64) (ReplicaInfo, bool) {
	h.infoMu.RLock()
	defer h.infoMu.RUnlock()
	i, ok := h.infos[shard]
	return i, ok
}

// Infos returns the published state of every replica on this node.
func (h *Host) Infos() []ReplicaInfo {
	h.infoMu.RLock()
	defer h.infoMu.RUnlock()
	out := make([]ReplicaInfo, 0, len(h.infos))
	for _, i := range h.infos {
		out = append(out, i)
	}
	return out
}

// Engine is the node's storage engine.
func (h *Host) Engine() *storage.Engine { return h.eng }

// TransferLeadersAway asks every replica this node leads to hand leadership
// to a caught-up peer, and waits until none leads here or ctx ends.
func (h *Host) TransferLeadersAway(ctx context.Context) error {
	started := 0
	if err := h.Do(ctx, func() {
		for _, r := range h.replicas {
			if r.TransferAway() {
				started++
				h.dirty[r.Shard()] = r
			}
		}
	}); err != nil {
		return err
	}
	for started > 0 {
		leading := 0
		for _, i := range h.Infos() {
			if i.IsLeader {
				leading++
			}
		}
		if leading == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
