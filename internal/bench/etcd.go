package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdTarget drives an etcd cluster through its official Go client, so
// that etcd runs the same workload, key for key, as Concord does. Reads
// are linearizable unless stale (etcd's "serializable").
type etcdTarget struct {
	c    *clientv3.Client
	opts []clientv3.OpOption
}

// DialEtcd opens one etcd client (one gRPC connection, balanced over the
// endpoints by the client) and checks the cluster answers.
func DialEtcd(ctx context.Context, endpoints []string, stale bool) (Target, error) {
	dl, ok := ctx.Deadline()
	timeout := 10 * time.Second
	if ok {
		timeout = time.Until(dl)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	// clientv3.New does not wait for a connection: ask once, so a wrong
	// endpoint fails here and not as a run full of errors.
	if _, err := c.Get(ctx, "concord-bench-ping"); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd at %v: %w", endpoints, err)
	}
	t := &etcdTarget{c: c}
	if stale {
		t.opts = []clientv3.OpOption{clientv3.WithSerializable()}
	}
	return t, nil
}

func (t *etcdTarget) Get(ctx context.Context, key []byte) (bool, error) {
	resp, err := t.c.Get(ctx, string(key), t.opts...)
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0, nil
}

func (t *etcdTarget) Put(ctx context.Context, key, value []byte) error {
	_, err := t.c.Put(ctx, string(key), string(value))
	return err
}

func (t *etcdTarget) Scan(ctx context.Context, start []byte, n int) (int, error) {
	opts := append([]clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithLimit(int64(n))}, t.opts...)
	resp, err := t.c.Get(ctx, string(start), opts...)
	if err != nil {
		return 0, err
	}
	return len(resp.Kvs), nil
}

func (t *etcdTarget) Close() error { return t.c.Close() }
