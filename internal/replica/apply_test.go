package replica

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// sessionProposal is a proposal of a put of k by session at seq.
func (s *solo) sessionProposal(session, seq uint64, k, v string) *Proposal {
	s.ids++
	cmd := &storepb.Command{Id: s.ids, UnixNanos: int64(s.ids) * int64(time.Millisecond), Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: session, Seq: seq,
		Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte(k), Value: []byte(v), ReturnPrev: true}}}}}
	data, err := proto.Marshal(cmd)
	if err != nil {
		s.t.Fatal(err)
	}
	return &Proposal{ID: s.ids, Data: data, Done: make(chan Outcome, 1)}
}

// outcome runs cycles until p has its outcome (at most a few: a lone
// voter commits what it appended in the next Ready).
func (s *solo) outcome(p *Proposal, inspect func(*pebble.Batch)) Outcome {
	s.t.Helper()
	for range 10 {
		select {
		case o := <-p.Done:
			return o
		default:
		}
		if !s.r.HasReady() {
			s.t.Fatal("no outcome and nothing to do")
		}
		s.cycleInspect(inspect)
	}
	s.t.Fatal("no outcome after 10 cycles")
	return Outcome{}
}

// TestApplyWritesStateOncePerBatch protects the replica's half of the
// once-per-batch session and clock records: entries of one session and of
// another applied in one Ready leave one session record per session and
// one applied-state record, holding the shard clock, in the loop's batch
// (Flush called, before the applied index is written); and a replica loaded from the engine after
// that (a restart: a fresh state machine) answers a retry of the last seq
// with its first result and applies nothing.
func TestApplyWritesStateOncePerBatch(t *testing.T) {
	s := newSolo(t)
	ps := []*Proposal{
		s.sessionProposal(7, 1, "a", "1"),
		s.sessionProposal(8, 1, "b", "1"),
		s.sessionProposal(7, 2, "a", "2"),
		s.sessionProposal(7, 3, "a", "3"),
	}
	for _, p := range ps {
		s.r.Propose(p)
	}
	s.r.FlushProposals()
	applied := false
	last := s.outcome(ps[len(ps)-1], func(b *pebble.Batch) {
		n := map[string]int{}
		r := batchrepr.Read(b.Repr())
		for {
			_, k, _, ok, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			n[string(k)]++
		}
		if n[string(keys.User(soloShard, []byte("a")))] == 0 {
			return // not the batch that applies them
		}
		applied = true
		for _, k := range [][]byte{keys.Session(soloShard, 7), keys.Session(soloShard, 8), keys.Applied(soloShard)} {
			if n[string(k)] != 1 {
				t.Fatalf("%d writes of %x in the batch applying the four entries, want 1", n[string(k)], k)
			}
		}
		if n[string(keys.Clock(soloShard))] != 0 {
			t.Fatalf("%d writes of the legacy clock record, want none: the clock is in the applied state", n[string(keys.Clock(soloShard))])
		}
		var as storepb.AppliedState
		if _, err := storage.GetProto(b, keys.Applied(soloShard), &as); err != nil || as.GetClock() == nil {
			t.Fatalf("applied state %v (%v): want the shard clock in it", &as, err)
		}
	})
	if !applied {
		t.Fatal("no batch applied the entries")
	}
	if last.Err != nil || string(last.Result.GetResults()[0].GetValue()) != "2" {
		t.Fatalf("seq 3 outcome %+v, want applied over value 2", last)
	}
	for _, p := range ps[:3] {
		if o := <-p.Done; o.Err != nil {
			t.Fatalf("proposal %d: %v", p.ID, o.Err)
		}
	}

	restarted := startSolo(t, s.eng, s.ids)
	retry := restarted.sessionProposal(7, 3, "a", "applied twice")
	restarted.r.Propose(retry)
	restarted.r.FlushProposals()
	if o := restarted.outcome(retry, nil); o.Err != nil || !proto.Equal(o.Result, last.Result) {
		t.Fatalf("retry of seq 3 after a restart answered %+v, first answer %v", o, last.Result)
	}
	newer := restarted.sessionProposal(7, 4, "a", "4")
	restarted.r.Propose(newer)
	restarted.r.FlushProposals()
	if o := restarted.outcome(newer, nil); o.Err != nil || string(o.Result.GetResults()[0].GetValue()) != "3" {
		t.Fatalf("seq 4 after a restart: %+v, want applied over value 3", o)
	}
}
