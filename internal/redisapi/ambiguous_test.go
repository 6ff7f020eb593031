package redisapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// tooLargeReply is gRPC's own ResourceExhausted for a reply over the
// message limit: the request was served (a write applied) before it.
var tooLargeReply = status.Error(codes.ResourceExhausted, "grpc: received message larger than max (300 vs. 200)")

// TestChainNotRerunAfterGRPCResourceExhausted protects at-most-once for
// write chains: a ResourceExhausted that is not the KV service's refusal
// (gRPC's, for a reply too large, after the leader applied the batch)
// must not rerun the chain's commands one by one, which applies each a
// second time; every command is answered AMBIGUOUS. A read chain, which
// changes nothing, still reruns.
func TestChainNotRerunAfterGRPCResourceExhausted(t *testing.T) {
	f := &fakeKV{fail: tooLargeReply}
	got, log := runPipeline(t, f, "INCR k", "INCR k")
	if len(log) != 1 {
		t.Errorf("backend calls %q, want the chain's one batch: sent again, its INCRs would count twice", log)
	}
	for i, r := range strings.SplitAfter(got, "\r\n")[:2] {
		if !strings.HasPrefix(r, "-AMBIGUOUS") {
			t.Errorf("reply %d is %q, want AMBIGUOUS", i, r)
		}
	}
	f = &fakeKV{fail: tooLargeReply}
	_, log = runPipeline(t, f, "GET k1", "GET k2")
	if want := "batch k1,k2|batch k1|batch k2"; strings.Join(log, "|") != want {
		t.Errorf("read chain: backend calls %q, want %q", log, want)
	}
}

// TestWriteErrorsThatMayHaveApplied protects the RESP replies of failed
// writes: every error after which the write may have applied (an Internal
// one after applying, gRPC's ResourceExhausted, an Unavailable that says
// the request was sent) is AMBIGUOUS, for a command alone, a chain, EXEC
// and CONCORD.SESSION alike; a certain refusal keeps its ERR or
// UNAVAILABLE reply, and a read is never AMBIGUOUS.
func TestWriteErrorsThatMayHaveApplied(t *testing.T) {
	ambiguous := []error{
		status.Error(codes.Internal, "a merged write of 3 ops (3 proposed) applied with 2 results"),
		status.Error(codes.DataLoss, "lost"),
		status.Error(codes.Unknown, "ambiguous: leadership lost"),
		status.Error(codes.DeadlineExceeded, "deadline"),
		tooLargeReply,
		status.Error(codes.Unavailable, "forwarded to node 2, which did not answer within 5s (it may have received the request)"),
		status.Error(codes.Unavailable, "concord: the request stream to the node broke (Unavailable) after the request was sent"),
	}
	certain := map[error]string{
		status.Error(codes.InvalidArgument, "key is empty"):                                                    "-ERR key is empty",
		status.Error(codes.Unavailable, "shard 1: no leader known yet (election in progress?)"):                "-UNAVAILABLE shard 1: no leader known",
		status.Error(codes.ResourceExhausted, "session 1: 1024 results above the floor 3: the window is full"): "-ERR session 1",
	}
	writes := [][]string{
		{"SET k v"},
		{"INCR k", "INCR k"},
		{"MULTI", "SET k v", "EXEC"},
		{"CONCORD.SESSION 1 1 SET k v"},
	}
	last := func(cmds []string, err error) string {
		got, _ := runPipeline(t, &fakeKV{fail: err}, cmds...)
		r := strings.SplitAfter(got, "\r\n")
		return r[len(r)-2] // EXEC's error (its array's element), or the last command's
	}
	for _, err := range ambiguous {
		for _, cmds := range writes {
			if r := last(cmds, err); !strings.HasPrefix(r, "-AMBIGUOUS the write may or may not have applied") {
				t.Errorf("%q failing with %v: %q, want AMBIGUOUS", cmds, err, r)
			}
		}
		if r := last([]string{"GET k"}, err); strings.Contains(r, "AMBIGUOUS") || !strings.HasPrefix(r, "-") {
			t.Errorf("GET failing with %v: %q, want an error, not AMBIGUOUS", err, r)
		}
	}
	for err, want := range certain {
		for _, cmds := range writes {
			if r := last(cmds, err); !strings.HasPrefix(r, want) {
				t.Errorf("%q refused with %v: %q, want %q", cmds, err, r, want)
			}
		}
	}
}

// shortKV answers every batch with one result too few.
type shortKV struct{ *fakeKV }

func (k shortKV) Batch(ctx context.Context, r *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	resp, err := k.fakeKV.Batch(ctx, r)
	if err == nil {
		resp.Results = resp.Results[1:]
	}
	return resp, err
}

// TestWrongResultCountIsAmbiguousForWrites: a batch answered with the
// wrong number of results was applied: a write is AMBIGUOUS, a read an
// internal error.
func TestWrongResultCountIsAmbiguousForWrites(t *testing.T) {
	for _, c := range []struct {
		cmds []string
		want string
	}{
		{[]string{"SET k v"}, "-AMBIGUOUS"},
		{[]string{"MULTI", "SET k v", "EXEC"}, "-AMBIGUOUS"},
		{[]string{"CONCORD.SESSION 1 1 SET k v"}, "-AMBIGUOUS"},
		{[]string{"GET k"}, "-ERR internal error"},
	} {
		f := shortKV{&fakeKV{counters: map[string]int64{}}}
		s := New(f, Config{})
		got := pipelineOn(s, c.cmds...)
		s.Close(time.Second)
		r := strings.SplitAfter(got, "\r\n")
		if last := r[len(r)-2]; !strings.HasPrefix(last, c.want) {
			t.Errorf("%q answered with a result short: %q, want %s", c.cmds, last, c.want)
		}
	}
}
