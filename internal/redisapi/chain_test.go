package redisapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/version"
)

// fakeKV records the calls the server makes: each Batch's keys and each
// Get's key, in order. A GET finds "v". Its shard of a key is the key's first byte; INCR
// counts per key; SET always succeeds. refuseMulti answers a batch of
// several ops InvalidArgument, fail answers every batch with that error.
type fakeKV struct {
	mu          sync.Mutex
	log         []string
	counters    map[string]int64
	refuseMulti bool
	fail        error
	failKey     string // a batch holding this key fails Unavailable
	// noSpace, when set, is the space alarm's refusal: NoSpace returns it
	// and a batch that adds data fails with it, as grpcapi.KV does.
	noSpace error
	// diskLowErr, when set, is DiskLow's refusal.
	diskLowErr error
	// tentative: Put and Delete answer as held tentative writes.
	tentative bool
	// consistencies records each Batch's header consistency, in order.
	consistencies []concordpb.Consistency
}

func (f *fakeKV) NoSpace() error { return f.noSpace }

func (f *fakeKV) Get(_ context.Context, r *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "get "+string(r.GetKey()))
	return &concordpb.GetResponse{Found: true, Value: []byte("v")}, nil
}

func (f *fakeKV) Batch(_ context.Context, r *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for _, op := range r.GetOps() {
		keys = append(keys, string(op.GetKey()))
	}
	f.log = append(f.log, "batch "+strings.Join(keys, ","))
	f.consistencies = append(f.consistencies, r.GetHeader().GetConsistency())
	if f.fail != nil {
		return nil, f.fail
	}
	if f.failKey != "" && slices.Contains(keys, f.failKey) {
		return nil, status.Error(codes.Unavailable, "shard down")
	}
	if f.noSpace != nil && kv.AddsData(r.GetOps()) {
		return nil, f.noSpace
	}
	if f.refuseMulti && len(r.GetOps()) > 1 {
		return nil, status.Error(codes.InvalidArgument, "refused")
	}
	out := &concordpb.BatchResponse{}
	for _, op := range r.GetOps() {
		res := &concordpb.OpResult{Ok: true}
		if op.GetType() == concordpb.OpType_OP_GET {
			res.Value = []byte("v")
		}
		if op.GetType() == concordpb.OpType_OP_INCR {
			f.counters[string(op.GetKey())] += op.GetIntDelta()
			res.IntValue = f.counters[string(op.GetKey())]
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

// Put and Delete record a Put's or a Delete's key and consistency
// ("put k AVAILABLE"); tentative answers them as held tentative writes
// (a tentative Delete, as the KV service's, says the key did not exist).
func (f *fakeKV) Put(_ context.Context, r *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "put "+string(r.GetKey())+" "+r.GetHeader().GetConsistency().String())
	if f.fail != nil {
		return nil, f.fail
	}
	return &concordpb.PutResponse{Header: &concordpb.ResponseHeader{Tentative: f.tentative}}, nil
}

func (f *fakeKV) Delete(_ context.Context, r *concordpb.DeleteRequest) (*concordpb.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "delete "+string(r.GetKey())+" "+r.GetHeader().GetConsistency().String())
	if f.fail != nil {
		return nil, f.fail
	}
	return &concordpb.DeleteResponse{Header: &concordpb.ResponseHeader{Tentative: f.tentative}, Existed: !f.tentative}, nil
}

func (f *fakeKV) Scan(context.Context, *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	return &concordpb.ScanResponse{}, nil
}
func (f *fakeKV) ShardOf(key []byte) (uint64, bool) {
	if len(key) == 0 {
		return 0, true
	}
	return uint64(key[0]), true
}
func (f *fakeKV) Info() NodeInfo                  { return NodeInfo{} }
func (f *fakeKV) Members() []string               { return nil }
func (f *fakeKV) ClusterVersion() version.Level   { return version.Binary }
func (f *fakeKV) Die(bool)                        {}
func (f *fakeKV) Partition([]string) []ids.NodeID { return nil }
func (f *fakeKV) Heal()                           {}

// DiskLow records the fault's calls; diskLowErr, when set, refuses them
// (the guard off).
func (f *fakeKV) DiskLow(low bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.diskLowErr != nil {
		return f.diskLowErr
	}
	f.log = append(f.log, fmt.Sprintf("disk-low %v", low))
	return nil
}

// runPipeline runs the commands as one pipeline on a fresh connection and
// returns the replies, in order, as one string, and the backend's log.
func runPipeline(t *testing.T, f *fakeKV, cmds ...string) (string, []string) {
	t.Helper()
	if f.counters == nil {
		f.counters = map[string]int64{}
	}
	s := New(f, Config{})
	defer s.Close(time.Second)
	return pipelineOn(s, cmds...), f.log
}

// pipelineOn runs the commands as one pipeline on a fresh connection of s
// and returns the replies, in order, as one string.
func pipelineOn(s *Server, cmds ...string) string {
	c := newConn(s, nil, 1)
	var calls []*call
	for _, cmd := range cmds {
		var args [][]byte
		for _, a := range strings.Fields(cmd) {
			args = append(args, []byte(a))
		}
		calls = append(calls, &call{args: args})
	}
	c.run(calls)
	var b strings.Builder
	for _, cl := range calls {
		b.Write(cl.out.Bytes())
	}
	return b.String()
}

func TestChainSameKeyWritesOneBatch(t *testing.T) {
	f := &fakeKV{}
	got, log := runPipeline(t, f, "INCR k", "INCR k", "SET k2 x", "INCR k", "GET k", "INCR k")
	if want := ":1\r\n:2\r\n+OK\r\n:3\r\n$1\r\nv\r\n:4\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	// The first four writes (shard 'k') are one batch in pipeline order;
	// the GET of k waits for them, and the INCR after it for the GET.
	if want := []string{"batch k,k,k2,k", "batch k", "batch k"}; strings.Join(log, "|") != strings.Join(want, "|") {
		t.Errorf("backend calls %q, want %q", log, want)
	}
}

func TestChainStopsAtShardAndConflicts(t *testing.T) {
	f := &fakeKV{}
	// a1 and b1 are different shards: two batches. GET a2 then SET a2: the
	// write may not run with the read, so it starts a new group.
	_, log := runPipeline(t, f, "SET a1 x", "SET b1 x", "GET a2", "SET a2 y", "SET a3 z")
	if len(log) != 4 || log[3] != "batch a2,a3" {
		t.Fatalf("backend calls %q, want three calls then one batch a2,a3", log)
	}
	first := slices.Sorted(slices.Values(log[:3])) // these three run concurrently
	if want := []string{"batch a1", "batch a2", "batch b1"}; !slices.Equal(first, want) {
		t.Errorf("first three calls %q, want %q in any order", first, want)
	}
}

func TestChainRefusedRunsEachAlone(t *testing.T) {
	f := &fakeKV{refuseMulti: true}
	got, log := runPipeline(t, f, "INCR k", "INCR k", "INCR k")
	if want := ":1\r\n:2\r\n:3\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if want := "batch k,k,k|batch k|batch k|batch k"; strings.Join(log, "|") != want {
		t.Errorf("backend calls %q, want %q", log, want)
	}
}

