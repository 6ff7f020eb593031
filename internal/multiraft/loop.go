package multiraft

import (
	"errors"
	"runtime"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/replica"
	"github.com/concord-kv/concord/internal/storage"
)

type inbox struct {
	msgs  []inMsg
	props []shardProposal
	reads []shardRead
	fns   []func()
}

type inMsg struct {
	fromNode ids.NodeID
	shard    ids.ShardID
	m        *pb.Message
	via      via // the stream it came on
}

type shardProposal struct {
	shard ids.ShardID
	p     *replica.Proposal
}

type shardRead struct {
	shard ids.ShardID
	r     *replica.Read
}

// run is the loop. It is the only goroutine that touches a replica.
func (h *Host) run() {
	defer close(h.doneC)
	defer h.releaseView() // first: no view may outlive the loop
	ticks := h.cfg.Ticks
	if ticks == nil {
		ticks = realTicker{time.NewTicker(h.cfg.TickInterval)}
	}
	defer ticks.Stop()
	for {
		select {
		case <-h.stopC:
			h.shutdown()
			return
		case <-ticks.C():
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

// fatal hands a storage error to Config.Fatal, which stops the process in
// production: a storage failure leaves raft inoperable, and a replica must
// never continue from state it could not persist. If Fatal returns (tests),
// the loop goroutine ends right here; its deferred calls close doneC.
func (h *Host) fatal(err error) {
	h.stopped.Store(true)
	h.cfg.Fatal(err)
	runtime.Goexit()
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

func (h *Host) tick() {
	h.ticks++
	h.now = h.cfg.Clock() // for runCampaigns (gone.go)
	for _, r := range h.replicas {
		r.Tick()
		h.dirty[r.Shard()] = r
	}
	h.runCampaigns()
	h.runPolicies()
	h.reportAllFastReads()
}

// drain takes the inbox and feeds it to the replicas.
func (h *Host) drain() {
	h.mu.Lock()
	in := h.inbox
	h.inbox = inbox{}
	// After taking the inbox: every read in it began before now, which is
	// then inside its interval for a lease check (replica/lease.go); and
	// before any round issued in this turn sends its heartbeats.
	h.now = h.cfg.Clock()
	if h.inboxBytes > 0 {
		h.inboxBytes = 0
		close(h.spaceC)
		h.spaceC = make(chan struct{})
	}
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
	// Last, so that raft's role is final for this turn: one ReadIndex per
	// shard serves every read that arrived in it.
	for _, r := range h.dirty {
		r.FlushReads(h.now)
		if h.noteReads(r) {
			h.publish(r) // a lease read needs no Ready, which publishes otherwise
		}
	}
}

// noteReads reports r's reads served since the last call to the Observer,
// and whether any was served by lease.
func (h *Host) noteReads(r *replica.Replica) bool {
	byLease, byRound := r.TakeReadCounts()
	if h.cfg.Observer != nil && byLease+byRound > 0 {
		h.cfg.Observer.Reads(byLease, 0, byRound)
	}
	return byLease > 0
}

// step delivers a peer's message, creating the replica if this is the first
// message a newly added replica receives, and reports whether raft got it.
// Every check comes before anything is persisted or destroyed; a refused
// message is dropped (validate.go).
func (h *Host) step(in inMsg) bool {
	if err := checkEnvelope(in); err != nil {
		h.drop(in, err)
		return false
	}
	r := h.replicas[in.shard]
	to := ids.ReplicaID(in.m.GetTo())
	if r != nil && r.ID() != to {
		if to < r.ID() {
			return false // addressed to an older replica of this shard here
		}
		if err := h.checkSupersede(r, in); err != nil {
			h.drop(in, err)
			return false
		}
		h.destroyReplica(r) // a newer replica of the shard was added here
		r = nil
	}
	if r == nil {
		var err error
		if r, err = h.createReplica(in); r == nil {
			h.drop(in, err)
			return false
		}
	}
	if err := r.Step(in.fromNode, in.m, h.now); err != nil {
		if errors.Is(err, replica.ErrInvalidMessage) {
			h.drop(in, err)
			return false
		}
		if !errors.Is(err, raft.ErrStepPeerNotFound) {
			h.log.Debug("step failed", "shard", in.shard, "type", in.m.GetType(), "err", err)
		}
	}
	h.dirty[in.shard] = r
	return true
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
	mustSync, sentEarly := false, false
	for shard, r := range h.dirty {
		delete(h.dirty, shard)
		if !r.HasReady() {
			r.DropStagedSnapshots() // raft took none of them (see below)
			continue
		}
		rd := r.Ready()
		if !raft.IsEmptySnap(rd.Snapshot) {
			h.voidLease(shard) // before the shard's data is replaced (fastread.go)
			h.engineChanged()
			if err := r.InstallSnapshot(rd); err != nil { // it drops the others
				h.fatal(err)
			}
		} else {
			// Raft puts a snapshot it accepted into the very next Ready, and
			// a snapshot it ignored (stale, of a lower term, not naming this
			// replica) is never stepped again: staged data raft did not take
			// by now is garbage. Without this it waited for the truncation
			// pass's SnapshotHandleTTL, however many a peer sent meanwhile.
			r.DropStagedSnapshots()
		}
		if err := r.Persist(b, rd); err != nil {
			h.fatal(err)
		}
		if err := r.Apply(b, rd); err != nil {
			h.fatal(err)
		}
		mustSync = mustSync || rd.MustSync
		early, late := r.Messages(rd)
		// Before anything of this Ready leaves: a step-down, transfer,
		// membership change or removal voids the published lease.
		h.checkLease(r)
		h.send(r, early) // a leader's appends overlap its own fsync
		sentEarly = sentEarly || len(early) > 0
		cycles = append(cycles, cycle{r, rd, late})
	}
	if len(cycles) == 0 {
		b.Close()
		return
	}
	h.transport.Flush() // the early messages, before this node's fsync
	if sentEarly && mustSync {
		h.yieldToSenders()
	}
	if mutant.Enabled && mutant.On(mutant.AckBeforeFsync) {
		mustSync = false
	}
	if !b.Empty() {
		h.engineChanged()
	}
	records := int(b.Count())
	start := time.Now()
	if err := storage.Commit(b, mustSync); err != nil {
		h.fatal(err)
	}
	// Before any reply of this turn: fast lease reads see every write
	// acknowledged from now on (fastread.go).
	h.refreshView()
	if h.cfg.Observer != nil {
		h.cfg.Observer.Commit(mustSync, time.Since(start), len(cycles), records)
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
		// Reads that queued while a round was answered here go out now,
		// as the next round (its heartbeats leave in the next Ready).
		c.r.FlushReads(h.now)
		h.noteReads(c.r)
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

// yieldToSenders lets the transport's lane goroutines, just woken by Flush,
// write the early appends before this goroutine starts its fsync. Without
// it they wrote about 0.1 ms later, after the fsync had begun
// (docs/benchmarks.md, "Single-client put latency"): Pebble's commit wakes
// its WAL goroutine, which takes the woken lane's place as the next to run
// on this P and then holds the P in its fdatasync until the runtime's
// monitor hands the P off. A put commits when a follower's ack arrives, so
// those appends are on its critical path; the yield costs the loop
// nothing it was not about to wait for anyway.
func (h *Host) yieldToSenders() {
	if h.cfg.YieldToSenders != nil {
		h.cfg.YieldToSenders()
		return
	}
	runtime.Gosched()
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
	shard, to := r.Shard(), ids.ReplicaID(ob.Msg.GetTo())
	snap := h.snaps.take(ob.Msg.GetSnapshot().GetData())
	if snap == nil {
		h.log.Warn("snapshot handle unknown; reporting failure", "shard", shard, "to", to)
		r.ReportSnapshot(to, false)
		return
	}
	// Debug: raft asks again every tick while a peer backs us off
	// (transport.snapshotBackoff); the transport says Info when it sends.
	h.log.Debug("snapshot to send", "shard", shard, "to_replica", to, "to_node", ob.ToNode,
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
	trunc, _ := r.RaftLog().Truncated()
	info := ReplicaInfo{
		Shard: r.Shard(), ReplicaID: r.ID(), Desc: r.Descriptor(),
		IsLeader: r.IsLeader(), LeaderReplica: ids.ReplicaID(st.Lead), LeaderNode: r.LeaderNode(),
		Term: st.GetTerm(), Commit: st.GetCommit(), Applied: r.Applied(),
		Transferee: ids.ReplicaID(st.LeadTransferee), ReadRounds: r.ReadRounds(),
		LeaseReads: r.LeaseReads(), Truncated: trunc,
	}
	h.infoMu.Lock()
	was, known := h.infos[r.Shard()]
	h.infos[r.Shard()] = info
	if !known || was.Desc != info.Desc { // descriptors are replaced, never edited in place
		h.descGen.Add(1)
	}
	if !known || was.IsLeader != info.IsLeader || was.LeaderNode != info.LeaderNode {
		h.publishLeaders()
	}
	h.infoMu.Unlock()
	if h.cfg.Observer != nil && known && was.IsLeader != info.IsLeader {
		h.cfg.Observer.LeaderChange()
	}
	if h.cfg.OnLeaderKnown != nil && info.LeaderReplica != 0 && (!known || was.LeaderReplica != info.LeaderReplica) {
		h.cfg.OnLeaderKnown(r.Shard())
	}
	h.publishLease(r)
}
