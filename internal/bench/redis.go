package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// redisTarget drives one Redis server (or anything speaking RESP, such as
// Concord's Redis port once it exists) through go-redis. Redis has no
// consistency levels to choose, and no ordered scan over string keys.
type redisTarget struct {
	c *redis.Client
}

// DialRedis opens a go-redis client with a pool of one connection per
// goroutine that shares it, as redis-benchmark gives each client its own
// connection, and checks the server answers.
func DialRedis(ctx context.Context, addr string, clients int) (Target, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(clients, 1), MinIdleConns: 0})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return &redisTarget{c: c}, nil
}

func (t *redisTarget) Get(ctx context.Context, key []byte) (bool, error) {
	err := t.c.Get(ctx, string(key)).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func (t *redisTarget) Put(ctx context.Context, key, value []byte) error {
	return t.c.Set(ctx, string(key), value, 0).Err()
}

func (t *redisTarget) Scan(ctx context.Context, start []byte, n int) (int, error) {
	return 0, errors.New("redis: no ordered scan")
}

func (t *redisTarget) Close() error { return t.c.Close() }