func TestChainFailureAnswersEveryCommand(t *testing.T) {
	f := &fakeKV{fail: status.Error(codes.Unavailable, "no leader known")}
	got, log := runPipeline(t, f, "SET k 1", "INCR k")
	if want := "-UNAVAILABLE no leader known\r\n-UNAVAILABLE no leader known\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if len(log) != 1 {
		t.Errorf("backend calls %q, want one batch", log)
	}
}

func TestChainBounded(t *testing.T) {
	f := &fakeKV{}
	var cmds []string
	for range maxChainCalls + 1 {
		cmds = append(cmds, "INCR k")
	}
	_, log := runPipeline(t, f, cmds...)
	if len(log) != 2 || strings.Count(log[0], ",") != maxChainCalls-1 || log[1] != "batch k" {
		t.Errorf("%d INCRs: backend calls %d, first of %d ops", len(cmds), len(log), strings.Count(log[0], ",")+1)
	}
}

// TestChainBoundedByTheResultBudget: a write chain's commands that
// return stored values count a value of --max-value-bytes each against a
// batch's result budget (kv.MaxResultBytes, 63 MiB): with 8 MiB values,
// seven GETDELs make a chain, the rest the next one, so that no GETDEL
// fails at apply for having been chained. Writes that return no value
// (INCR) still chain up to maxChainCalls.
func TestChainBoundedByTheResultBudget(t *testing.T) {
	f := &fakeKV{counters: map[string]int64{}}
	s := New(f, Config{MaxValueBytes: 8 << 20})
	defer s.Close(time.Second)
	var cmds []string
	for range 10 {
		cmds = append(cmds, "GETDEL k")
	}
	cmds = append(cmds, "INCR k")
	pipelineOn(s, cmds...)
	var sizes []int
	for _, l := range f.log {
		sizes = append(sizes, strings.Count(l, ",")+1)
	}
	if fmt.Sprint(sizes) != "[7 4]" {
		t.Fatalf("batches of %v ops (%q), want [7 4]: seven GETDELs, then three and the INCR", sizes, f.log)
	}
}

