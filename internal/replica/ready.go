package replica

import (
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// Propose queues p; FlushProposals hands every queued proposal to raft at
// once, so commands that arrive together are appended together.
func (r *Replica) Propose(p *Proposal) {
	if err := r.checkLeader(); err != nil {
		p.Done <- Outcome{Err: err}
		return
	}
	p.born = r.ticks
	r.queued = append(r.queued, p)
}

// FlushProposals steps the queued proposals into raft as one MsgProp.
func (r *Replica) FlushProposals() {
	if len(r.queued) == 0 {
		return
	}
	ents := make([]*pb.Entry, 0, len(r.queued))
	for _, p := range r.queued {
		ents = append(ents, &pb.Entry{Data: p.Data})
	}
	err := r.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(uint64(r.cfg.ReplicaID)), Entries: ents})
	for _, p := range r.queued {
		if err != nil {
			p.Done <- Outcome{Err: ErrDropped}
			continue
		}
		p.stepped = true
		r.proposals[p.ID] = p
	}
	r.queued = r.queued[:0]
}

// ProposeConfChange hands a membership change to raft. Raft refuses it
// (turning it into an empty entry) while another change is pending; its
// proposal then ends as ambiguous when it times out.
func (r *Replica) ProposeConfChange(p *Proposal) {
	if err := r.checkLeader(); err != nil {
		p.Done <- Outcome{Err: err}
		return
	}
	p.born = r.ticks
	if err := r.rn.ProposeConfChange(p.CC); err != nil {
		p.Done <- Outcome{Err: ErrDropped}
		return
	}
	p.stepped = true
	r.proposals[p.ID] = p
	r.confUnseen = true
}

// ConfChangePending reports whether a membership change may still be
// unapplied: raft's leader accepts only one at a time and turns a second
// into an empty entry (whose proposal would only time out), counting from
// its election (a change from an earlier term may be in its log) and from
// the last change it took. The caller refuses a new change meanwhile, with
// a retryable error. It is conservative: it may report a change pending
// that raft no longer counts, never the reverse.
func (r *Replica) ConfChangePending() bool {
	if r.confUnseen || r.applied < r.confIndex {
		return true
	}
	// A joint configuration applied but not yet left: raft has appended
	// (or is about to append) the change that leaves it.
	return len(r.rn.Status().Config.Voters[1]) > 0
}

// trackConfIndex records, from a Ready this leader persisted, the index up
// to which a membership change may be pending: a change among its entries,
// or, for a change proposed but not seen as such (raft replaced it by an
// empty entry), the last entry.
func (r *Replica) trackConfIndex(rd raft.Ready) {
	for _, e := range rd.Entries {
		if e.GetType() == pb.EntryConfChange || e.GetType() == pb.EntryConfChangeV2 {
			r.confIndex = max(r.confIndex, e.GetIndex())
		}
	}
	if r.confUnseen && len(rd.Entries) > 0 {
		r.confIndex = max(r.confIndex, rd.Entries[len(rd.Entries)-1].GetIndex())
		r.confUnseen = false
	}
}

// TransferLeader asks raft to hand this leader's leadership to voter id.
// Raft aborts the transfer after an election timeout if id does not catch
// up and take over by then.
func (r *Replica) TransferLeader(id ids.ReplicaID) error {
	if err := r.checkLeader(); err != nil {
		return err
	}
	r.barLeaseForTransfer()
	r.rn.TransferLeader(uint64(id))
	return nil
}

func (r *Replica) checkLeader() error {
	if r.removed {
		return ErrRemoved
	}
	if !r.isLeader {
		return &NotLeaderError{Shard: r.cfg.Shard, LeaderNode: r.LeaderNode()}
	}
	return nil
}

