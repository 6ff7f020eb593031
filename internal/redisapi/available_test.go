package redisapi

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestConsistencyAvailable: CONCORD.CONSISTENCY takes available beside
// stale and linearizable, and refuses anything else, changing nothing.
func TestConsistencyAvailable(t *testing.T) {
	f := &fakeKV{}
	got, _ := runPipeline(t, f, "CONCORD.CONSISTENCY available", "CONCORD.CONSISTENCY junk", "GET k")
	want := "+OK\r\n-ERR CONCORD.CONSISTENCY takes stale, linearizable or available\r\n$1\r\nv\r\n"
	if got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	// The refused value left the connection available: GET read so.
	if want := []concordpb.Consistency{concordpb.Consistency_AVAILABLE}; !slices.Equal(f.consistencies, want) {
		t.Fatalf("the GET's batch carried %v, want %v", f.consistencies, want)
	}
}

// TestAvailableWrites: under available a plain SET and a DEL of one key
// reach the KV service as a Put and a Delete with AVAILABLE, each alone,
// even pipelined with writes of the same shard; a SET with an option, a
// DEL of several keys and every other write are ordinary batches,
// linearizable (a batch that writes with AVAILABLE is refused by the
// service); reads are read-only batches with AVAILABLE.
func TestAvailableWrites(t *testing.T) {
	f := &fakeKV{counters: map[string]int64{}}
	got, log := runPipeline(t, f, "CONCORD.CONSISTENCY available",
		"SET a1 v", "SET a2 v", "DEL a3", "UNLINK a4", "SET a5 v EX 100", "DEL a6 a7", "INCR a8", "GET a1", "MGET a9 b9")
	want := "+OK\r\n+OK\r\n+OK\r\n:1\r\n:1\r\n+OK\r\n:2\r\n:1\r\n$1\r\nv\r\n*2\r\n$1\r\nv\r\n$1\r\nv\r\n"
	if got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	for _, call := range []string{"put a1 AVAILABLE", "put a2 AVAILABLE", "delete a3 AVAILABLE", "delete a4 AVAILABLE"} {
		if !slices.Contains(log, call) {
			t.Errorf("no %q among the calls %q", call, log)
		}
	}
	batches := map[string]concordpb.Consistency{}
	for i, l := range slices.DeleteFunc(slices.Clone(log), func(s string) bool { return !strings.HasPrefix(s, "batch ") }) {
		for _, k := range strings.Split(strings.TrimPrefix(l, "batch "), ",") {
			batches[k] = f.consistencies[i]
		}
	}
	for _, k := range []string{"a1", "a2", "a3", "a4"} {
		if _, ok := batches[k]; ok && k != "a1" {
			t.Errorf("the available write of %s went in a batch: %q", k, log)
		}
	}
	for k, want := range map[string]concordpb.Consistency{
		"a5": concordpb.Consistency_LINEARIZABLE, "a6": concordpb.Consistency_LINEARIZABLE,
		"a7": concordpb.Consistency_LINEARIZABLE, "a8": concordpb.Consistency_LINEARIZABLE,
		"a1": concordpb.Consistency_AVAILABLE, "a9": concordpb.Consistency_AVAILABLE, "b9": concordpb.Consistency_AVAILABLE,
	} {
		if got, ok := batches[k]; !ok || got != want {
			t.Errorf("the batch of %s carried %v (sent: %v), want %v; calls %q", k, got, ok, want, log)
		}
	}
}

// TestAvailableTransaction: under available WATCH, MULTI/EXEC and
// CONCORD.SESSION run as under linearizable, their plain SETs included.
func TestAvailableTransaction(t *testing.T) {
	f := &fakeKV{}
	got, log := runPipeline(t, f, "CONCORD.CONSISTENCY available", "WATCH a1", "MULTI", "SET a1 v", "DEL a2", "EXEC",
		"CONCORD.SESSION 1 1 SET a3 v")
	want := "+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:1\r\n+OK\r\n"
	if got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if want := []string{"batch a1", "batch a1,a1,a2", "batch a3"}; !slices.Equal(log, want) {
		t.Fatalf("calls %q, want %q", log, want)
	}
	for i, c := range f.consistencies {
		if c != concordpb.Consistency_LINEARIZABLE {
			t.Errorf("%s carried %v, want LINEARIZABLE", log[i], c)
		}
	}
}

// TestAvailableTentative: a write the node held as tentative answers as
// a committed one (+OK; DEL counts its key, docs/redis.md), counts in
// CLIENT INFO (tentative=), and keeps the pipeline's arguments from
// reuse (its ordinary attempt may still hold them).
func TestAvailableTentative(t *testing.T) {
	f := &fakeKV{tentative: true}
	s := New(f, Config{})
	defer s.Close(time.Second)
	c := newConn(s, nil, 1)
	calls := []*call{{args: fields("CONCORD.CONSISTENCY available")}}
	c.run(calls)
	c.endPipeline() // CONCORD.CONSISTENCY ran alone, which holds its pipeline's arguments
	calls = []*call{{args: fields("SET k v")}, {args: fields("DEL k")}}
	c.run(calls)
	if got := string(calls[0].out.Bytes()) + string(calls[1].out.Bytes()); got != "+OK\r\n:1\r\n" {
		t.Fatalf("replies %q, want +OK and :1", got)
	}
	if !c.held.Load() {
		t.Error("a tentative write's arguments may be reused by the next pipeline")
	}
	if n := c.tentative.Load(); n != 2 {
		t.Errorf("tentative writes counted %d, want 2", n)
	}
}

// TestAvailableWriteFails: an available write the node neither committed
// nor held answers as any write that failed so.
func TestAvailableWriteFails(t *testing.T) {
	f := &fakeKV{fail: status.Error(codes.InvalidArgument, "too big")}
	got, _ := runPipeline(t, f, "CONCORD.CONSISTENCY available", "SET k v")
	if want := "+OK\r\n-ERR too big\r\n"; got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	f = &fakeKV{fail: status.Error(codes.Unknown, "ambiguous: lost")}
	got, _ = runPipeline(t, f, "CONCORD.CONSISTENCY available", "DEL k")
	if !strings.HasPrefix(got, "+OK\r\n-AMBIGUOUS ") {
		t.Fatalf("replies %q, want OK then AMBIGUOUS", got)
	}
}

// heldKV is fakeKV whose node holds n tentative writes.
type heldKV struct {
	*fakeKV
	n int64
}

func (k heldKV) Info() NodeInfo { return NodeInfo{TentativeHeld: k.n} }

// TestInfoTentativeHeld: INFO replication reports the node's count of
// tentative writes held.
func TestInfoTentativeHeld(t *testing.T) {
	s := New(heldKV{fakeKV: &fakeKV{}, n: 7}, Config{})
	defer s.Close(time.Second)
	got := pipelineOn(s, "INFO replication")
	if !strings.Contains(got, "concord_tentative_writes_held:7\r\n") {
		t.Fatalf("INFO replication %q lacks concord_tentative_writes_held:7", got)
	}
}

// fields is a command's arguments, split at spaces.
func fields(cmd string) [][]byte {
	var out [][]byte
	for _, a := range strings.Fields(cmd) {
		out = append(out, []byte(a))
	}
	return out
}
