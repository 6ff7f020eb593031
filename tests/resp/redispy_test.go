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
