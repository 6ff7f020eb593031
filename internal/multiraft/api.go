package multiraft

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/raftwire"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// ErrNoReplica is returned for work on a shard this node hosts no replica of.
var ErrNoReplica = errors.New("multiraft: no replica of the shard on this node")

// ErrStopped is returned once the host is stopping.
var ErrStopped = errors.New("multiraft: host stopped")

// ReplicaInfo is a published, read-only view of one replica.
type ReplicaInfo struct {
	Shard           ids.ShardID
	ReplicaID       ids.ReplicaID
	Desc            *concordpb.ShardDescriptor
	IsLeader        bool
	LeaderReplica   ids.ReplicaID
	LeaderNode      ids.NodeID
	Term            uint64
	Commit, Applied uint64
	// Truncated is the index the replica's raft log was truncated to: it
	// holds the entries after it (replica/logtrunc.go).
	Truncated uint64
	// Transferee is the replica a leadership transfer this leader started
	// is handing over to; 0 if none.
	Transferee ids.ReplicaID
	// ReadRounds counts the ReadIndex rounds this replica issued since it
	// was loaded; each serves every linearizable read queued before it.
	ReadRounds uint64
	// LeaseReads counts the linearizable reads this replica served by
	// lease, with no round (replica/lease.go), FastLeaseReads included.
	LeaseReads uint64
	// FastLeaseReads counts those served off the loop (fastread.go).
	FastLeaseReads uint64
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

// Propose replicates cmd through shard's raft group and returns its result
// once applied. An error wrapping replica.ErrAmbiguous (or a context error)
// means the command may or may not apply.
func (h *Host) Propose(ctx context.Context, shard ids.ShardID, cmd *storepb.Command) (*storepb.CommandResult, error) {
	id := h.nextID()
	data, err := marshalWithID(cmd, id)
	if err != nil {
		return nil, err
	}
	p := &replica.Proposal{ID: id, Data: data, Done: make(chan replica.Outcome, 1)}
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

// ReadIndex returns, once shard's local replica has applied every write
// committed before the call, a view of the engine taken at that moment: a
// linearizable read reads the shard through it, even if the replica is
// removed and its data destroyed meanwhile. The caller must Release it.
// Reads that reach the loop in the same turn share one raft ReadIndex
// round (replica.FlushReads).
//
// A read the local replica's published lease covers is served on the
// caller's goroutine, without the loop (fastread.go), from a view that
// holds every write acknowledged before the call and every entry of
// earlier terms, but possibly not entries this leader committed and has
// not yet applied (none of them is acknowledged yet): still linearizable.
//
// Its errors are never replica.ErrAmbiguous: a read changes nothing. A
// barrier that does not come back in time is replica.ErrReadTimeout; ctx
// ending first is ctx's plain error.
func (h *Host) ReadIndex(ctx context.Context, shard ids.ShardID) (*storage.ReadView, error) {
	if v := h.fastRead(shard); v != nil {
		return v, nil
	}
	rd := &replica.Read{Done: make(chan error, 1)}
	if err := h.enqueue(func(in *inbox) { in.reads = append(in.reads, shardRead{shard, rd}) }); err != nil {
		return nil, err
	}
	select {
	case err := <-rd.Done:
		if err != nil {
			return nil, err
		}
		return rd.View(), nil
	case <-ctx.Done():
		rd.Abandon()
		return nil, ctx.Err()
	case <-h.doneC:
		rd.Abandon()
		return nil, ErrStopped
	}
}

// Deliver queues messages a peer node sent. It keeps nothing of envs (the
// decoded messages copy what they need), so the caller may reuse the
// envelopes and their bytes once it returns. A batch that carries entries
// waits while the inbox is full (Config.MaxInboxBytes), until the loop
// takes it, the host stops or ctx (the receiving stream's) ends.
func (h *Host) Deliver(ctx context.Context, fromNode ids.NodeID, envs []*concordpb.RaftEnvelope) error {
	msgs := make([]inMsg, 0, len(envs))
	var size int64
	bulk := false
	for _, env := range envs {
		m, err := decodeMessage(env.GetMessage()) // a copy: env is the caller's to reuse
		if err != nil {
			return fmt.Errorf("decode raft message for shard %d: %w", env.GetShardId(), err)
		}
		msgs = append(msgs, inMsg{fromNode: fromNode, shard: ids.ShardID(env.GetShardId()), m: m, via: viaRaftStream})
		size += int64(len(env.GetMessage()) + raftwire.Overhead(m))
		bulk = bulk || len(m.GetEntries()) > 0
	}
	if bulk {
		if err := h.awaitInboxSpace(ctx); err != nil {
			return err
		}
	}
	return h.enqueue(func(in *inbox) {
		if !bulk && h.cfg.MaxInboxBytes >= 0 && h.inboxBytes >= 2*h.cfg.MaxInboxBytes {
			return // dropped, not held: raft tolerates the loss
		}
		in.msgs = append(in.msgs, msgs...)
		h.inboxBytes += size
	})
}

// awaitInboxSpace returns once the inbox holds less than MaxInboxBytes, the
// host stopped (ErrStopped) or ctx ended.
func (h *Host) awaitInboxSpace(ctx context.Context) error {
	for {
		h.mu.Lock()
		full := h.cfg.MaxInboxBytes >= 0 && h.inboxBytes >= h.cfg.MaxInboxBytes
		spaceC := h.spaceC
		h.mu.Unlock()
		if !full {
			return nil
		}
		select {
		case <-spaceC:
		case <-h.stopC:
			return ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// DeliverSnapshot stages a received snapshot's data and steps its MsgSnap;
// the data is ingested when raft accepts the snapshot. The replica takes
// ownership of snap, or it is discarded.
func (h *Host) DeliverSnapshot(ctx context.Context, fromNode ids.NodeID, shard ids.ShardID, m *pb.Message, snap *storage.StagedSnapshot) error {
	return h.Do(ctx, func() {
		stepped := h.step(inMsg{fromNode: fromNode, shard: shard, m: m, via: viaSnapshotStream})
		if r := h.replicas[shard]; stepped && r != nil && r.ID() == ids.ReplicaID(m.GetTo()) {
			r.StageSnapshot(m.GetSnapshot().GetMetadata().GetIndex(), snap)
		} else {
			snap.Discard()
		}
	})
}

// ReportUnreachable tells every replica that messages to node failed.
func (h *Host) ReportUnreachable(node ids.NodeID) {
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
func (h *Host) Info(shard ids.ShardID) (ReplicaInfo, bool) {
	h.infoMu.RLock()
	i, ok := h.infos[shard]
	h.infoMu.RUnlock()
	return h.withFastReads(i), ok
}

// Leader reports whether this node's replica of shard leads it, and the
// node that does as far as the replica knows (0: unknown); ok is false if
// this node has no replica of shard. These are Info's IsLeader and
// LeaderNode, read without a lock or a copy of the rest: every routed
// request asks (Info's lock and copy were 3 % of a get's server CPU).
func (h *Host) Leader(shard ids.ShardID) (isLeader bool, node ids.NodeID, ok bool) {
	m := h.leaders.Load()
	if m == nil {
		return false, 0, false
	}
	l, ok := (*m)[shard]
	return l.isLeader, l.node, ok
}

// leaderState is a replica's leader fields, as Leader answers them.
type leaderState struct {
	isLeader bool
	node     ids.NodeID
}

// publishLeaders replaces the map Leader reads with one made from infos;
// the caller holds infoMu. It runs when a replica's leader changes or a
// replica goes, not on every publish.
func (h *Host) publishLeaders() {
	m := make(map[ids.ShardID]leaderState, len(h.infos))
	for shard, i := range h.infos {
		m[shard] = leaderState{isLeader: i.IsLeader, node: i.LeaderNode}
	}
	h.leaders.Store(&m)
}

// withFastReads adds the fast reads of i's replica, counted outside the
// loop, to i.
func (h *Host) withFastReads(i ReplicaInfo) ReplicaInfo {
	i.FastLeaseReads = h.fastReads(i.Shard)
	i.LeaseReads += i.FastLeaseReads
	return i
}

// DescGeneration changes whenever a published descriptor does (a replica
// created, removed, or its descriptor replaced): equal generations mean
// Infos holds the same descriptors.
func (h *Host) DescGeneration() uint64 { return h.descGen.Load() }

// Infos returns the published state of every replica on this node.
func (h *Host) Infos() []ReplicaInfo {
	h.infoMu.RLock()
	defer h.infoMu.RUnlock()
	out := make([]ReplicaInfo, 0, len(h.infos))
	for _, i := range h.infos {
		out = append(out, h.withFastReads(i))
	}
	return out
}

// Engine is the node's storage engine.
func (h *Host) Engine() *storage.Engine { return h.eng }

// RefuseLeadership makes every replica here, and every one created later,
// refuse leadership for the rest of the host's life: none campaigns or
// takes a leadership transferred to it (replica/handoff.go), while those
// that lead keep leading until they hand it away (TransferLeadersAway).
// For a node that is stopping: leadership it took now would leave with
// it. It returns once the replicas refuse, or with ctx's error.
func (h *Host) RefuseLeadership(ctx context.Context) error {
	return h.Do(ctx, h.refuseLeadership)
}

// refuseLeadership is RefuseLeadership on the loop; the turns to campaign
// after a gone leader (gone.go) go too.
func (h *Host) refuseLeadership() {
	if !h.refusing {
		h.log.Info("node is stopping: its replicas take no leadership")
	}
	h.refusing = true
	for _, r := range h.replicas {
		r.RefuseLeadership()
	}
	clear(h.campaigns)
}

// TransferLeadersAway makes the replicas here refuse leadership
// (RefuseLeadership), asks every replica this node leads to hand
// leadership to a caught-up peer, and waits until none leads here or ctx
// ends. A leader with no peer to take it just now (none heard from
// lately: raft's CheckQuorum round has just cleared them) is asked again
// every 20 ms; one that found none for transferRetries rounds in a row (a
// shard whose only voter is here) makes it fail, saying how many it keeps.
func (h *Host) TransferLeadersAway(ctx context.Context) error {
	for round := 0; ; round++ {
		var underway, stuck int
		if err := h.Do(ctx, func() {
			h.refuseLeadership()
			for _, r := range h.replicas {
				switch {
				case !r.IsLeader():
				case r.Status().LeadTransferee != 0:
					underway++
				case r.TransferAway():
					underway++
					h.dirty[r.Shard()] = r
				default:
					stuck++
				}
			}
		}); err != nil {
			return err
		}
		if underway == 0 && stuck == 0 {
			return nil
		}
		if underway == 0 && round >= transferRetries {
			return fmt.Errorf("no caught-up peer to take the leadership of %d shards led here", stuck)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// transferRetries is how many 20 ms rounds TransferLeadersAway asks a
// leader with no peer to take its leadership before giving up on it:
// 200 ms, a couple of heartbeat rounds, in which peers answer again.
const transferRetries = 10

// marshalWithID encodes cmd with its Id field set to id, without touching
// cmd (the caller may share it) and without cloning it: it appends the id
// after cmd's own encoding, and a decoder keeps the last value of a scalar
// field (protobuf encoding rules), so an Id cmd already carries is
// overridden. A clone deep-copied every op's key and value, about a tenth
// of a pipelined SET's CPU on the node that proposed it (docs/benchmarks.md).
func marshalWithID(cmd *storepb.Command, id uint64) ([]byte, error) {
	size := proto.Size(cmd)
	// The size just computed is reused: cmd does not change in between.
	buf := make([]byte, 0, size+protowire.SizeTag(commandIDField)+protowire.SizeVarint(id))
	data, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, cmd)
	if err != nil {
		return nil, err
	}
	data = protowire.AppendTag(data, commandIDField, protowire.VarintType)
	return protowire.AppendVarint(data, id), nil
}

// commandIDField is storepb.Command's id field number (store.proto).
const commandIDField protowire.Number = 1
