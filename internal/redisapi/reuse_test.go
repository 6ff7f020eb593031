package redisapi

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
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
