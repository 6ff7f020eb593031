package node

import (
	"fmt"
	"slices"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/redisapi"
	"github.com/concord-kv/concord/internal/routing"
)

// redisBackend is the node as the Redis front door sees it: the same KV
// service the gRPC server registers (so both doors validate, route and
// forward alike), the routing table, and the figures INFO reports.
type redisBackend struct {
	*grpcapi.KV
	n *Node
}

var _ redisapi.Backend = redisBackend{}

func (b redisBackend) ShardOf(key []byte) (uint64, bool) {
	if !b.n.isReady() {
		return 0, false
	}
	descs := b.n.shardDescriptors()
	list := make([]*concordpb.ShardDescriptor, 0, len(descs))
	for _, d := range descs {
		list = append(list, d)
	}
	d := routing.NewTable(list).Lookup(key)
	if d == nil {
		return 0, false
	}
	return d.GetShardId(), true
}

func (b redisBackend) Info() redisapi.NodeInfo {
	n := b.n
	info := redisapi.NodeInfo{NodeID: uint64(n.ID()), ClusterID: n.ident.Load().GetClusterId(), Addr: n.cfg.Addr, DataDir: n.cfg.DataDir}
	if !n.isReady() {
		return info
	}
	for id := range n.shardDescriptors() {
		if id != routing.MetaShard {
			info.Shards++
		}
	}
	for _, ri := range n.host.Infos() {
		if ri.Shard == routing.MetaShard || ri.Desc == nil {
			continue
		}
		info.Hosted = append(info.Hosted, uint64(ri.Shard))
		if ri.IsLeader {
			info.Led = append(info.Led, uint64(ri.Shard))
		}
	}
	slices.Sort(info.Hosted)
	slices.Sort(info.Led)
	return info
}

func (n *Node) isReady() bool {
	select {
	case <-n.ready:
		return true
	default:
		return false
	}
}

// startRedis serves the Redis protocol on cfg.RedisAddr, if set.
func (n *Node) startRedis() error {
	if n.cfg.RedisAddr == "" {
		return nil
	}
	n.redis = redisapi.New(redisBackend{KV: n.kv, n: n}, redisapi.Config{
		MaxKeyBytes: n.cfg.MaxKeyBytes, MaxValueBytes: n.cfg.MaxValueBytes,
		EnableFlush: n.cfg.RedisEnableFlush, AuthToken: n.cfg.AuthToken, Logger: n.log,
		OutputBufferLimit: n.cfg.RedisOutputBufferLimit,
	})
	if err := n.redis.Listen(n.cfg.RedisAddr); err != nil {
		return fmt.Errorf("listen for Redis clients on %s: %w", n.cfg.RedisAddr, err)
	}
	return nil
}

// RedisAddr is the address the Redis protocol is served on, "" if off.
func (n *Node) RedisAddr() string {
	if n.redis == nil || n.redis.Addr() == nil {
		return ""
	}
	return n.redis.Addr().String()
}
