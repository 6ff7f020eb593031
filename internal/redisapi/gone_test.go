package redisapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// endlessKV is a keyspace of pages without end: its first Scan waits for
// release, and it counts its Scans.
type endlessKV struct {
	*fakeKV
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	scans   int
	page    *concordpb.ScanResponse
}

func newEndlessKV() *endlessKV {
	page := &concordpb.ScanResponse{More: true, NextStart: []byte("next")}
	for i := range 1000 {
		page.Kvs = append(page.Kvs, &concordpb.KeyValue{Key: fmt.Appendf(nil, "k%04d", i)})
	}
	return &endlessKV{fakeKV: &fakeKV{counters: map[string]int64{}}, release: make(chan struct{}), page: page}
}

func (e *endlessKV) Scan(ctx context.Context, _ *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	e.mu.Lock()
	e.scans++
	first := e.scans == 1
	e.mu.Unlock()
	if first {
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.page, nil
}

func (e *endlessKV) scanned() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.scans
}

// pollUntil waits (at most 10 s) until cond holds.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestKeysStopsWhenClientLeaves (found by review): KEYS walked the whole
// keyspace (up to keysScanCap keys, a scan per thousand) for a client
// that had already closed its connection, and no one read the answer. The
// walk now looks, between pages, whether the client is still there.
func TestKeysStopsWhenClientLeaves(t *testing.T) {
	kv := newEndlessKV()
	s := New(kv, Config{})
	c := serveOnSocket(t, s)
	c.send(encode("KEYS x*"))
	pollUntil(t, "KEYS's first scan", func() bool { return kv.scanned() == 1 })
	c.nc.Close()
	close(kv.release)
	pollUntil(t, "the connection to end", func() bool { return s.Clients() == 0 })
	if n := kv.scanned(); n > 2 {
		t.Fatalf("KEYS scanned %d pages for a client that had left, want it to stop at the next page", n)
	}
}

// TestKeysRunsForPresentClient: the look for a departed client does not
// cut a command short while its client waits: KEYS walks every page and
// answers (here: past keysScanCap, its error).
func TestKeysRunsForPresentClient(t *testing.T) {
	kv := newEndlessKV()
	close(kv.release)
	c := serveOnSocket(t, New(kv, Config{}))
	c.send(encode("KEYS nomatch"))
	if v := c.reply(); !strings.Contains(v.Str, "more than") {
		t.Fatalf("KEYS over an endless keyspace: %v, want the walk's cap error", v)
	}
	if n := kv.scanned(); n <= keysScanCap/1000 {
		t.Fatalf("KEYS scanned %d pages, want the whole walk", n)
	}
}

// TestMatchStopsWhenClientGone: a costly pattern's matching (up to
// maxMatchSteps, a quarter of a second) asks every goneCheckSteps steps
// whether the client is still there, and ends with errClientGone once it
// is not, instead of spending the rest of the budget.
func TestMatchStopsWhenClientGone(t *testing.T) {
	asked := 0
	g, err := newGlobber([]byte("*b"), func() bool { asked++; return true })
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(strings.Repeat("a", 4096))
	for i := 0; ; i++ {
		if _, err = g.match(key); err != nil {
			break
		}
		if i > maxMatchSteps {
			t.Fatal("matching never ended")
		}
	}
	if !errors.Is(err, errClientGone) || asked != 1 {
		t.Fatalf("matching ended with %v after %d looks, want errClientGone at the first", err, asked)
	}
	if spent := maxMatchSteps - g.left; spent > 2*goneCheckSteps {
		t.Fatalf("%d steps spent for a departed client, want about %d", spent, goneCheckSteps)
	}
}

// TestMaxClientsRefused: past MaxClients a new connection is answered
// Redis's "ERR max number of clients reached" and closed; once a client
// leaves, a new one is served.
func TestMaxClientsRefused(t *testing.T) {
	s := New(&fakeKV{counters: map[string]int64{}}, Config{MaxClients: 2})
	first := serveOnSocket(t, s)
	ping := func(nc net.Conn) string {
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = nc.Write([]byte(encode("PING")))
		line, _ := bufio.NewReader(nc).ReadString('\n')
		return line
	}
	dial := func() net.Conn {
		nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	if got := ping(first.nc); got != "+PONG\r\n" {
		t.Fatalf("first client: %q", got)
	}
	if got := ping(dial()); got != "+PONG\r\n" {
		t.Fatalf("second client: %q", got)
	}
	over := dial()
	if got := ping(over); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("a client past maxclients: %q", got)
	}
	if _, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused client's connection stayed open")
	}
	first.nc.Close()
	pollUntil(t, "the first client gone", func() bool { return s.Clients() == 1 })
	if got := ping(dial()); got != "+PONG\r\n" {
		t.Fatalf("a client after one left: %q", got)
	}
}
