package redisapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// scriptConn is a client that sends each of its pipelines once the
// replies to the one before have been written, and records the replies
// of each.
type scriptConn struct {
	net.Conn
	pipes   []string
	next    int
	replies []strings.Builder
}

func (s *scriptConn) Read(b []byte) (int, error) {
	if s.next == len(s.pipes) {
		return 0, io.EOF
	}
	s.next++
	s.replies = append(s.replies, strings.Builder{})
	return copy(b, s.pipes[s.next-1]), nil
}

func (s *scriptConn) Write(b []byte) (int, error) {
	s.replies[s.next-1].Write(b)
	return len(b), nil
}

func (s *scriptConn) SetWriteDeadline(time.Time) error { return nil }
func (s *scriptConn) Close() error                     { return nil }

func encode(cmds ...string) string {
	var b strings.Builder
	for _, c := range cmds {
		f := strings.Fields(c)
		fmt.Fprintf(&b, "*%d\r\n", len(f))
		for _, a := range f {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	return b.String()
}

// TestPipelinesReuseConnMemory: one connection's successive pipelines
// reuse its call blocks, its pending group's maps, its chain slots and
// its command cache; every reply still comes in order with the right
// value, and each pipeline's writes to a shard still go as one batch in
// order. A chain longer than its 16 first slots, a pipeline longer than
// the reused blocks, names in changing case and an unknown name after a
// cached one are covered.
func TestPipelinesReuseConnMemory(t *testing.T) {
	f := &fakeKV{counters: map[string]int64{}}
	s := New(f, Config{})
	defer s.Close(time.Second)
	long := make([]string, 0, 90)
	for range 70 { // 64 per chain at most: a second chain in the same group
		long = append(long, "INCR k")
	}
	long = append(long, "GET k", "incr k")
	sc := &scriptConn{pipes: []string{
		encode(long...),
		encode("INCR k", "SET a x", "set a y", "GET a", "Incr k", "NOSUCH a"),
		encode("INCR k", "INCR b1", "INCR kk", "INCR b1", "INCR k"), // two shards' chains, interleaved
		encode("PING", "incr a2", "INCR k"),
	}}
	c := newConn(s, sc, 1)
	c.serve()
	var want []string
	var b strings.Builder
	for i := 1; i <= 70; i++ {
		fmt.Fprintf(&b, ":%d\r\n", i)
	}
	want = append(want, b.String()+"$1\r\nv\r\n:71\r\n")
	want = append(want, ":72\r\n+OK\r\n+OK\r\n$1\r\nv\r\n:73\r\n-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n")
	want = append(want, ":74\r\n:1\r\n:1\r\n:2\r\n:75\r\n")
	want = append(want, "+PONG\r\n:1\r\n:76\r\n")
	if len(sc.replies) != len(want) {
		t.Fatalf("%d pipelines answered, want %d", len(sc.replies), len(want))
	}
	for i := range want {
		if got := sc.replies[i].String(); got != want[i] {
			t.Errorf("pipeline %d: replies %q, want %q", i, got, want[i])
		}
	}
	// The first pipeline's 70 INCRs: a chain of 64, then one of 6 (a full
	// chain's key waits for the next group), the GET, then the last INCR.
	// The second's writes of shard 'a' and 'k' chain by shard; the GET of a
	// waits for them.
	var batches []int
	for _, l := range f.log {
		batches = append(batches, strings.Count(l, ",")+1)
	}
	if got, want := fmt.Sprint(batches[:4]), "[64 6 1 1]"; got != want {
		t.Errorf("first pipeline's batch sizes %s, want %s (log %q)", got, want, f.log[:4])
	}
	if got := strings.Join(f.log, "|"); !strings.Contains(got, "batch k,kk,k") || !strings.Contains(got, "batch b1,b1") {
		t.Errorf("third pipeline's chains not in the backend's log %q", got)
	}
}

// TestObserveEveryCommandOnce: each answered command is reported once,
// a success through its command's ObserveOK observer (asked once per
// command), anything else through Observe with its error code; a split
// MSET once, as one command.
func TestObserveEveryCommandOnce(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	asked := map[string]int{}
	cfg := Config{
		Observe: func(cmd, code string, _ time.Duration) {
			mu.Lock()
			got[cmd+" "+code]++
			mu.Unlock()
		},
		ObserveOK: func(cmd string) func(time.Duration) {
			mu.Lock()
			asked[cmd]++
			mu.Unlock()
			return func(time.Duration) {
				mu.Lock()
				got[cmd+" OK"]++
				mu.Unlock()
			}
		},
	}
	s := New(&fakeKV{counters: map[string]int64{}}, cfg)
	defer s.Close(time.Second)
	sc := &scriptConn{pipes: []string{
		encode("SET k 1", "SET k 2", "SET k 3", "INCR x", "GET k", "NOSUCH", "MSET a 1 b 2"),
		encode("SET k 4", "INCR x", "GET"),
	}}
	newConn(s, sc, 1).serve()
	want := map[string]int{"set OK": 4, "incr OK": 2, "get OK": 1, "unknown ERR": 1, "mset OK": 1, "get ERR": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("observed %v, want %v", got, want)
	}
	for cmd, n := range asked {
		if n != 1 {
			t.Errorf("ObserveOK asked %d times for %s, want once", n, cmd)
		}
	}
}

// ctxKV answers every batch at once, and records each batch's context,
// when it arrived, and when the pipeline it belongs to was read.
type ctxKV struct {
	answerKV
	sc    *slowScript
	mu    sync.Mutex
	ctxs  []context.Context
	times []time.Time // arrival
	reads []time.Time // its pipeline's read
}

func (k *ctxKV) Batch(ctx context.Context, r *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	now := time.Now()
	k.mu.Lock()
	k.ctxs, k.times = append(k.ctxs, ctx), append(k.times, now)
	k.reads = append(k.reads, k.sc.reads[len(k.sc.reads)-1]) // the connection reads no further until this group ends
	k.mu.Unlock()
	return k.answerKV.Batch(ctx, r)
}

// TestGroupContextBoundsEachGroup: every group of key commands runs under
// a deadline at least CommandTimeout less its hundredth after its pipeline
// was read, and at most CommandTimeout after the group's batch left,
// however the connection reuses contexts; and no context outlives the
// connection.
func TestGroupContextBoundsEachGroup(t *testing.T) {
	const timeout = time.Second
	sc := &slowScript{pause: time.Millisecond}
	k := &ctxKV{sc: sc}
	s := New(k, Config{CommandTimeout: timeout})
	defer s.Close(time.Second)
	for range 50 {
		sc.pipes = append(sc.pipes, encode("SET a 1", "SET b 2")) // two shards: two batches at once
	}
	newConn(s, sc, 1).serve()
	if len(k.ctxs) != 100 {
		t.Fatalf("%d batches, want 100", len(k.ctxs))
	}
	distinct := map[context.Context]bool{}
	for i, ctx := range k.ctxs {
		distinct[ctx] = true
		dl, ok := ctx.Deadline()
		if !ok || dl.Sub(k.times[i]) > timeout || dl.Sub(k.reads[i]) < timeout-timeout/100 {
			t.Errorf("batch %d: deadline %v after its batch left, %v after its pipeline was read (ok %v); want at most %v, at least %v",
				i, dl.Sub(k.times[i]), dl.Sub(k.reads[i]), ok, timeout, timeout-timeout/100)
		}
		if ctx.Err() == nil {
			t.Errorf("batch %d: context still live after the connection ended", i)
		}
	}
	if len(distinct) < 2 { // 50 pipelines at least 1 ms apart span more than one 10 ms window
		t.Errorf("%d distinct contexts, want a new one after the reuse window", len(distinct))
	}
}

// slowScript is a scriptConn that waits pause before each pipeline and
// records when it was read.
type slowScript struct {
	scriptConn
	pause time.Duration
	reads []time.Time
}

func (s *slowScript) Read(b []byte) (int, error) {
	time.Sleep(s.pause) // lets time pass between pipelines; nothing waits on it
	s.reads = append(s.reads, time.Now())
	return s.scriptConn.Read(b)
}
