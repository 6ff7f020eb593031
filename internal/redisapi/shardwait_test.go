package redisapi

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// startingKV is a node that does not know its shards for its first
// `unknown` lookups (it is bootstrapping); waiting, if set, is closed at
// the first lookup that answers unknown.
type startingKV struct {
	*fakeKV
	unknown atomic.Int64
	waiting chan struct{}
	once    atomic.Bool
}

func newStartingKV(unknown int64) *startingKV {
	s := &startingKV{fakeKV: &fakeKV{counters: map[string]int64{}}, waiting: make(chan struct{})}
	s.unknown.Store(unknown)
	return s
}

func (s *startingKV) ShardOf(key []byte) (uint64, bool) {
	if s.unknown.Add(-1) >= 0 {
		if s.once.CompareAndSwap(false, true) {
			close(s.waiting)
		}
		return 0, false
	}
	return s.fakeKV.ShardOf(key)
}

// TestCommandsWaitForTheShardTable protects Redis clients (which do not
// retry) from a node that is still starting: a command that needs the
// shard table waits until the node knows it, instead of answering
// UNAVAILABLE at once: a read, a write, MULTI/EXEC and SCAN.
func TestCommandsWaitForTheShardTable(t *testing.T) {
	for _, tc := range []struct {
		cmds []string
		want string
	}{
		{[]string{"GET k"}, "$1\r\nv\r\n"},
		{[]string{"SET k v"}, "+OK\r\n"},
		{[]string{"MSET ka 1 kb 2"}, "+OK\r\n"},
		{[]string{"MULTI", "INCR k", "EXEC"}, "+OK\r\n+QUEUED\r\n*1\r\n:1\r\n"},
		{[]string{"SCAN 0"}, "*2\r\n$1\r\n0\r\n*0\r\n"},
	} {
		s := New(newStartingKV(3), Config{})
		got := pipelineOn(s, tc.cmds...)
		s.Close(time.Second)
		if got != tc.want {
			t.Errorf("%q on a starting node answered %q, want %q", tc.cmds, got, tc.want)
		}
	}
}

// TestShardWaitIsBounded protects clients from a node that never learns
// its shards (its peers are down): after ShardWait the command answers
// UNAVAILABLE.
func TestShardWaitIsBounded(t *testing.T) {
	s := New(newStartingKV(1<<62), Config{ShardWait: 20 * time.Millisecond})
	defer s.Close(time.Second)
	if got := pipelineOn(s, "GET k"); !strings.HasPrefix(got, "-UNAVAILABLE this node does not know the shards yet") {
		t.Fatalf("GET on a node that never knows its shards answered %q, want UNAVAILABLE", got)
	}
}

// TestCloseEndsShardWait protects node shutdown: Close ends a command
// waiting for the shard table at once, whatever ShardWait allows.
func TestCloseEndsShardWait(t *testing.T) {
	b := newStartingKV(1 << 62)
	s := New(b, Config{ShardWait: time.Hour, CommandTimeout: time.Hour})
	got := make(chan string, 1)
	go func() { got <- pipelineOn(s, "GET k") }()
	<-b.waiting
	s.Close(time.Second)
	select {
	case r := <-got:
		if !strings.HasPrefix(r, "-UNAVAILABLE") {
			t.Fatalf("GET cut short by Close answered %q, want UNAVAILABLE", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a command waiting for the shard table outlived the server's Close")
	}
}
