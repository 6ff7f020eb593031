package grpcapi

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/storepb"
	"github.com/concord-kv/concord/internal/version"
)

// withStateMachine makes f apply each proposal with a real state machine
// per shard over an in-memory Pebble, and answer with its result.
func withStateMachine(t *testing.T, f *fakeNode) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sms := map[ids.ShardID]*kv.StateMachine{}
	f.sm = func(shard ids.ShardID, cmd *storepb.Command) *storepb.CommandResult { // under f.mu
		if sms[shard] == nil {
			sms[shard] = kv.New(uint64(shard))
		}
		b := db.NewIndexedBatch()
		defer b.Close()
		res, err := sms[shard].Apply(b, f.descs[shard], cmd)
		if err == nil {
			err = sms[shard].Flush(b, &storepb.AppliedState{})
		}
		if err == nil {
			err = b.Commit(pebble.NoSync)
		}
		if err != nil {
			t.Errorf("apply: %v", err)
			return &storepb.CommandResult{ErrorCode: uint32(codes.Internal)}
		}
		return res
	}
}

// quietPebble drops Pebble's log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func incrBy(k string, d int64) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte(k), IntDelta: d}
}

// checkIncrs fails unless the answer on ch is INCR results of the values
// want, each as an INCR alone answers (nothing of the run it was in).
func checkIncrs(t *testing.T, name string, ch chan batchAnswer, want ...int64) {
	t.Helper()
	a := <-ch
	if a.err != nil || len(a.res) != len(want) {
		t.Fatalf("%s: %v, %v; want %d results", name, a.res, a.err, len(want))
	}
	for i, w := range want {
		r := a.res[i]
		if !r.GetOk() || r.GetIntValue() != w || string(r.GetValue()) != strconv.FormatInt(w, 10) || r.GetRepeatApplied() != 0 || r.GetError() != 0 {
			t.Fatalf("%s: result %d is %v, want %d", name, i, r, w)
		}
	}
}

// proposedOps describes the ops of f's proposal i: key, delta and repeat.
func proposedOps(f *fakeNode, i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, op := range f.proposals[i].GetKv().GetOps() {
		s = append(s, fmt.Sprintf("%s%+dx%d", op.GetKey(), op.GetIntDelta(), op.GetRepeat()))
	}
	return strings.Join(s, " ")
}

