// Package resp tests the Redis protocol front door end to end: go-redis
// (and raw sockets, for malformed input) against clusters of real concord
// processes, each node serving RESP on its own port.
package resp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/concord-kv/concord/internal/testcluster"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

const readyTimeout = 60 * time.Second

// startCluster starts a 3-node cluster with Redis ports and waits until it
// serves.
func startCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	opts.Redis = true
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	c := testcluster.New(t, opts)
	c.WaitReady(t, readyTimeout)
	return c
}

// client returns a go-redis client of node i's Redis port (RESP3, as
// go-redis speaks by default), closed when the test ends.
func client(t *testing.T, c *testcluster.Cluster, i int, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: c.RedisAddr(i), MaxRetries: -1, ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second}
	for _, f := range opts {
		f(o)
	}
	rc := redis.NewClient(o)
	t.Cleanup(func() { rc.Close() })
	return rc
}

func resp2(o *redis.Options) { o.Protocol = 2 }

// wantErr fails unless err is a Redis error starting with prefix.
func wantErr(t *testing.T, what string, err error, prefix string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("%s: err = %v, want one starting with %q", what, err, prefix)
	}
}

// must(cmd.Result())(t, what) returns the value, or fails the test with
// what and the error.
func must[T any](v T, err error) func(t *testing.T, what string) T {
	return func(t *testing.T, what string) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