// InstallSnapshot ingests the staged data of rd's snapshot, replacing the
// replica's log and state machine atomically. It is durable on return.
func (r *Replica) InstallSnapshot(rd raft.Ready) error {
	meta := rd.Snapshot.GetMetadata()
	idx, term := meta.GetIndex(), meta.GetTerm()
	staged, ok := r.staged[idx]
	if !ok {
		return fmt.Errorf("replica: shard %d: raft accepted snapshot %d but no data was staged", r.cfg.Shard, idx)
	}
	delete(r.staged, idx)
	delete(r.stagedAt, idx)
	hs := proto.Clone(r.log.HardState()).(*pb.HardState)
	if rd.HardState != nil {
		hs = proto.Clone(rd.HardState).(*pb.HardState)
	}
	hs.Commit = new(max(hs.GetCommit(), idx))
	if err := r.eng.InstallSnapshot(r.cfg.Shard, staged, hs, idx, term); err != nil {
		return err
	}
	r.sm.SnapshotInstalled() // its caches describe the state just replaced
	r.DropStagedSnapshots()
	r.log.ResetToSnapshot(idx, term, hs)
	if err := r.loadState(); err != nil {
		return err
	}
	if r.applied != idx && mutant.Enabled && mutant.On(mutant.SnapshotDropsEntry) {
		r.applied, r.appliedTerm = idx, term
		b := r.eng.NewBatch()
		defer b.Close()
		if err := storage.SetProto(b, keys.Applied(uint64(r.cfg.Shard)), &storepb.AppliedState{Index: idx, Term: term}); err != nil {
			return err
		}
		if err := storage.Commit(b, true); err != nil {
			return err
		}
	}
	if r.applied != idx {
		return fmt.Errorf("replica: shard %d: snapshot %d installed applied index %d", r.cfg.Shard, idx, r.applied)
	}
	r.logger().Info("installed snapshot", "shard", r.cfg.Shard, "index", idx, "term", term)
	return nil
}

// Persist writes rd's entries and hard state into b.
func (r *Replica) Persist(b *pebble.Batch, rd raft.Ready) error {
	if err := r.log.Append(b, rd.Entries); err != nil {
		return err
	}
	if rd.HardState != nil {
		if mutant.Enabled && mutant.On(mutant.ForgetVote) {
			hs := proto.Clone(rd.HardState).(*pb.HardState)
			hs.Vote = nil
			return r.log.SetHardState(b, hs)
		}
		return r.log.SetHardState(b, rd.HardState)
	}
	return nil
}

// Apply applies rd's committed entries, then what the state machine
// deferred for them (Flush) and the applied-state record (the applied index
// and what Flush put in it), into b: once per batch, however many entries
// it holds.
func (r *Replica) Apply(b *pebble.Batch, rd raft.Ready) error {
	if len(rd.CommittedEntries) == 0 {
		return nil
	}
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() <= r.applied {
			continue // already applied before a restart; see raft.Config.Applied
		}
		if e.GetIndex() != r.applied+1 {
			return fmt.Errorf("replica: shard %d: apply gap: applied %d, next entry %d", r.cfg.Shard, r.applied, e.GetIndex())
		}
		if err := r.applyEntry(b, e); err != nil {
			return fmt.Errorf("replica: shard %d: apply entry %d: %w", r.cfg.Shard, e.GetIndex(), err)
		}
		r.applied, r.appliedTerm = e.GetIndex(), e.GetTerm()
	}
	as := &r.appliedRec
	as.Index, as.Term = r.applied, r.appliedTerm
	if err := r.sm.Flush(b, as); err != nil {
		return fmt.Errorf("replica: shard %d: flush applied state: %w", r.cfg.Shard, err)
	}
	if r.appliedKey == nil {
		r.appliedKey = keys.Applied(uint64(r.cfg.Shard))
	}
	return storage.SetProtoReusing(b, r.appliedKey, as, &r.appliedBuf)
}

