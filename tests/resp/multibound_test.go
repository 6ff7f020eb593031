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
