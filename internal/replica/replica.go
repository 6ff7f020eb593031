package replica

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// StateMachine is what a shard applies: package kv for user shards, package
// placement for the meta shard. Apply writes into b, an indexed batch, and
// must be deterministic. An error return is a storage failure and is fatal.
//
// A state machine may keep in memory what it would otherwise read from its
// state span on every command (kv caches session sequence numbers and the
// shard clock), as long as it also writes it into b. It may defer writes
// that later commands of the same batch would overwrite (kv writes each
// session's record once per batch) until Flush, which the replica calls
// once per Apply, after the last entry and before the applied index, into
// the same batch: what a batch commits is then what per-command writes
// would have committed. Flush may also fill in its own fields of the
// applied-state record (kv: the shard clock), which the replica writes into
// b right after it, so that state that changes with every batch costs no
// record of its own; it must fill them in every time, since each record
// replaces the last.
// SnapshotInstalled is called after a raft snapshot replaced the shard's
// state span, before any later entry is applied: whatever it kept in memory
// about that state is stale and must be dropped.
//
// The command Apply gets is valid only during the call, and may alias the
// entry's data (storepb.CommandDecoder): Apply must not keep it or its ops.
type StateMachine interface {
	Apply(b *pebble.Batch, desc *concordpb.ShardDescriptor, cmd *storepb.Command) (*storepb.CommandResult, error)
	Flush(b *pebble.Batch, as *storepb.AppliedState) error
	SnapshotInstalled()
}

// Config configures one replica.
type Config struct {
	NodeID    ids.NodeID
	Shard     ids.ShardID
	ReplicaID ids.ReplicaID
	// ElectionTicks and HeartbeatTicks are in multiraft ticks.
	ElectionTicks  int
	HeartbeatTicks int
	// MaxSizePerMsgBytes bounds the entries in one append message.
	MaxSizePerMsgBytes uint64
	// MaxInflightMsgs and MaxInflightBytes bound unacknowledged appends per
	// follower (0 bytes: no byte bound).
	MaxInflightMsgs  int
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds proposals not yet committed; beyond it raft
	// drops proposals (backpressure).
	MaxUncommittedBytes uint64
	// MaxCommittedBytesPerReady bounds the committed entries in one Ready
	// (0: 4 × MaxSizePerMsgBytes).
	MaxCommittedBytesPerReady uint64
	// PendingTimeoutTicks is how long a proposal or read may wait before the
	// replica forgets it (its caller has given up long before).
	PendingTimeoutTicks uint64
	// ReadCtxBase starts every ReadIndex context this replica issues (see
	// FlushReads). Contexts must never repeat, so it should differ between
	// processes (multiraft passes its random id base).
	ReadCtxBase uint64
	// LeaseDuration is how long, in nanoseconds of the host's monotonic
	// clock, an answered ReadIndex round lets the leader serve reads with
	// no round (lease.go); 0 turns lease reads off.
	LeaseDuration int64
	// LogKeepEntries caps the applied entries the replica's raft log keeps;
	// a leader keeps LogTailEntries below its slowest follower (logtrunc.go).
	LogKeepEntries, LogTailEntries uint64
	// Snapshot builds the snapshot raft asks for (see multiraft).
	Snapshot func() (*pb.Snapshot, error)
	Logger   *slog.Logger
}

// Outcome is the result of a proposal.
type Outcome struct {
	Result *storepb.CommandResult
	Err    error
}

// Proposal is a command or a membership change waiting for its outcome.
type Proposal struct {
	ID   uint64
	Data []byte           // a marshalled storepb.Command, or nil for a conf change
	CC   *pb.ConfChangeV2 // a membership change, or nil
	// Done receives exactly one Outcome; it must have room for it.
	Done chan Outcome

	stepped bool   // handed to raft: from now on its outcome is ambiguous
	born    uint64 // replica tick at creation
}