func (r *Replica) applyEntry(b *pebble.Batch, e *pb.Entry) error {
	switch e.GetType() {
	case pb.EntryNormal:
		if len(e.GetData()) == 0 {
			return nil // the empty entry a new leader appends
		}
		cmd, err := r.dec.Decode(e.GetData())
		if err != nil {
			return fmt.Errorf("decode command: %w", err)
		}
		res, err := r.sm.Apply(b, r.desc, cmd)
		if err != nil {
			return err
		}
		r.completions = append(r.completions, completion{id: cmd.GetId(), res: res})
		return nil
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("decode conf change: %w", err)
		}
		return r.applyConfChange(b, cc.AsV2())
	case pb.EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("decode conf change: %w", err)
		}
		return r.applyConfChange(b, &cc)
	default:
		return fmt.Errorf("unknown entry type %v", e.GetType())
	}
}

// applyConfChange applies a membership change to raft and to the shard's
// descriptor. Every committed change is applied; raft itself refuses
// invalid ones at proposal time, and only one can be pending.
func (r *Replica) applyConfChange(b *pebble.Batch, cc *pb.ConfChangeV2) error {
	var ctx storepb.ConfChangeContext
	if len(cc.GetContext()) > 0 {
		if err := proto.Unmarshal(cc.GetContext(), &ctx); err != nil {
			return fmt.Errorf("decode conf change context: %w", err)
		}
		if storepb.HasUnknown(&ctx) {
			return fmt.Errorf("decode conf change context: %w", storepb.ErrUnknownFields)
		}
	}
	cs := r.rn.ApplyConfChange(cc)
	r.dropLease() // the round's quorum was of the old configuration
	if len(cc.GetChanges()) > 0 {
		r.desc = nextDescriptor(r.desc, cc, &ctx)
		for _, rd := range ctx.GetAdded() {
			r.nodes[ids.ReplicaID(rd.GetReplicaId())] = ids.NodeID(rd.GetNodeId())
		}
	}
	if err := storage.SetProto(b, keys.ConfState(uint64(r.cfg.Shard)), cs); err != nil {
		return err
	}
	if err := storage.SetProto(b, keys.Descriptor(uint64(r.cfg.Shard)), r.desc); err != nil {
		return err
	}
	if !inConfState(cs, r.cfg.ReplicaID) {
		r.removed = true
	}
	r.completions = append(r.completions, completion{id: ctx.GetCommandId(), res: &storepb.CommandResult{}})
	r.logger().Info("applied membership change", "shard", r.cfg.Shard, "replica", r.cfg.ReplicaID,
		"voters", cs.GetVoters(), "outgoing", cs.GetVotersOutgoing(), "learners", cs.GetLearners(), "epoch", r.desc.GetEpoch())
	return nil
}

// nextDescriptor returns desc after cc: each removed replica's slot goes to
// an added one, so the order (and with it the preferred leader, the first
// replica) stays stable; remaining additions are appended. A change that
// adds a replica already listed changes its role: AddNode promotes a
// learner to voter, AddLearnerNode demotes a voter.
func nextDescriptor(desc *concordpb.ShardDescriptor, cc *pb.ConfChangeV2, ctx *storepb.ConfChangeContext) *concordpb.ShardDescriptor {
	d := proto.Clone(desc).(*concordpb.ShardDescriptor)
	added := slices.Clone(ctx.GetAdded())
	for _, c := range cc.GetChanges() {
		i := slices.IndexFunc(d.Replicas, func(rd *concordpb.ReplicaDescriptor) bool { return rd.GetReplicaId() == c.GetNodeId() })
		if i < 0 {
			continue
		}
		switch c.GetType() {
		case pb.ConfChangeAddNode:
			d.Replicas[i].Role = concordpb.ReplicaRole_REPLICA_VOTER
			continue
		case pb.ConfChangeAddLearnerNode:
			d.Replicas[i].Role = concordpb.ReplicaRole_REPLICA_LEARNER
			continue
		case pb.ConfChangeRemoveNode:
		default:
			continue
		}
		if len(added) > 0 {
			d.Replicas[i], added = added[0], added[1:]
		} else {
			d.Replicas = slices.Delete(d.Replicas, i, i+1)
		}
	}
	d.Replicas = append(d.Replicas, added...)
	for _, rd := range ctx.GetAdded() {
		d.NextReplicaId = max(d.GetNextReplicaId(), rd.GetReplicaId()+1)
	}
	d.Epoch++
	return d
}