// TestReadChainOneBatchPerShard protects read chains: a pipeline's GETs
// (and MGET, EXISTS) of one shard go as one batch, wherever they stand
// among writes of other keys, each answered in request order; another
// shard's reads are a batch of their own; a read of a key written earlier
// in the pipeline waits for that write.
func TestReadChainOneBatchPerShard(t *testing.T) {
	f := &fakeKV{}
	got, log := runPipeline(t, f, "GET a1", "SET b1 x", "GET a2", "MGET a3 a1", "GET b2", "EXISTS a4", "GET a1", "GET b1", "GET a5")
	if want := "$1\r\nv\r\n+OK\r\n$1\r\nv\r\n*2\r\n$1\r\nv\r\n$1\r\nv\r\n$1\r\nv\r\n:1\r\n$1\r\nv\r\n$1\r\nv\r\n$1\r\nv\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if len(log) != 5 {
		t.Fatalf("backend calls %q, want 3 concurrent ones then GET b1 and GET a5 after SET b1", log)
	}
	first := slices.Sorted(slices.Values(log[:3]))
	if want := []string{"batch a1,a2,a3,a1,a4,a1", "batch b1", "batch b2"}; !slices.Equal(first, want) {
		t.Errorf("first three calls %q, want %q in any order", first, want)
	}
	if rest := slices.Sorted(slices.Values(log[3:])); !slices.Equal(rest, []string{"batch a5", "batch b1"}) {
		t.Errorf("calls after the conflict %q, want batch a5 and batch b1", rest)
	}
}

// TestReadChainErrors protects the replies of a read chain that fails: a
// refused batch (one bad key) reruns each command alone; a failure is
// UNAVAILABLE for every command (a read never AMBIGUOUS).
func TestReadChainErrors(t *testing.T) {
	f := &fakeKV{refuseMulti: true}
	got, log := runPipeline(t, f, "GET k1", "GET k2")
	if want := "$1\r\nv\r\n$1\r\nv\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if want := "batch k1,k2|batch k1|batch k2"; strings.Join(log, "|") != want {
		t.Errorf("backend calls %q, want %q", log, want)
	}
	f = &fakeKV{fail: status.Error(codes.DeadlineExceeded, "slow")}
	got, _ = runPipeline(t, f, "GET k1", "EXISTS k2")
	if want := "-UNAVAILABLE slow\r\n-UNAVAILABLE slow\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
}

