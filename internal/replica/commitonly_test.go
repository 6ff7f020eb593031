package replica

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/storage"
)

// trio is replica 1 of a three-voter shard, made leader, whose followers 2
// and 3 the test plays by stepping their answers.
type trio struct {
	t   *testing.T
	r   *Replica
	eng *storage.Engine
	ids uint64
	// wanted are the messages raft put in the Readies of the last run,
	// before Messages chose what to send.
	wanted []*pb.Message
}

func newTrio(t *testing.T) *trio {
	tr := &trio{t: t, r: loadVoter(t, storage.InitialTerm), ids: 1000}
	tr.eng = tr.r.eng
	if err := tr.r.Campaign(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		for _, m := range tr.run() {
			switch m.GetType() {
			case pb.MsgPreVote, pb.MsgVote:
				resp := pb.MsgPreVoteResp
				if m.GetType() == pb.MsgVote {
					resp = pb.MsgVoteResp
				}
				tr.step(&pb.Message{Type: resp.Enum(), From: new(m.GetTo()), To: new(uint64(1)), Term: new(m.GetTerm())})
			}
		}
		if tr.r.IsLeader() {
			break
		}
	}
	if !tr.r.IsLeader() {
		t.Fatal("replica 1 did not become leader")
	}
	// Both followers take the leader's first entry: raft replicates to them.
	last := tr.last()
	tr.ack(2, last)
	tr.ack(3, last)
	tr.run()
	return tr
}

func (tr *trio) last() uint64 {
	last, err := tr.r.log.LastIndex()
	if err != nil {
		tr.t.Fatal(err)
	}
	return last
}

func (tr *trio) step(m *pb.Message) {
	tr.t.Helper()
	if err := tr.r.Step(ids.NodeID(m.GetFrom()), m, 0); err != nil { // replica i is on node i
		tr.t.Fatal(err)
	}
}

// ack steps follower from's acknowledgement of the leader's log up to index.
func (tr *trio) ack(from, index uint64) {
	tr.t.Helper()
	tr.step(&pb.Message{Type: pb.MsgAppResp.Enum(), From: new(from), To: new(uint64(1)), Term: new(tr.r.Status().GetTerm()), Index: new(index)})
}

// run does what the host's loop does after stepping: Ready cycles while
// raft has one; it returns the messages sent.
func (tr *trio) run() []*pb.Message {
	tr.t.Helper()
	var sent []*pb.Message
	tr.wanted = nil
	for tr.r.HasReady() {
		rd := tr.r.Ready()
		tr.wanted = append(tr.wanted, rd.Messages...)
		b := tr.eng.NewIndexedBatch()
		if err := tr.r.Persist(b, rd); err != nil {
			tr.t.Fatal(err)
		}
		if err := tr.r.Apply(b, rd); err != nil {
			tr.t.Fatal(err)
		}
		early, late := tr.r.Messages(rd)
		if err := storage.Commit(b, rd.MustSync); err != nil {
			tr.t.Fatal(err)
		}
		b.Close()
		for _, ob := range append(early, late...) {
			sent = append(sent, ob.Msg)
		}
		tr.r.Advance(rd)
	}
	return sent
}

// put proposes a put and runs the cycle that appends it.
func (tr *trio) put() []*pb.Message {
	tr.ids++
	tr.r.Propose(&Proposal{ID: tr.ids, Data: nil, Done: make(chan Outcome, 1)})
	tr.r.FlushProposals()
	return tr.run()
}

// commitOnlyTo returns the commit-only appends among msgs to peer to.
func commitOnlyTo(msgs []*pb.Message, to uint64) []*pb.Message {
	var out []*pb.Message
	for _, m := range msgs {
		if commitOnly(m) && m.GetTo() == to {
			out = append(out, m)
		}
	}
	return out
}

func appendsTo(msgs []*pb.Message, to uint64) int {
	n := 0
	for _, m := range msgs {
		if m.GetType() == pb.MsgApp && len(m.GetEntries()) > 0 && m.GetTo() == to {
			n++
		}
	}
	return n
}

// TestCommitOnlyAppendsLeftOut: follower 2's ack commits a put. Raft wants
// to tell both followers the new commit index with empty appends; neither
// goes out, and the next put's appends carry the commit index instead.
func TestCommitOnlyAppendsLeftOut(t *testing.T) {
	tr := newTrio(t)
	first := tr.put()
	if appendsTo(first, 2) != 1 || appendsTo(first, 3) != 1 {
		t.Fatalf("the put was not appended to both followers: %v", first)
	}
	idx := tr.last()
	tr.ack(2, idx)
	sent := tr.run()
	if len(commitOnlyTo(tr.wanted, 2)) == 0 || len(commitOnlyTo(tr.wanted, 3)) == 0 {
		t.Fatalf("raft sent no commit-only appends after the commit (%v): the test no longer covers them", tr.wanted)
	}
	if got := append(commitOnlyTo(sent, 2), commitOnlyTo(sent, 3)...); len(got) != 0 {
		t.Fatalf("commit-only appends went out: %v", got)
	}
	tr.ack(3, idx) // raft may answer with another commit-only append (CanBumpCommit)
	if got := commitOnlyTo(tr.run(), 3); len(got) != 0 {
		t.Fatalf("commit-only append to follower 3 after its ack: %v", got)
	}
	second := tr.put()
	for _, to := range []uint64{2, 3} {
		if appendsTo(second, to) != 1 {
			t.Fatalf("the second put was not appended to follower %d: %v", to, second)
		}
	}
	for _, m := range second {
		if m.GetType() == pb.MsgApp && m.GetCommit() < idx {
			t.Fatalf("an append of the second put does not carry commit %d: %v", idx, m)
		}
	}
}

// TestHeartbeatResponseAnswered: raft answers a lagging follower's
// heartbeat response with an append, empty when everything is in flight
// already; if those entries were lost, that append is how the leader finds
// out, so it goes out.
func TestHeartbeatResponseAnswered(t *testing.T) {
	tr := newTrio(t)
	tr.put()
	tr.ack(2, tr.last())
	tr.run()
	tr.step(&pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(uint64(3)), To: new(uint64(1)), Term: new(tr.r.Status().GetTerm())})
	if got := commitOnlyTo(tr.run(), 3); len(got) != 1 {
		t.Fatalf("raft's append answering follower 3's heartbeat response: sent %v, want one", got)
	}
	// The mark lasts one Ready: the next commit-only append is left out.
	tr.put()
	tr.ack(3, tr.last())
	tr.run()
	if got := commitOnlyTo(tr.wanted, 2); len(got) == 0 {
		t.Fatalf("raft sent follower 2 no commit-only append (%v): the test no longer covers it", tr.wanted)
	}
	tr.step(&pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(tr.r.Status().GetTerm())})
	tr.ack(2, tr.last())
	if got := commitOnlyTo(tr.run(), 3); len(got) != 0 {
		t.Fatalf("follower 2's heartbeat response let a commit-only append to follower 3 out: %v", got)
	}
}