func inConfState(cs *pb.ConfState, id ids.ReplicaID) bool {
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetVotersOutgoing(), cs.GetLearners(), cs.GetLearnersNext()} {
		if slices.Contains(set, uint64(id)) {
			return true
		}
	}
	return false
}

// Outbound is a raft message and the node to send it to.
type Outbound struct {
	ToNode ids.NodeID
	Msg    *pb.Message
}

// Messages splits rd's messages, with their destination nodes, into those
// that may go out before rd is durable (early) and those that must wait
// (late). Messages to replicas whose node is unknown are reported
// unreachable and dropped.
//
// Early are a leader's appends and heartbeats, provided this Ready does not
// change the term or vote: the leader may write its own log in parallel with
// its followers (Raft thesis §10.2.1), because it counts itself towards a
// commit only once its own write is durable. Everything else — votes,
// acknowledgements, anything sent under a new term — waits, since it promises
// state this node has not yet persisted.
//
// A MsgTimeoutNow among them ends lease reads for the term (lease.go). A
// replica that refuses leadership sends no vote request (handoff.go).
//
// A commit-only append is left out when a later append of rd covers it
// (supersededAppend), and a leader sends none to a follower it replicates
// to: the next append or heartbeat tells it the commit index
// (commitonly.go).
func (r *Replica) Messages(rd raft.Ready) (early, late []Outbound) {
	r.noteTransfers(rd)
	r.stampTruncations(rd.Messages)
	skipper := commitSkipper{r: r}
	for i, m := range rd.Messages {
		if supersededAppend(rd.Messages, i) || skipper.skip(m) || r.refusedSend(m) {
			continue
		}
		node, ok := r.nodes[ids.ReplicaID(m.GetTo())]
		if !ok {
			r.rn.ReportUnreachable(m.GetTo())
			continue
		}
		ob := Outbound{ToNode: node, Msg: m}
		if !r.voteChanged && (m.GetType() == pb.MsgApp || m.GetType() == pb.MsgHeartbeat) {
			early = append(early, ob)
		} else {
			late = append(late, ob)
		}
	}
	clear(r.hbResp) // raft answered them in this Ready, if at all
	return early, late
}

// Advance finishes a Ready cycle once its batch is durable and its messages
// are sent: it delivers outcomes, serves reads and tells raft.
func (r *Replica) Advance(rd raft.Ready) {
	for _, c := range r.completions {
		if p, ok := r.proposals[c.id]; ok {
			delete(r.proposals, c.id)
			p.Done <- Outcome{Result: c.res}
		}
	}
	r.completions = r.completions[:0]
	if rd.HardState != nil && rd.HardState.GetTerm() != r.term {
		r.term = rd.HardState.GetTerm()
		r.failStaleRounds()
	}
	if rd.SoftState != nil {
		r.updateLeadership(rd.SoftState)
	}
	r.trackConfIndex(rd)
	r.noteReadStates(rd.ReadStates)
	r.serveReads()
	if r.removed {
		r.failPending(ErrRemoved)
	}
	r.rn.Advance(rd)
}