// Read is a linearizable read waiting for its ReadIndex to be applied.
// Reads share ReadIndex rounds (see FlushReads): the replica, not the
// caller, makes each round's context.
type Read struct {
	// Done receives nil when the read may be served, and View then holds
	// the state to serve it from; or an error. It must have room for one.
	Done chan error

	born uint64
	// view is set by the loop before it serves the read; state says who
	// owns it (see serve and Abandon).
	view  *storage.ReadView
	state atomic.Uint32
}

const (
	readWaiting uint32 = iota
	readServed
	readAbandoned
)

// View returns the state a read that received nil on Done reads: the
// engine as of the read's release, when its index was applied. The
// receiver owns one reference to it and must Release it.
func (rd *Read) View() *storage.ReadView { return rd.view }

// Abandon is called by a waiter that stops waiting without receiving from
// Done (its context ended, the host stopped). A view the loop has handed the
// read, or hands it later, is released; an error is simply dropped.
func (rd *Read) Abandon() {
	if !rd.state.CompareAndSwap(readWaiting, readAbandoned) {
		rd.view.Release() // already served: the reference is the waiter's
	}
}

// serve hands v (one reference) to the read and releases it, unless its
// waiter gave up.
func (rd *Read) serve(v *storage.ReadView) {
	rd.view = v
	if !rd.state.CompareAndSwap(readWaiting, readServed) {
		v.Release()
		return
	}
	rd.Done <- nil
}

// Replica is one shard replica. See the package doc for the Ready cycle.
type Replica struct {
	cfg Config
	eng *storage.Engine
	log *storage.RaftLog
	rn  *raft.RawNode
	sm  StateMachine
	// dec decodes the commands applyEntry hands to sm, reusing its structs.
	dec storepb.CommandDecoder

	// desc, applied and appliedTerm are the state as of the last applied entry.
	desc                 *concordpb.ShardDescriptor
	applied, appliedTerm uint64
	// appliedRec is the applied-state record Apply writes, appliedKey its
	// key and appliedBuf its encoding, all reused from batch to batch.
	appliedRec             storepb.AppliedState
	appliedKey, appliedBuf []byte
	// nodes maps replica ids of this shard to the nodes that host them.
	nodes map[ids.ReplicaID]ids.NodeID

	proposals map[uint64]*Proposal
	// confIndex is the log index up to which a membership change may be
	// pending, as a leader (ConfChangePending).
	confIndex uint64
	// confUnseen: a membership change was proposed and no Ready has
	// carried entries since.
	confUnseen bool
	queued     []*Proposal
	// readQueue holds the reads that arrived since the last FlushReads;
	// rounds the ReadIndex requests raft has, by context (reads.go).
	readQueue []*Read
	rounds    map[string]*readRound
	// readSeq numbers this replica's ReadIndex contexts; readRounds counts
	// the rounds issued (ReadRounds), leaseReads the reads served by lease.
	readSeq, readRounds, leaseReads uint64
	// roundReads counts the reads released by answered rounds; taken* are
	// the counts TakeReadCounts last reported.
	roundReads, takenLease, takenRound uint64
	// The leader lease (lease.go): valid in leaseTerm until leaseExpiry
	// (host monotonic nanoseconds), never in leaseBarredTerm.
	leaseTerm, leaseBarredTerm uint64
	leaseExpiry                int64
	// voteQuietTicks: vote requests are dropped until ticks reaches it.
	voteQuietTicks uint64
	// heardAt is when leader heardLead last sent a message of heardTerm.
	heardLead ids.ReplicaID
	heardTerm uint64
	heardAt   int64
	// Log truncation (logtrunc.go): leaderTruncTo is the truncation index
	// the leader of leaderTruncTerm last stamped on a heartbeat to this
	// replica, as a follower.
	leaderTruncTo, leaderTruncTerm uint64
	// completions are outcomes decided in Apply, delivered in Advance after
	// the batch holding them is durable.
	completions []completion

	lead     ids.ReplicaID // raft's leader, 0 if none
	term     uint64
	isLeader bool
	// voteChanged: the Ready being handled changes the term or vote, so none
	// of its messages may leave before it is durable.
	voteChanged bool
	ticks       uint64
	// hbResp marks the peers whose heartbeat response raft stepped since
	// the last Ready's messages, and replicating the peers raft replicates
	// to, read for one Ready (commitonly.go).
	hbResp      map[uint64]bool
	replicating map[uint64]bool
	// staged maps snapshot index to the data received for it.
	staged map[uint64]*storage.StagedSnapshot
	// stagedAt is the tick at which each staged snapshot arrived.
	stagedAt map[uint64]uint64
	removed  bool
	// refuseLead: this replica's node is stopping; it takes no leadership
	// (handoff.go).
	refuseLead bool
}

