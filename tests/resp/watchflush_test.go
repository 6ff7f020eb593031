package resp

import (
	"testing"

	"github.com/concord-kv/concord/internal/testcluster"
)

// TestWatchFlushDifferential: FLUSHDB after WATCH, by another connection
// (to another node) or by the watching one, answers as in redis-server:
// EXEC aborts when a watched key existed, and runs when every watched key
// was absent (Redis touches only the watched keys FLUSHDB deleted; Concord
// compares values, and an absent key stays absent). Its own redis-server
// and cluster, since FLUSHDB empties them (the cluster with
// --redis-enable-flush).
func TestWatchFlushDifferential(t *testing.T) {
	t.Parallel()
	redisAddr := startRedisServer(t, redisServerBinary(t))
	c := startCluster(t, testcluster.Options{ExtraArgs: []string{"--redis-enable-flush"}})
	s := diffScript{"WATCH and FLUSHDB", []string{
		`SET {t}a 1`, `WATCH {t}a {t}n`, `& FLUSHDB`, `MULTI`, `SET {t}b 1`, `EXEC`, `EXISTS {t}b`,
		`WATCH {t}n`, `& FLUSHDB`, `MULTI`, `SET {t}b 2`, `EXEC`, `GET {t}b`,
		`WATCH {t}b`, `FLUSHDB`, `MULTI`, `SET {t}c 1`, `EXEC`, `EXISTS {t}c`,
		`WATCH {t}n`, `FLUSHDB`, `MULTI`, `SET {t}c 2`, `EXEC`, `GET {t}c`,
	}}
	for _, proto := range []int{2, 3} {
		runDiffScript(t, s, proto, "{wf}", redisAddr, c.RedisAddr(0), c.RedisAddr(1))
	}
}
