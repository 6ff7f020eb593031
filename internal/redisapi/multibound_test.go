package redisapi

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/resp"
)

// sockClient is a raw client connection to a Server on a real socket.
type sockClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

// serveOnSocket serves s on 127.0.0.1 (an OS-assigned port) and connects
// to it.
func serveOnSocket(t *testing.T, s *Server) *sockClient {
	t.Helper()
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(time.Second) })
	nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &sockClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
}

func (c *sockClient) send(s string) {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(s)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *sockClient) reply() resp.Value {
	c.t.Helper()
	v, err := resp.ParseReply(c.br)
	if err != nil {
		c.t.Fatalf("reading a reply: %v", err)
	}
	return v
}

// TestMultiQueueBounded: MULTI queues at most what one EXEC batch may
// carry (maxBatchOps ops, 8 MiB of keys and values); the command past
// either bound is refused, the transaction is aborted and its queue
// dropped, so EXEC answers EXECABORT and nothing reaches the backend.
// Before, the queue grew without bound: one client could hold any amount
// of the node's memory between MULTI and EXEC.
func TestMultiQueueBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cmd   string
		n     int // the command that is refused (1-based)
		extra int // commands sent after it
	}{
		{"commands", "SET k v", maxQueued + 1, 10},
		{"bytes", "SET k " + strings.Repeat("x", 1<<20), maxQueuedBytes/(1<<20+len("k")) + 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeKV{counters: map[string]int64{}}
			c := serveOnSocket(t, New(f, Config{}))
			c.send(encode("MULTI"))
			if v := c.reply(); v.Str != "OK" {
				t.Fatalf("MULTI: %v", v)
			}
			var b strings.Builder
			for range tc.n + tc.extra {
				b.WriteString(encode(tc.cmd))
			}
			c.send(b.String())
			for i := 1; i <= tc.n+tc.extra; i++ {
				v := c.reply()
				switch {
				case i < tc.n && v.Str != "QUEUED":
					t.Fatalf("command %d: %v, want QUEUED", i, v)
				case i == tc.n && (v.Type != '-' || !strings.Contains(v.Str, "MULTI")):
					t.Fatalf("command %d (past the bound): %v, want an error naming MULTI", i, v)
				}
			}
			c.send(encode("EXEC"))
			if v := c.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, "EXECABORT") {
				t.Fatalf("EXEC: %v, want EXECABORT", v)
			}
			f.mu.Lock()
			log := f.log
			f.mu.Unlock()
			if len(log) != 0 {
				t.Fatalf("the backend saw %v", log)
			}
			// The connection goes on: a small transaction runs.
			c.send(encode("MULTI", "SET k v", "EXEC"))
			for i, want := range []string{"OK", "QUEUED"} {
				if v := c.reply(); v.Str != want {
					t.Fatalf("after the abort, reply %d: %v, want %s", i, v, want)
				}
			}
			if v := c.reply(); len(v.Elems) != 1 || v.Elems[0].Str != "OK" {
				t.Fatalf("after the abort, EXEC: %v, want [OK]", v)
			}
		})
	}
}