type completion struct {
	id  uint64
	res *storepb.CommandResult
}

// Load opens the replica of cfg.Shard stored in eng.
func Load(eng *storage.Engine, cfg Config, sm StateMachine) (*Replica, error) {
	l, err := eng.LoadRaftLog(cfg.Shard)
	if err != nil {
		return nil, err
	}
	r := &Replica{
		cfg: cfg, eng: eng, log: l, sm: sm,
		nodes:     map[ids.ReplicaID]ids.NodeID{},
		proposals: map[uint64]*Proposal{},
		rounds:    map[string]*readRound{},
		staged:    map[uint64]*storage.StagedSnapshot{},
		stagedAt:  map[uint64]uint64{},
	}
	if err := r.loadState(); err != nil {
		return nil, err
	}
	// The stored commit index may lag what this replica applied (it is
	// not written when only it changed: RaftLog.SetHardState).
	l.CommitAtLeast(r.applied)
	l.SetSnapshotFunc(cfg.Snapshot)
	if l.HardState().GetTerm() > storage.InitialTerm {
		// It may have acknowledged a leader's heartbeat before it was
		// stopped, and so promised to refuse votes for a while (lease.go).
		r.voteQuietTicks = uint64(cfg.ElectionTicks - 1)
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        uint64(cfg.ReplicaID),
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   l,
		Applied:                   r.applied,
		MaxSizePerMsg:             cfg.MaxSizePerMsgBytes,
		MaxCommittedSizePerReady:  cmp.Or(cfg.MaxCommittedBytesPerReady, 4*cfg.MaxSizePerMsgBytes),
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxInflightBytes:          cfg.MaxInflightBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    newRaftLogger(cfg.Logger),
	})
	if err != nil {
		return nil, fmt.Errorf("replica: shard %d: %w", cfg.Shard, err)
	}
	r.rn = rn
	// A replica whose configuration leaves it out applied its own removal,
	// and its node stopped before destroying it (Removed: the host does
	// now). An uninitialized replica has no configuration yet.
	cs := &pb.ConfState{}
	if _, err := eng.GetProto(keys.ConfState(uint64(cfg.Shard)), cs); err != nil {
		return nil, err
	}
	r.removed = len(cs.GetVoters()) > 0 && !inConfState(cs, cfg.ReplicaID)
	return r, nil
}

// loadState reads the state machine's applied state and descriptor.
func (r *Replica) loadState() error {
	var as storepb.AppliedState
	if _, err := r.eng.GetProto(keys.Applied(uint64(r.cfg.Shard)), &as); err != nil {
		return err
	}
	r.applied, r.appliedTerm = as.GetIndex(), as.GetTerm()
	desc := &concordpb.ShardDescriptor{}
	found, err := r.eng.GetProto(keys.Descriptor(uint64(r.cfg.Shard)), desc)
	if err != nil {
		return err
	}
	if found {
		r.desc = desc
		for _, rd := range desc.GetReplicas() {
			r.nodes[ids.ReplicaID(rd.GetReplicaId())] = ids.NodeID(rd.GetNodeId())
		}
	}
	return nil
}

// Shard is the replica's shard id.
func (r *Replica) Shard() ids.ShardID { return r.cfg.Shard }

// ID is the replica's id within its shard.
func (r *Replica) ID() ids.ReplicaID { return r.cfg.ReplicaID }

