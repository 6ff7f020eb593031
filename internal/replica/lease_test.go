package replica

import (
	"errors"
	"log/slog"
	"math"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/storage"
)

// loadVoter loads replica 1 of a three-voter shard whose stored term is
// term (storage.InitialTerm: never past the bootstrap, as in a fresh
// cluster), as a process starting up does.
func loadVoter(t *testing.T, term uint64) *Replica {
	t.Helper()
	eng, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	d := &concordpb.ShardDescriptor{ShardId: soloShard, EndHash: math.MaxUint64, Epoch: 1, NextReplicaId: 4,
		Replicas: []*concordpb.ReplicaDescriptor{rep(1, 1), rep(2, 2), rep(3, 3)}}
	b := eng.NewBatch()
	defer b.Close()
	if err := storage.BootstrapReplica(b, d, 1); err != nil {
		t.Fatal(err)
	}
	hs := &pb.HardState{Term: new(term), Commit: new(uint64(storage.InitialIndex))}
	if err := storage.SetProto(b, keys.HardState(soloShard), hs); err != nil {
		t.Fatal(err)
	}
	if err := storage.Commit(b, true); err != nil {
		t.Fatal(err)
	}
	r, err := Load(eng, Config{NodeID: 1, Shard: soloShard, ReplicaID: 1, ElectionTicks: 10, HeartbeatTicks: 1,
		MaxSizePerMsgBytes: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedBytes: 64 << 20,
		PendingTimeoutTicks: 10000, Logger: slog.New(slog.DiscardHandler)}, kv.New(soloShard))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// preVoteGranted steps a pre-vote request from replica 2, whose log is
// ahead, and reports whether the replica answered it, and granted it.
func preVoteGranted(t *testing.T, r *Replica, ctx []byte) (answered, granted bool) {
	t.Helper()
	term := r.Status().GetTerm() + 1
	m := &pb.Message{Type: pb.MsgPreVote.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term),
		Index: new(uint64(storage.InitialIndex + 100)), LogTerm: new(term - 1), Context: ctx}
	if err := r.Step(2, m, 0); err != nil {
		t.Fatal(err)
	}
	if !r.HasReady() {
		return false, false
	}
	rd := r.rn.Ready()
	defer r.rn.Advance(rd)
	for _, out := range rd.Messages {
		if out.GetType() == pb.MsgPreVoteResp {
			return true, !out.GetReject()
		}
	}
	return false, false
}

// TestRestartedVoterIgnoresVotesForAnElectionTimeout protects leases from
// a voter's restart: raft starts with no leader and would grant a vote at
// once, though before it stopped the voter may have acknowledged a
// heartbeat that a leader's lease counts on. A replica loaded with a term
// past the bootstrap one ignores vote requests (not a transfer's) until
// ElectionTicks - 1 ticks went by, then answers them; a replica of a fresh
// cluster answers at once, so a new cluster elects without delay.
func TestRestartedVoterIgnoresVotesForAnElectionTimeout(t *testing.T) {
	r := loadVoter(t, storage.InitialTerm+3)
	for i := range 9 {
		if answered, _ := preVoteGranted(t, r, nil); answered {
			t.Fatalf("a voter restarted %d ticks ago answered a pre-vote", i)
		}
		r.Tick()
	}
	if answered, granted := preVoteGranted(t, r, nil); !answered || !granted {
		t.Fatalf("after 9 ticks the restarted voter answered=%v granted=%v, want a granted pre-vote", answered, granted)
	}

	forced := loadVoter(t, storage.InitialTerm+3)
	if answered, _ := preVoteGranted(t, forced, campaignTransfer); !answered {
		t.Fatal("a restarted voter ignored a leader transfer's campaign, which raft grants despite any lease")
	}

	fresh := loadVoter(t, storage.InitialTerm)
	if answered, granted := preVoteGranted(t, fresh, nil); !answered || !granted {
		t.Fatalf("a voter of a fresh cluster answered=%v granted=%v, want a granted pre-vote at once", answered, granted)
	}
}

