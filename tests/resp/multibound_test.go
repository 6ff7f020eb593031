package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestMultiBoundWithWatchedKeys: the MULTI queue's bound leaves room for
// EXEC's checks of the watched keys, exactly: with one key watched, 999
// queued SETs make a batch of 1,000 ops, which a real node accepts and
// applies, and a 1,000th SET is refused as it is queued (EXEC answers
// EXECABORT). Before, the 1,000th was queued and EXEC's batch of 1,001 ops
// was refused whole at EXEC.
func TestMultiBoundWithWatchedKeys(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Nodes: 1, Shards: 1})
	cn := dialDiff(t, c.RedisAddr(0))
	defer cn.close()
	for _, tc := range []struct {
		sets int
		want string // EXEC's reply's start
	}{{999, "*["}, {1000, "-EXECABORT"}} {
		if r := cn.do(t, []string{"WATCH", "mbw:w"}); r.String() != "+OK" {
			t.Fatalf("WATCH: %s", r)
		}
		if r := cn.do(t, []string{"MULTI"}); r.String() != "+OK" {
			t.Fatalf("MULTI: %s", r)
		}
		for i := 1; i <= tc.sets; i++ {
			r := cn.do(t, []string{"SET", fmt.Sprintf("mbw:%d", tc.sets), "v"})
			if i == 1000 {
				if !strings.HasPrefix(r.String(), "-ERR MULTI queues at most") {
					t.Fatalf("SET %d, past the bound with the watched key's check: %s", i, r)
				}
			} else if r.String() != "+QUEUED" {
				t.Fatalf("SET %d of %d: %s", i, tc.sets, r)
			}
		}
		r := cn.do(t, []string{"EXEC"})
		if !strings.HasPrefix(r.String(), tc.want) || (tc.want == "*[" && len(r.elems) != tc.sets) {
			t.Fatalf("EXEC after %d SETs: %.200s, want %s...", tc.sets, r, tc.want)
		}
		applied := tc.want == "*["
		if got := cn.do(t, []string{"EXISTS", fmt.Sprintf("mbw:%d", tc.sets)}).String(); got != map[bool]string{true: ":1", false: ":0"}[applied] {
			t.Fatalf("after EXEC of %d SETs, EXISTS = %s (applied: %v)", tc.sets, got, applied)
		}
	}
}

// TestMultiQueuedSizeErrors: inside MULTI, a command whose key is empty or
// past --max-key-bytes, or whose value is past --max-value-bytes, answers
// that error in EXEC's array and the rest of the transaction applies, as
// Redis answers a queued command's argument error; the texts are those the
// command gets outside MULTI. Before, the node refused EXEC's whole batch:
// EXEC answered the one error and applied nothing.
func TestMultiQueuedSizeErrors(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.Options{Nodes: 1, Shards: 1, ExtraArgs: []string{"--max-value-bytes=1000", "--max-key-bytes=100"}})
	cn := dialDiff(t, c.RedisAddr(0))
	defer cn.close()
	big, long := strings.Repeat("v", 1001), strings.Repeat("k", 101)
	bad := [][]string{{"SET", "mqs:b", big}, {"SET", long, "x"}, {"SET", "", "x"}}
	var outside []string // each bad command's answer outside MULTI
	for _, cmd := range bad {
		outside = append(outside, cn.do(t, cmd).String())
	}
	steps := append(append([][]string{{"MULTI"}, {"SET", "mqs:a", "1"}}, bad...), []string{"SET", "mqs:z", "2"})
	for _, step := range steps {
		cn.do(t, step)
	}
	got := cn.do(t, []string{"EXEC"})
	want := append(append([]string{"+OK"}, outside...), "+OK")
	if len(got.elems) != len(want) {
		t.Fatalf("EXEC: %.300s, want an array of %d", got, len(want))
	}
	for i, e := range got.elems {
		if e.String() != want[i] || (i > 0 && i < len(want)-1 && e.typ != '-') {
			t.Errorf("EXEC's answer %d: %s, want %s (as outside MULTI)", i, e, want[i])
		}
	}
	if got := cn.do(t, []string{"MGET", "mqs:a", "mqs:z", "mqs:b"}).String(); got != `*[$"1" $"2" $nil]` {
		t.Fatalf("after EXEC, MGET = %s", got)
	}
}