// Descriptor is the shard's descriptor as of the applied index; nil until
// the replica is initialized (by bootstrap or a snapshot).
func (r *Replica) Descriptor() *concordpb.ShardDescriptor { return r.desc }

// Applied is the applied index.
func (r *Replica) Applied() uint64 { return r.applied }

// IsLeader reports whether this replica is the shard's leader.
func (r *Replica) IsLeader() bool { return r.isLeader }

// LeaderNode is the node of the leader this replica knows of; 0 if none.
func (r *Replica) LeaderNode() ids.NodeID {
	if r.lead == 0 {
		return 0
	}
	return r.nodes[r.lead]
}

// Removed reports whether the replica was removed from its shard.
func (r *Replica) Removed() bool { return r.removed }

// Status returns raft's status of the replica.
func (r *Replica) Status() raft.BasicStatus { return r.rn.BasicStatus() }

// Progress returns what this replica, if it leads, knows of peer id: the
// highest log index id has acknowledged as persisted (Match) and whether
// the leader streams appends to it (raft's StateReplicate, as opposed to
// probing it or waiting on a snapshot). ok is false on a follower and for
// a peer not in the configuration.
func (r *Replica) Progress(id ids.ReplicaID) (match uint64, replicating, ok bool) {
	if !r.isLeader {
		return 0, false, false
	}
	r.rn.WithProgress(func(pid uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pid == uint64(id) {
			match, replicating, ok = pr.Match, pr.State == tracker.StateReplicate, true
		}
	})
	return match, replicating, ok
}

// Campaign starts an election, unless this replica was loaded after it
// may have acknowledged a leader, less than ElectionTicks - 1 ticks ago
// (dropVote): its own vote counts towards its election, and granting it
// would break that acknowledgement's promise to the leader's lease as
// granting another's would (lease.go). It then returns ErrVoteQuiet; raft's
// own election timer fires only after that window. The only voter of its
// configuration backs no other replica's lease and campaigns at once. A
// replica that refuses leadership (handoff.go) returns
// ErrRefusingLeadership.
func (r *Replica) Campaign() error {
	if r.refuseLead {
		return ErrRefusingLeadership
	}
	if r.ticks < r.voteQuietTicks && !r.soleVoter() {
		return ErrVoteQuiet
	}
	return r.rn.Campaign()
}

// soleVoter reports whether this replica is the only voter of raft's
// configuration.
func (r *Replica) soleVoter() bool {
	voters := r.rn.Status().Config.Voters.IDs()
	_, in := voters[uint64(r.cfg.ReplicaID)]
	return in && len(voters) == 1
}

// ForgetLeader makes a follower drop the leader it believes in, so that it
// grants (pre-)votes at once instead of ignoring them for the rest of an
// election timeout (CheckQuorum's lease). Only for a leader known to be
// gone: raft's safety does not depend on it, but a live leader's followers
// that forget it may elect another and cost it its term. No-op on a leader.
func (r *Replica) ForgetLeader() error { return r.rn.ForgetLeader() }

// Campaigning reports whether raft is in an election it started (pre-candidate
// or candidate).
func (r *Replica) Campaigning() bool {
	st := r.rn.BasicStatus().RaftState
	return st == raft.StatePreCandidate || st == raft.StateCandidate
}

// CurrentLeader is the leader raft believes in right now (0: none); unlike
// LeaderNode it does not wait for the next Ready to see a change.
func (r *Replica) CurrentLeader() ids.ReplicaID { return ids.ReplicaID(r.rn.BasicStatus().Lead) }

// Tick advances the replica's logical clock and forgets work whose callers
// have long given up.
func (r *Replica) Tick() {
	r.rn.Tick()
	r.ticks++
	for id, p := range r.proposals {
		if r.ticks-p.born > r.cfg.PendingTimeoutTicks {
			delete(r.proposals, id)
			p.Done <- Outcome{Err: ErrAmbiguous}
		}
	}
	r.expireReads()
}