// TestRestartedVoterDoesNotCampaignForAnElectionTimeout protects leases
// from a restarted voter's own campaign (multiraft's Start makes a shard's
// preferred replica campaign at once): its own vote counts, so within the
// window in which it ignores others' vote requests it does not campaign
// either; after it, and at once in a fresh cluster, it does.
func TestRestartedVoterDoesNotCampaignForAnElectionTimeout(t *testing.T) {
	r := loadVoter(t, storage.InitialTerm+3)
	for i := range 9 {
		if err := r.Campaign(); !errors.Is(err, ErrVoteQuiet) {
			t.Fatalf("a voter restarted %d ticks ago: Campaign = %v, want ErrVoteQuiet", i, err)
		}
		if r.Campaigning() {
			t.Fatalf("a voter restarted %d ticks ago campaigns", i)
		}
		r.Tick()
	}
	if err := r.Campaign(); err != nil || !r.Campaigning() {
		t.Fatalf("after 9 ticks: Campaign = %v, campaigning %v; want a campaign", err, r.Campaigning())
	}
	fresh := loadVoter(t, storage.InitialTerm)
	if err := fresh.Campaign(); err != nil || !fresh.Campaigning() {
		t.Fatalf("a voter of a fresh cluster: Campaign = %v, campaigning %v; want a campaign at once", err, fresh.Campaigning())
	}
}

// TestLeaseNeedsItsTermAndClock protects the lease's conditions on a lone
// voter (which answers rounds at once): a read after an answered round is
// served by lease until the clock reaches the round's time plus the lease
// duration, and not after; a round renews it; a membership change applied
// voids it.
func TestLeaseNeedsItsTermAndClock(t *testing.T) {
	s := newSolo(t)
	s.r.cfg.LeaseDuration = 1000
	s.now = 5000
	rd := s.read()
	if n := s.flushAndCount(); n != 1 {
		t.Fatalf("first read: %d rounds answered, want 1", n)
	}
	served(t, []*Read{rd})
	s.now = 5400 // the round was issued at 5000; more than half is left
	rd = s.read()
	if n := s.flushAndCount(); n != 0 || s.r.LeaseReads() != 1 {
		t.Fatalf("read inside the lease: %d rounds, %d by lease; want 0 and 1", n, s.r.LeaseReads())
	}
	served(t, []*Read{rd})
	s.now = 6000
	rd = s.read()
	s.r.FlushReads(s.now)
	if s.r.LeaseReads() != 1 {
		t.Fatal("a read at the lease's expiry was served by lease")
	}
	for s.r.HasReady() {
		s.cycle()
	}
	served(t, []*Read{rd})

	// The round above (issued at 6000) gave a new lease; with less than
	// half of it left a read is served by lease and renews it.
	s.now = 6600
	rd = s.read()
	if n := s.flushAndCount(); n != 1 || s.r.LeaseReads() != 2 {
		t.Fatalf("read late in the lease: %d rounds, %d by lease in all; want a renewal round and 2", n, s.r.LeaseReads())
	}
	served(t, []*Read{rd})
	// A membership change applied voids the lease.
	cc, err := AddLearnerChange(s.r.Descriptor(), 99, 2)
	if err != nil {
		t.Fatal(err)
	}
	s.r.ProposeConfChange(&Proposal{ID: 99, CC: cc, Done: make(chan Outcome, 1)})
	for s.r.HasReady() {
		s.cycle()
	}
	if len(s.r.Descriptor().GetReplicas()) != 2 {
		t.Fatalf("the learner was not added: %v", s.r.Descriptor())
	}
	rd = s.read()
	s.r.FlushReads(s.now)
	if s.r.LeaseReads() != 2 {
		t.Fatal("a read after a membership change was served by the lease from before it")
	}
	for s.r.HasReady() {
		s.cycle()
	}
	served(t, []*Read{rd})
}