// updateLeadership fails the work that depended on this replica leading.
func (r *Replica) updateLeadership(ss *raft.SoftState) {
	wasLeader := r.isLeader
	r.isLeader = ss.RaftState == raft.StateLeader
	if ids.ReplicaID(ss.Lead) != r.lead {
		r.logger().Debug("leader changed", "shard", r.cfg.Shard, "replica", r.cfg.ReplicaID,
			"from", r.lead, "to", ss.Lead, "term", r.term)
	}
	r.lead = ids.ReplicaID(ss.Lead)
	if !wasLeader && r.isLeader {
		// raft counts a change from an earlier term as pending until the
		// new leader applied its whole log (persisted by now: Advance
		// follows Persist).
		r.confIndex, _ = r.log.LastIndex()
	}
	if wasLeader && !r.isLeader {
		r.failPending(&NotLeaderError{Shard: r.cfg.Shard, LeaderNode: r.LeaderNode()})
	}
}

// failPending ends every waiting proposal and read. Proposals raft already
// holds are ambiguous; reads never are (nothing was written).
func (r *Replica) failPending(readErr error) {
	for id, p := range r.proposals {
		delete(r.proposals, id)
		p.Done <- Outcome{Err: ErrAmbiguous}
	}
	r.failReads(readErr)
}

// TransferToPreferred hands leadership to the shard's preferred replica (the
// first in its descriptor) when this replica leads instead and the preferred
// one is caught up and reachable. This spreads leaders as the initial
// placement intended, and restores that spread after failovers.
func (r *Replica) TransferToPreferred() {
	if !r.isLeader || r.desc == nil || len(r.desc.GetReplicas()) == 0 {
		return
	}
	preferred := r.desc.GetReplicas()[0].GetReplicaId()
	if ids.ReplicaID(preferred) == r.cfg.ReplicaID {
		return
	}
	st := r.rn.Status()
	pr, ok := st.Progress[preferred]
	if !ok || !pr.RecentActive || pr.IsLearner || pr.Match < r.log.HardState().GetCommit() {
		return
	}
	r.barLeaseForTransfer()
	r.rn.TransferLeader(preferred)
}

// Destroy fails everything still waiting; the caller removes the data.
func (r *Replica) Destroy() {
	r.failPending(ErrRemoved)
	for _, p := range r.queued {
		p.Done <- Outcome{Err: ErrRemoved}
	}
	r.queued = nil
	r.DropStagedSnapshots()
}

// TransferAway hands leadership to the most caught-up reachable voter, if
// this replica leads. It reports whether a transfer was started.
func (r *Replica) TransferAway() bool {
	if !r.isLeader {
		return false
	}
	st := r.rn.Status()
	var best uint64
	var bestMatch uint64
	for id, pr := range st.Progress {
		if ids.ReplicaID(id) == r.cfg.ReplicaID || pr.IsLearner || !pr.RecentActive {
			continue
		}
		if best == 0 || pr.Match > bestMatch {
			best, bestMatch = id, pr.Match
		}
	}
	if best == 0 {
		return false
	}
	r.barLeaseForTransfer()
	r.rn.TransferLeader(best)
	return true
}

// supersededAppend reports whether msgs[i] is an append without entries that
// a later append of the same Ready to the same peer, in the same term, makes
// redundant. Raft sends such an empty MsgApp only to carry the commit index
// (bcastAppend once an ack moves it); under load the same turn's proposals
// then append to the same peer with a commit index as high, so the empty
// one would cost a message each way and tell the follower nothing. Dropping
// it is what raft already tolerates of any message: the later append's
// commit (min of its commit and its last entry) is at least the empty one's
// (min of a lower commit and a lower prev index), an empty append adds
// nothing to the leader's inflight window, and if the later append is
// rejected raft probes again as it would have after a loss.
func supersededAppend(msgs []*pb.Message, i int) bool {
	m := msgs[i]
	if m.GetType() != pb.MsgApp || len(m.GetEntries()) > 0 {
		return false
	}
	for _, later := range msgs[i+1:] {
		if later.GetType() == pb.MsgApp && later.GetTo() == m.GetTo() && later.GetTerm() == m.GetTerm() &&
			later.GetCommit() >= m.GetCommit() && later.GetIndex() >= m.GetIndex() {
			return true
		}
	}
	return false
}
