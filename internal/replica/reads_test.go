package replica

import (
	"errors"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// flushAndCount flushes the queued reads and runs Ready cycles until raft
// has nothing more, returning how many ReadIndex requests raft answered
// (a lone voter answers each at once, with one ReadState).
func (s *solo) flushAndCount() int {
	s.t.Helper()
	s.r.FlushReads(s.now)
	n := 0
	for s.r.HasReady() {
		rd := s.r.Ready()
		n += len(rd.ReadStates)
		s.r.Advance(rd) // a read-only Ready: nothing to persist
	}
	return n
}

// served checks that every read in rds was served and releases its view.
func served(t *testing.T, rds []*Read) {
	t.Helper()
	for i, rd := range rds {
		select {
		case err := <-rd.Done:
			if err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			rd.View().Release()
		default:
			t.Fatalf("read %d not served", i)
		}
	}
}

// TestReadsShareOneReadIndex protects the batching of linearizable reads:
// N reads queued in one loop turn cost raft exactly one ReadIndex request
// (one ReadState), and all are served from it; a read queued after the
// flush is not served by that round but by the next.
func TestReadsShareOneReadIndex(t *testing.T) {
	s := newSolo(t)
	var first []*Read
	for range 10 {
		first = append(first, s.read())
	}
	s.r.FlushReads(s.now)
	late := s.read() // arrives after the round was issued
	n := 0
	for s.r.HasReady() {
		rd := s.r.Ready()
		n += len(rd.ReadStates)
		s.r.Advance(rd)
	}
	if n != 1 || s.r.ReadRounds() != 1 {
		t.Fatalf("10 reads in one turn made %d ReadIndex requests (%d rounds), want 1", n, s.r.ReadRounds())
	}
	served(t, first)
	if len(late.Done) != 0 {
		t.Fatal("a read queued after the round was issued was answered by that round")
	}
	if n := s.flushAndCount(); n != 1 || s.r.ReadRounds() != 2 {
		t.Fatalf("the next turn made %d ReadIndex requests (%d rounds in all), want 1 (2)", n, s.r.ReadRounds())
	}
	served(t, []*Read{late})
	if n := s.flushAndCount(); n != 0 || s.r.ReadRounds() != 2 {
		t.Fatalf("a turn without reads made %d ReadIndex requests (%d rounds in all), want none", n, s.r.ReadRounds())
	}
}

// TestOneRoundInFlight protects batching under load: while a round waits
// for raft's answer, a flush issues no new round; the reads queued
// meanwhile go out together as the next round once the answer is in, and
// none is served by the round issued before it arrived.
func TestOneRoundInFlight(t *testing.T) {
	s := newSolo(t)
	first := s.read()
	s.r.FlushReads(s.now)
	var next []*Read
	for range 3 {
		next = append(next, s.read())
		s.r.FlushReads(s.now) // later loop turns, the first round still unanswered
	}
	if s.r.ReadRounds() != 1 {
		t.Fatalf("%d rounds issued while the first was unanswered, want 1", s.r.ReadRounds())
	}
	rd := s.r.Ready()
	if len(rd.ReadStates) != 1 {
		t.Fatalf("raft answered %d ReadIndex requests, want 1", len(rd.ReadStates))
	}
	s.r.Advance(rd)
	served(t, []*Read{first})
	for i, r := range next {
		if len(r.Done) != 0 {
			t.Fatalf("read %d, queued after the first round was issued, was answered by it", i)
		}
	}
	if n := s.flushAndCount(); n != 1 || s.r.ReadRounds() != 2 {
		t.Fatalf("the reads queued meanwhile made %d ReadIndex requests (%d rounds in all), want 1 (2)", n, s.r.ReadRounds())
	}
	served(t, next)
}

// stepDown makes the solo replica's raft follow replica 2 in a later term,
// as a heartbeat from a newer leader does, without a Ready cycle.
func (s *solo) stepDown() {
	s.t.Helper()
	term := s.r.Status().GetTerm() + 1
	if err := s.r.Step(2, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term)}, s.now); err != nil {
		s.t.Fatal(err)
	}
}

// TestReadRoundFailsWhenLeadershipEnds protects against stale reads from a
// deposed leader: a round raft answered in the very Ready that also ends
// the replica's leadership (a newer term) is failed with NotLeaderError,
// not served.
func TestReadRoundFailsWhenLeadershipEnds(t *testing.T) {
	s := newSolo(t)
	rd := s.read()
	s.r.FlushReads(s.now) // a lone voter answers at once: the ReadState is in the next Ready
	s.stepDown()
	for s.r.HasReady() {
		s.cycle()
	}
	var nl *NotLeaderError
	if err := <-rd.Done; !errors.As(err, &nl) {
		t.Fatalf("read whose round ended with the leadership: %v, want NotLeaderError", err)
	}
}

// TestFlushAfterStepDownRefuses protects the follower path: raft steps
// down while a loop turn steps messages, after reads were queued on the
// leader. The flush then issues no ReadIndex (raft would forward it to the
// new leader, or drop it with no leader known) and fails the reads at once,
// so callers retry at the new leader instead of waiting.
func TestFlushAfterStepDownRefuses(t *testing.T) {
	s := newSolo(t)
	rd := s.read()
	s.stepDown()
	s.r.FlushReads(s.now)
	var nl *NotLeaderError
	select {
	case err := <-rd.Done:
		if !errors.As(err, &nl) {
			t.Fatalf("read flushed after raft stepped down: %v, want NotLeaderError", err)
		}
	default:
		t.Fatal("read flushed after raft stepped down is still waiting")
	}
	if s.r.ReadRounds() != 0 {
		t.Fatalf("%d rounds issued by a replica raft no longer leads", s.r.ReadRounds())
	}
	for s.r.HasReady() {
		rd := s.r.Ready()
		for _, m := range rd.Messages {
			if m.GetType() == pb.MsgReadIndex {
				t.Fatalf("a follower sent %v", m)
			}
		}
		s.r.Advance(rd)
	}
}

// TestReadsFailWhenRemoved protects a removed replica's callers: a read
// arriving once the replica was removed is refused, not queued for ever
// (reads queued or in a round when it is destroyed: TestDestroyFailsEverything).
func TestReadsFailWhenRemoved(t *testing.T) {
	s := newSolo(t)
	s.r.removed = true
	rd := s.read()
	if err := <-rd.Done; !errors.Is(err, ErrRemoved) {
		t.Fatalf("read on a removed replica: %v, want ErrRemoved", err)
	}
}