// TestMultiQueueCountsWatchedKeys: EXEC's batch carries a check of each
// watched key before the queued ops, so the queue's bounds leave room for
// them: with keys watched, the command that would take the checks and the
// ops past one batch's ops or bytes is refused as it is queued and EXEC
// answers EXECABORT, as for any queue past the bounds. Before, MULTI
// queued its 1,000 ops whatever was watched, and EXEC sent a batch of
// 1,001 ops that the node refused whole ("ERR batch has 1001 operations;
// the limit is 1000"): an error MULTI had not announced.
func TestMultiQueueCountsWatchedKeys(t *testing.T) {
	bigKey := func(i int) string { return fmt.Sprintf("w%039999d", i) } // 40,000 bytes
	var bigKeys []string
	for i := range 32 { // 1.28 MB watched: the eighth MiB of values no longer fits
		bigKeys = append(bigKeys, bigKey(i))
	}
	for _, tc := range []struct {
		name  string
		watch []string
		cmd   string
		n     int // the command that is refused (1-based)
	}{
		{"ops", []string{"w1", "w2"}, "SET k v", maxQueued - 1},
		{"bytes", bigKeys, "SET k " + strings.Repeat("x", 1<<20), 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeKV{counters: map[string]int64{}}
			c := serveOnSocket(t, New(f, Config{MaxKeyBytes: 64 << 10}))
			c.send(encodeArgs(append([]string{"WATCH"}, tc.watch...)) + encode("MULTI"))
			for _, want := range []string{"OK", "OK"} {
				if v := c.reply(); v.Str != want {
					t.Fatalf("WATCH, MULTI: %v, want %s", v, want)
				}
			}
			var b strings.Builder
			for range tc.n {
				b.WriteString(encode(tc.cmd))
			}
			c.send(b.String())
			for i := 1; i <= tc.n; i++ {
				v := c.reply()
				switch {
				case i < tc.n && v.Str != "QUEUED":
					t.Fatalf("command %d: %v, want QUEUED", i, v)
				case i == tc.n && (v.Type != '-' || !strings.Contains(v.Str, "ERR MULTI queues at most")):
					t.Fatalf("command %d (past the bound with the watched keys' checks): %v, want the MULTI bound's error", i, v)
				}
			}
			c.send(encode("EXEC"))
			if v := c.reply(); v.Type != '-' || !strings.HasPrefix(v.Str, "EXECABORT") {
				t.Fatalf("EXEC: %v, want EXECABORT", v)
			}
			f.mu.Lock()
			log := f.log
			f.mu.Unlock()
			if len(log) != 1 || !strings.HasPrefix(log[0], "batch w") { // the WATCH's read only
				t.Fatalf("the backend saw %.200q, want only the WATCH's read", log)
			}
		})
	}
}

// encodeArgs encodes one command of the given arguments (which may hold
// spaces).
func encodeArgs(args []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// TestMultiQueuedSizeErrors: a queued command whose key is empty or past
// --max-key-bytes, or whose value is past --max-value-bytes, is that
// command's argument error: EXEC answers it in its array and runs the
// others, as Redis answers a queued command's argument error, and the
// batch never carries it. Before, it was queued as it was and the node
// refused EXEC's whole batch: EXEC answered that one error and none of
// the transaction ran.
func TestMultiQueuedSizeErrors(t *testing.T) {
	f := &fakeKV{counters: map[string]int64{}}
	c := serveOnSocket(t, New(f, Config{MaxKeyBytes: 10, MaxValueBytes: 20}))
	cmds := [][]string{
		// The fake's shard of a key is its first byte: "a..." share one.
		{"MULTI"}, {"SET", "a", "1"}, {"SET", "ab", strings.Repeat("v", 21)}, {"SET", strings.Repeat("a", 11), "x"},
		{"SET", "", "x"}, {"MSET", "ac", "1", "ad", strings.Repeat("v", 21)}, {"INCRBYFLOAT", "ae", "1" + strings.Repeat("0", 20)},
		{"SET", "az", strings.Repeat("v", 20)}, {"EXEC"},
	}
	for _, cmd := range cmds {
		c.send(encodeArgs(cmd))
	}
	for i, cmd := range cmds[:len(cmds)-1] {
		if v := c.reply(); (i == 0 && v.Str != "OK") || (i > 0 && v.Str != "QUEUED") {
			t.Fatalf("%.20q: %v", cmd, v)
		}
	}
	v := c.reply()
	want := []string{
		"OK", "ERR value is 21 bytes; the limit is 20 (--max-value-bytes)", "ERR key is 11 bytes; the limit is 10 (--max-key-bytes)",
		"ERR key is empty", "ERR value is 21 bytes; the limit is 20 (--max-value-bytes)",
		"ERR value is 21 bytes; the limit is 20 (--max-value-bytes)", "OK",
	}
	if len(v.Elems) != len(want) {
		t.Fatalf("EXEC: %v, want an array of %d", v, len(want))
	}
	for i, e := range v.Elems {
		if e.Str != want[i] || (e.Type == '-') != strings.HasPrefix(want[i], "ERR") {
			t.Errorf("EXEC's answer %d: %c%q, want %q", i, e.Type, e.Str, want[i])
		}
	}
	f.mu.Lock()
	log := f.log
	f.mu.Unlock()
	if len(log) != 1 || log[0] != "batch a,az" {
		t.Fatalf("the backend saw %q, want one batch of a and az", log)
	}
}
