package localcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
)

// permanent marks an error that WaitFor must not wait out.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent wraps err so that WaitFor returns it at once instead of
// polling on: the condition can no longer become true.
func Permanent(err error) error { return permanent{err} }

// WaitFor polls cond, backing off from 20 ms to 250 ms, until it returns
// nil, and returns how long that took. It gives up with cond's last error
// when timeout passes or ctx ends, and at once on a Permanent error.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() error) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	interval := 20 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return time.Since(start), nil
		}
		if p, ok := errors.AsType[permanent](err); ok {
			return time.Since(start), p.error
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("condition not met within %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
		interval = min(interval*2, 250*time.Millisecond)
	}
}

// Conn returns a gRPC connection to node i alone (no routing, no
// retries), shared by every caller and closed by Shutdown. It reconnects
// by itself across restarts of the node.
func (c *Cluster) Conn(i int) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		return nil, ErrShutdown
	}
	if conn, ok := c.conns[i]; ok {
		return conn, nil
	}
	opts, err := c.Security().Options()
	if err != nil {
		return nil, err
	}
	conn, err := dial.Dial(c.Addr(i), opts...) // lazy: it does not wait for the node
	if err != nil {
		return nil, err
	}
	c.conns[i] = conn
	return conn, nil
}

// RoutingTable asks node i alone for its routing table, waiting at most
// two seconds.
func (c *Cluster) RoutingTable(ctx context.Context, i int) (*concordpb.RoutingTableResponse, error) {
	conn, err := c.Conn(i)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return concordpb.NewClusterClient(conn).RoutingTable(ctx, &concordpb.RoutingTableRequest{})
}

// Ready checks once that every running node serves a routing table with
// all Shards() user shards, each with a leader.
func (c *Cluster) Ready(ctx context.Context) error {
	for i := range c.N() {
		if !c.Running(i) {
			continue
		}
		rt, err := c.RoutingTable(ctx, i)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		if got, want := len(rt.GetShards()), c.Shards(); got != want {
			return fmt.Errorf("node %d knows %d shards, want %d", i, got, want)
		}
		for _, s := range rt.GetShards() {
			if s.GetLeaderNodeId() == 0 {
				return fmt.Errorf("node %d knows no leader of shard %d", i, s.GetShard().GetShardId())
			}
		}
	}
	return nil
}

// WaitReady polls Ready until it holds and returns how long that took.
// Without supervision it gives up as soon as a node exits by itself.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	return WaitFor(ctx, timeout, func() error {
		if err := c.Exited(); err != nil && !c.cfg.Supervise {
			return Permanent(err)
		}
		return c.Ready(ctx)
	})
}
