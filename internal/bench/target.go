package bench

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/client"
)

// Target is the system under load. One Target is one connection set
// (a "conn" in --conns); it must be safe for concurrent use.
type Target interface {
	Get(ctx context.Context, key []byte) (found bool, err error)
	Put(ctx context.Context, key, value []byte) error
	// Scan reads up to n pairs in key order from start and returns how
	// many it read.
	Scan(ctx context.Context, start []byte, n int) (int, error)
	Close() error
}

// Dial opens one Target of cfg.Target (Validate has checked the name).
// clients is how many goroutines will share it, for targets that pool
// connections.
func Dial(ctx context.Context, cfg Config, clients int) (Target, error) {
	stale := cfg.Consistency == "stale"
	switch cfg.Target {
	case "etcd":
		return DialEtcd(ctx, cfg.Endpoints, stale)
	case "redis":
		return DialRedis(ctx, cfg.Endpoints[0], clients)
	}
	opts := cfg.Concord
	opts.Endpoints = cfg.Endpoints
	return DialConcord(ctx, opts, stale)
}

// concordTarget drives a Concord cluster through the Go client.
type concordTarget struct {
	c    *client.Client
	opts []client.ReadOption
}

// DialConcord opens one client to the cluster at opts.Endpoints. stale
// makes reads use client.Stale().
func DialConcord(ctx context.Context, opts client.Options, stale bool) (Target, error) {
	c, err := client.NewWithOptions(ctx, opts)
	if err != nil {
		return nil, err
	}
	t := &concordTarget{c: c}
	if stale {
		t.opts = []client.ReadOption{client.Stale()}
	}
	return t, nil
}

func (t *concordTarget) Get(ctx context.Context, key []byte) (bool, error) {
	_, found, err := t.c.Get(ctx, key, t.opts...)
	return found, err
}

func (t *concordTarget) Put(ctx context.Context, key, value []byte) error {
	_, _, err := t.c.Put(ctx, key, value)
	return err
}

func (t *concordTarget) Scan(ctx context.Context, start []byte, n int) (int, error) {
	kvs, err := t.c.Scan(ctx, start, nil, n, t.opts...)
	return len(kvs), err
}

func (t *concordTarget) Close() error { return t.c.Close() }

// ErrorKind names an error for the errors-by-kind report: the gRPC code,
// or Ambiguous / DeadlineExceeded / Canceled for the client's own errors
// (checked first: they may wrap a gRPC status with a different code).
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, client.ErrAmbiguous):
		return "Ambiguous"
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	}
	return status.Code(err).String()
}