// TestLocalIncrsCoalesced protects INCR runs at the leader
// (kv.Coalesce in proposeOneMerged): pipelined INCRs of one key from
// several batches, merged, are proposed as ONE op with repeat, and each
// caller gets the values its INCRs made, in order; a cluster whose version
// does not allow it gets the INCRs one by one; a coalesced command refused
// whole is proposed again as it came, so the error names the client's
// own op.
func TestLocalIncrsCoalesced(t *testing.T) {
	f := newFakeNode(t, 1, 4, 1)
	shard := f.shardOfKey("k")
	keys := keysOfShard(f, shard, 2)
	k := keys[0]
	gate := make(chan struct{})
	f.proposeGate = gate
	withStateMachine(t, f)
	s := NewKV(f, testLimits)
	s.pmerge.senders = 1
	queued := func() int { return s.pmerge.waiting(shard) }

	first := sendBatch(s, nil, incrBy(k, 1))
	waitFor(t, func() bool { return queued() == 0 }) // blocked in its proposal
	a := sendBatch(s, nil, incrBy(k, 1), incrBy(k, 1))
	waitFor(t, func() bool { return queued() == 1 })
	b := sendBatch(s, nil, incrBy(k, 1))
	waitFor(t, func() bool { return queued() == 2 })
	c := sendBatch(s, nil, incrBy(k, 1), incrBy(k, 1), incrBy(k, 1), incrBy(keys[1], 5))
	waitFor(t, func() bool { return queued() == 3 })
	gate <- struct{}{}
	checkIncrs(t, "first", first, 1)
	gate <- struct{}{}
	checkIncrs(t, "a", a, 2, 3)
	checkIncrs(t, "b", b, 4)
	checkIncrs(t, "c", c, 5, 6, 7, 5)
	if got, want := proposedOps(f, 1), fmt.Sprintf("%s+1x6 %s+5x0", k, keys[1]); got != want {
		t.Fatalf("merged proposal %s, want %s (one INCR standing for six)", got, want)
	}
	if n := s.IncrsCoalesced(); n != 5 {
		t.Fatalf("IncrsCoalesced = %d, want 5", n)
	}

	// Overflow partway through a run: the INCRs before it apply, the rest
	// fail alone, each with its own answer.
	waitFor(t, func() bool { return queued() == -1 })
	first = sendBatch(s, nil, incrBy(keys[1], math.MaxInt64-9)) // keys[1] = MaxInt64-4
	waitFor(t, func() bool { return queued() == 0 })
	a = sendBatch(s, nil, incrBy(keys[1], 2), incrBy(keys[1], 2))
	waitFor(t, func() bool { return queued() == 1 })
	b = sendBatch(s, nil, incrBy(keys[1], 2))
	waitFor(t, func() bool { return queued() == 2 })
	gate <- struct{}{}
	checkIncrs(t, "first", first, math.MaxInt64-4)
	gate <- struct{}{}
	checkIncrs(t, "a", a, math.MaxInt64-2, math.MaxInt64)
	if r := <-b; r.err != nil || len(r.res) != 1 || r.res[0].GetError() != concordpb.OpError_OP_ERROR_OVERFLOW || r.res[0].GetOk() {
		t.Fatalf("the overflowing INCR: %v, %v", r.res, r.err)
	}
	if got, want := proposedOps(f, 3), fmt.Sprintf("%s+2x3", keys[1]); got != want {
		t.Fatalf("merged proposal %s, want %s", got, want)
	}

	// A cluster below version.IncrRepeat: nothing is coalesced.
	f.clusterVersion.Store(uint32(version.Base))
	waitFor(t, func() bool { return queued() == -1 })
	first = sendBatch(s, nil, incrBy(k, 1))
	waitFor(t, func() bool { return queued() == 0 })
	a = sendBatch(s, nil, incrBy(k, 1), incrBy(k, 1))
	waitFor(t, func() bool { return queued() == 1 })
	gate <- struct{}{}
	gate <- struct{}{}
	checkIncrs(t, "first", first, 8)
	checkIncrs(t, "a", a, 9, 10)
	if got, want := proposedOps(f, 5), fmt.Sprintf("%s+1x0 %s+1x0", k, k); got != want {
		t.Fatalf("merged proposal at version Base %s, want %s", got, want)
	}
	f.clusterVersion.Store(uint32(version.Binary))

	// Refused whole once coalesced (a TTL no clock can place): proposed
	// again as it came, so the error names the op the client sent.
	waitFor(t, func() bool { return queued() == -1 })
	bad := sendBatch(s, nil, incrBy(k, 1), incrBy(k, 1),
		&concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: []byte(keys[1]), Value: []byte("v"), TtlMs: math.MaxInt64})
	gate <- struct{}{} // coalesced: refused
	select {
	case gate <- struct{}{}: // alone, as it came: refused
	case r := <-bad:
		t.Fatalf("answered after the coalesced proposal alone: %v, %v", r.res, r.err)
	}
	if r := <-bad; status.Code(r.err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(r.err).Message(), "operation 2:") {
		t.Fatalf("refused batch: %v, %v; want InvalidArgument naming operation 2", r.res, r.err)
	}
	if got, want := proposedOps(f, 6)+" | "+proposedOps(f, 7), fmt.Sprintf("%s+1x2 %s+0x0 | %s+1x0 %s+1x0 %s+0x0", k, keys[1], k, k, keys[1]); got != want {
		t.Fatalf("proposals %s, want %s", got, want)
	}
	after := sendBatch(s, nil, incrBy(k, 1))
	gate <- struct{}{}
	checkIncrs(t, "after", after, 11) // the refused INCRs applied nothing
}