// TestLongMGETIsCutIntoBatches protects the KV service's batch limits: an
// MGET of more keys of one shard than a batch may carry goes as several.
func TestLongMGETIsCutIntoBatches(t *testing.T) {
	f := &fakeKV{}
	cmd := "MGET"
	for range maxChainOps + 1 {
		cmd += " k"
	}
	got, log := runPipeline(t, f, cmd)
	if len(log) != 2 || strings.Count(got, "$1\r\nv\r\n") != maxChainOps+1 {
		t.Errorf("MGET of %d keys: backend calls %d, %d values answered", maxChainOps+1, len(log), strings.Count(got, "$1\r\nv\r\n"))
	}
}

// TestChainGathersAShardsWrites: a group's writes of one shard are one
// batch even when writes of other shards come between them (random keys),
// in pipeline order, each answered from its own results.
func TestChainGathersAShardsWrites(t *testing.T) {
	f := &fakeKV{}
	got, log := runPipeline(t, f, "INCR a1", "SET b1 x", "INCR a2", "SET b2 y", "INCR a1")
	if want := ":1\r\n+OK\r\n:1\r\n+OK\r\n:2\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	if got, want := slices.Sorted(slices.Values(log)), []string{"batch a1,a2,a1", "batch b1,b2"}; !slices.Equal(got, want) {
		t.Errorf("backend calls %q, want %q in any order", log, want)
	}
}

// TestChainFullKeepsKeyOrder: when a shard's chain is full, the next write
// of the shard heads a new chain, and a later write of a key the full
// chain holds does not join the new chain (which runs concurrently with
// the full one): it waits for the next group.
func TestChainFullKeepsKeyOrder(t *testing.T) {
	f := &fakeKV{}
	var cmds []string
	var want strings.Builder
	for i := range maxChainCalls {
		cmds = append(cmds, "INCR a1")
		fmt.Fprintf(&want, ":%d\r\n", i+1)
	}
	cmds = append(cmds, "INCR a2", "INCR a1")
	fmt.Fprintf(&want, ":1\r\n:%d\r\n", maxChainCalls+1)
	got, log := runPipeline(t, f, cmds...)
	if got != want.String() {
		t.Errorf("replies %q, want %q", got, want.String())
	}
	if len(log) != 3 || strings.Count(log[0]+log[1], ",") != maxChainCalls-1 || log[2] != "batch a1" {
		t.Errorf("backend calls %q, want the full chain and a2 (any order), then a1 alone", log)
	}
}

// TestSplitWritesJoinShardChains protects the splitting of writes over
// several shards (splitWrite): an MSET or DEL over keys of several shards
// goes as one part per shard, each in its shard's write chain with the
// pipeline's other writes of that shard (one batch per shard, not one per
// command and shard), keys in pipeline order; each command gets one reply,
// in order, from all its parts; a command within one shard is not split.
func TestSplitWritesJoinShardChains(t *testing.T) {
	f := &fakeKV{}
	got, log := runPipeline(t, f, "MSET a1 x b1 y a2 z", "SET a3 w", "SET b2 v", "DEL a1 b1 c1", "MSET c2 x c3 y")
	if want := "+OK\r\n+OK\r\n+OK\r\n:3\r\n+OK\r\n"; got != want {
		t.Errorf("replies %q, want %q", got, want)
	}
	log = slices.Sorted(slices.Values(log)) // the shards' batches run concurrently
	if want := []string{"batch a1,a2,a3,a1", "batch b1,b2,b1", "batch c1,c2,c3"}; strings.Join(log, "|") != strings.Join(want, "|") {
		t.Errorf("backend calls %q, want %q", log, want)
	}
}

// TestSplitWriteFailsWhole: a split command whose part fails answers that
// error, once, in its place; the pipeline's other commands are unharmed.
func TestSplitWriteFailsWhole(t *testing.T) {
	f := &fakeKV{failKey: "b1"}
	got, _ := runPipeline(t, f, "SET a0 x", "MSET a1 x b1 y c1 z", "SET c2 w")
	replies := strings.SplitAfter(got, "\r\n")
	if len(replies) != 4 || replies[0] != "+OK\r\n" || !strings.HasPrefix(replies[1], "-") || replies[2] != "+OK\r\n" {
		t.Errorf("replies %q, want +OK, an error, +OK", got)
	}
}