// Step hands raft a message that fromNode sent at the host's time now,
// unless checkStep refuses it (an error wrapping ErrInvalidMessage; raft saw
// nothing). A sender's replica id not known yet is recorded as living on
// fromNode. A vote request that dropVote refuses is dropped silently, as
// raft ignores one during its own lease; so are the messages that would
// make a replica that refuses leadership lead (refusedStep, handoff.go).
func (r *Replica) Step(fromNode ids.NodeID, m *pb.Message, now int64) error {
	if err := r.checkStep(fromNode, m); err != nil {
		return err
	}
	if _, ok := r.nodes[ids.ReplicaID(m.GetFrom())]; !ok {
		r.nodes[ids.ReplicaID(m.GetFrom())] = fromNode
	}
	if r.dropVote(m) {
		r.logger().Debug("vote request dropped: replica loaded less than an election timeout ago",
			"shard", r.cfg.Shard, "replica", r.cfg.ReplicaID, "from", m.GetFrom(), "type", m.GetType())
		return nil
	}
	if r.refusedStep(m) {
		r.logger().Debug("message dropped: the node is stopping and takes no leadership",
			"shard", r.cfg.Shard, "replica", r.cfg.ReplicaID, "from", m.GetFrom(), "type", m.GetType())
		return nil
	}
	err := r.rn.Step(m)
	r.noteHeard(m, now)
	r.heardHeartbeat(m)
	return err
}

// ReportUnreachable tells raft a message to replica id could not be sent.
func (r *Replica) ReportUnreachable(id ids.ReplicaID) { r.rn.ReportUnreachable(uint64(id)) }

// ReportSnapshot tells raft whether a snapshot reached replica id.
func (r *Replica) ReportSnapshot(id ids.ReplicaID, ok bool) {
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	r.rn.ReportSnapshot(uint64(id), st)
}

// StageSnapshot takes ownership of s, the data of the snapshot at index,
// for InstallSnapshot to ingest when raft accepts it. A snapshot staged
// earlier for the same index is discarded.
func (r *Replica) StageSnapshot(index uint64, s *storage.StagedSnapshot) {
	if old, ok := r.staged[index]; ok && old != s {
		old.Discard()
	}
	r.staged[index] = s
	r.stagedAt[index] = r.ticks
}

// ExpireStagedSnapshots discards the staged snapshots raft rejected (at or
// below the applied index: raft accepts a snapshot only above its commit
// index, and one it accepted is installed before the applied index moves
// on) and those older than ttlTicks, which raft never took up.
func (r *Replica) ExpireStagedSnapshots(ttlTicks uint64) {
	for idx, s := range r.staged {
		if idx <= r.applied || r.ticks-r.stagedAt[idx] > ttlTicks {
			s.Discard()
			delete(r.staged, idx)
			delete(r.stagedAt, idx)
		}
	}
}

// DropStagedSnapshots discards staged data raft did not (or no longer can) use.
func (r *Replica) DropStagedSnapshots() {
	for idx, s := range r.staged {
		s.Discard()
		delete(r.staged, idx)
		delete(r.stagedAt, idx)
	}
}

// HasReady reports whether raft has work for a Ready cycle.
func (r *Replica) HasReady() bool { return r.rn.HasReady() }

// Ready returns raft's next Ready, noting whether it changes the term or
// vote (compared with the hard state stored before it, so before a snapshot
// in it is installed).
func (r *Replica) Ready() raft.Ready {
	rd := r.rn.Ready()
	prev := r.log.HardState()
	r.voteChanged = rd.HardState != nil &&
		(rd.HardState.GetTerm() != prev.GetTerm() || rd.HardState.GetVote() != prev.GetVote())
	return rd
}

// RaftLog returns the replica's raft.Storage.
func (r *Replica) RaftLog() *storage.RaftLog { return r.log }

// Nodes returns the node hosting each known replica id of the shard.
func (r *Replica) Nodes() map[ids.ReplicaID]ids.NodeID { return r.nodes }

func (r *Replica) logger() *slog.Logger { return r.cfg.Logger }
