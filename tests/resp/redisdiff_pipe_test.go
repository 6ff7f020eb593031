package resp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestRedisServerDifferentialPipelined sends each transaction script of
// diffScripts (MULTI, EXEC, WATCH, RESET) as one pipeline, every command
// in one write, to a redis-server and to a Concord node, and compares the
// replies as TestRedisServerDifferential does: a pipeline runs its key
// commands concurrently unless a transaction is open, and MULTI, EXEC and
// WATCH in the middle of one must still answer as they do one at a time.
// Scripts with steps on a second connection, inline or last steps are
// left to TestRedisServerDifferential.
func TestRedisServerDifferentialPipelined(t *testing.T) {
	t.Parallel()
	bin := redisServerBinary(t)
	redisAddr := startRedisServer(t, bin)
	c := startCluster(t, testcluster.Options{})
	ran := 0
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			for i, s := range diffScripts {
				if !pipelinable(s) {
					continue
				}
				ran++
				tag := fmt.Sprintf("{p%d.%d}", proto, i)
				runDiffPipeline(t, s, proto, tag, redisAddr, c.RedisAddr(i%c.N()))
			}
		})
	}
	t.Logf("%d transaction scripts pipelined", ran)
	if ran < 20 {
		t.Fatalf("only %d transaction scripts could be pipelined", ran)
	}
}

// pipelinable reports whether s is a transaction script whose steps can go
// as one pipeline on one connection.
func pipelinable(s diffScript) bool {
	if !strings.Contains(s.name, "MULTI") && !strings.Contains(s.name, "EXEC") && !strings.Contains(s.name, "WATCH") &&
		!strings.Contains(s.name, "RESET") {
		return false
	}
	for _, step := range s.steps {
		if strings.HasPrefix(step, "& ") || strings.HasPrefix(step, "> ") || strings.HasPrefix(step, "! ") {
			return false
		}
	}
	return true
}

// runDiffPipeline writes the steps of s (up to a QUIT) at once to each
// server and compares the replies in order.
func runDiffPipeline(t *testing.T, s diffScript, proto int, tag, redisAddr, concordAddr string) {
	t.Helper()
	rc, cc := dialDiffProto(t, redisAddr, proto), dialDiffProto(t, concordAddr, proto)
	defer rc.close()
	defer cc.close()
	var modes []stepMode
	var lines []string
	var raw strings.Builder
	for _, step := range s.steps {
		mode, line := parseStepMode(t, step)
		args := splitDiffLine(t, line)
		fmt.Fprintf(&raw, "*%d\r\n", len(args))
		for _, a := range args {
			a = strings.ReplaceAll(a, "{t}", tag)
			fmt.Fprintf(&raw, "$%d\r\n%s\r\n", len(a), a)
		}
		modes, lines = append(modes, mode), append(lines, line)
		if strings.EqualFold(args[0], "QUIT") {
			break
		}
	}
	for _, c := range []*diffConn{rc, cc} {
		_ = c.nc.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := c.nc.Write([]byte(raw.String())); err != nil {
			t.Fatalf("%s: write: %v", c.addr, err)
		}
	}
	for i, line := range lines {
		want, err := readDiffReply(rc.br, 0)
		if err != nil {
			t.Fatalf("%s: redis-server's reply to %s: %v", s.name, line, err)
		}
		got, err := readDiffReply(cc.br, 0)
		if err != nil {
			t.Fatalf("%s: concord's reply to %s: %v", s.name, line, err)
		}
		_, known := knownDifferences[s.name+": "+line]
		if !modes[i].same(want, got) && !known {
			t.Errorf("%s (pipelined): %s\n\tredis-server: %s\n\tconcord:      %s", s.name, line, want, got)
		}
	}
}