// TestForwardedIncrsCoalesced: INCRs a node forwards, merged there, go to
// the leader as one op once the forwarder's cluster version allows it (the
// leader, at that version, takes repeat from a node and answers with one
// result, which the forwarder expands); every caller gets its own value.
// A leader that has not learned the version refuses the coalesced batch
// whole and the parts go alone, each still answered right; a forwarder
// below the version sends the INCRs as they are and the leader coalesces.
func TestForwardedIncrsCoalesced(t *testing.T) {
	for _, tc := range []struct {
		name              string
		forwarder, leader version.Level
		want              string // the leader's first proposal
		fwdSaved          uint64 // the ops the forwarder's runs saved: 2 + 1, or none
	}{
		{"both at IncrRepeat", version.IncrRepeat, version.IncrRepeat, "+3x3", 3},
		{"leader behind", version.IncrRepeat, version.Base, "+3x0", 0},
		{"forwarder behind", version.Base, version.IncrRepeat, "+3x3", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f1, f2 := newFakeNode(t, 1, 4, 2), newFakeNode(t, 2, 4, 2)
			f1.clusterVersion.Store(uint32(tc.forwarder))
			f2.clusterVersion.Store(uint32(tc.leader))
			shard := f2.shardOfKey("k")
			k := keysOfShard(f2, shard, 1)[0]
			withStateMachine(t, f2)
			serve(t, f2, f1)
			s1 := NewKV(f1, testLimits)
			checkIncrs(t, "forwarded", sendBatch(s1, nil, incrBy(k, 3), incrBy(k, 3), incrBy(k, 3)), 3, 6, 9)
			checkIncrs(t, "again", sendBatch(s1, nil, incrBy(k, 3), incrBy(k, 3)), 12, 15)
			if got := proposedOps(f2, 0); !strings.HasPrefix(got, k+tc.want) {
				t.Fatalf("the leader first proposed %s, want %s%s first", got, k, tc.want)
			}
			if n := s1.IncrsCoalesced(); n != tc.fwdSaved {
				t.Fatalf("the forwarder's runs saved %d ops, want %d", n, tc.fwdSaved)
			}
		})
	}
}

// TestClientRepeatNeverReachesTheLog: repeat is the leader's to set, and
// only once the cluster's version allows it. A client's INCR with repeat
// 1 (meaning "once", harmless to a binary that knows the field) must not
// become a raft entry either: a replica of a binary below
// version.IncrRepeat does not know field 17 and stops on the entry
// (storepb.ErrUnknownFields), so in a rolling upgrade one request would
// stop every old replica of the shard. The front door refuses it at any
// cluster version, and nothing is proposed.
func TestClientRepeatNeverReachesTheLog(t *testing.T) {
	for _, v := range []version.Level{version.Unknown, version.Base, version.IncrRepeat} {
		f := newFakeNode(t, 1, 1, 1)
		f.echo = true
		f.clusterVersion.Store(uint32(v))
		s := NewKV(f, testLimits)
		for _, repeat := range []uint32{1, 2, kv.MaxRepeat} {
			a := <-sendBatch(s, nil, &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1, Repeat: repeat})
			if status.Code(a.err) != codes.InvalidArgument {
				t.Errorf("cluster version %d: an INCR with repeat %d from a client: %v, %v; want InvalidArgument", v, repeat, a.res, a.err)
			}
		}
		if n := f.proposalCount(); n != 0 {
			t.Errorf("cluster version %d: %d proposals of a client's repeat, want none (ops %s)", v, n, proposedOps(f, 0))
		}
		// From a node (hops 1: a forwarder's coalesced run), only once the
		// version allows it.
		a := <-sendBatch(s, &concordpb.RequestHeader{Hops: 1}, &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1, Repeat: 2})
		if allowed := v == version.IncrRepeat || v == version.Unknown; (a.err == nil) != allowed { // the fake reports Unknown as this binary's
			t.Errorf("cluster version %d: a forwarded INCR with repeat 2: %v; want it taken: %v", v, a.err, allowed)
		}
	}
}
