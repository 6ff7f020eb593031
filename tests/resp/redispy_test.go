package resp

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestRedisPy runs testdata/redispy_check.py (redis-py, RESP2 and RESP3)
// against a node. Skipped when python3 or its redis package is missing.
func TestRedisPy(t *testing.T) {
	t.Parallel()
	if err := exec.Command("python3", "-c", "import redis").Run(); err != nil {
		t.Skip("redis-py is not installed (python3 -c 'import redis' fails); pip install redis to run this test")
	}
	c := startCluster(t, testcluster.Options{})
	port := c.RedisAddr(1)[strings.LastIndexByte(c.RedisAddr(1), ':')+1:]
	out, err := exec.Command("python3", "testdata/redispy_check.py", port).CombinedOutput()
	if err != nil {
		t.Fatalf("redispy_check.py: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestRedisCLI runs redis-cli against a node, RESP2 and RESP3 (-3), when
// it is installed.
func TestRedisCLI(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not installed")
	}
	c := startCluster(t, testcluster.Options{Nodes: 1})
	host, port := "127.0.0.1", c.RedisAddr(0)[strings.LastIndexByte(c.RedisAddr(0), ':')+1:]
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "cli:k", "hello world"}, "OK"},
		{[]string{"GET", "cli:k"}, "hello world"},
		{[]string{"-3", "GET", "cli:k"}, "hello world"},
		{[]string{"INCR", "cli:n"}, "1"},
		{[]string{"-3", "HELLO", "3"}, "server"},
		{[]string{"GET", "cli:missing"}, ""},
		{[]string{"NOSUCH", "x"}, "ERR unknown command 'NOSUCH'"},
		{[]string{"DBSIZE"}, "2"},
	} {
		if got := cli(tc.args...); !strings.HasPrefix(got, tc.want) {
			t.Errorf("redis-cli %v = %q, want it to start with %q", tc.args, got, tc.want)
		}
	}
	// A script of commands on stdin, as `redis-cli < file` runs them.
	cmd := exec.Command("redis-cli", "-h", host, "-p", port)
	cmd.Stdin = strings.NewReader("SET cli:a 1\nMSET cli:b 2 cli:c 3\nMGET cli:a cli:b cli:c\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1\n2\n3") {
		t.Errorf("redis-cli with commands on stdin: %v\n%s", err, out)
	}
}
