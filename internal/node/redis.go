package node

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/grpcapi"
	"github.com/concord-kv/concord/internal/ids"
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
	d := b.n.routingTable().Lookup(key)
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
	info.TentativeHeld = n.hints.Count()
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

// isReady reports whether host and transport are set (ready is closed or
// about to be). An atomic load: the Redis server asks for every key it
// routes, and a non-blocking receive from ready was 1 % of a Redis node
// under pipelined SET.
func (n *Node) isReady() bool { return n.readyNow.Load() }

// newRedis returns the Redis protocol server of the node's KV service.
func (n *Node) newRedis() *redisapi.Server {
	return redisapi.New(redisBackend{KV: n.kv, n: n}, redisapi.Config{
		MaxKeyBytes: n.cfg.MaxKeyBytes, MaxValueBytes: n.cfg.MaxValueBytes,
		EnableFlush: n.cfg.RedisEnableFlush, EnableFaultInjection: n.cfg.EnableFaultInjection,
		AuthToken: n.cfg.AuthToken, Logger: n.log, OutputBufferLimit: n.cfg.RedisOutputBufferLimit,
		MaxClients: n.cfg.RedisMaxClients,
		Observe: func(cmd, errCode string, d time.Duration) {
			n.metrics.Request("resp", cmd, cmp.Or(errCode, "OK"), d)
		},
		ObserveOK: func(cmd string) func(time.Duration) { return n.metrics.RequestObserver("resp", cmd, "OK") },
	})
}

// startRedis also serves the Redis protocol on its own port,
// cfg.RedisAddr, if set.
func (n *Node) startRedis() error {
	if n.cfg.RedisAddr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", n.cfg.RedisAddr)
	if err != nil {
		return fmt.Errorf("listen for Redis clients on %s: %w", n.cfg.RedisAddr, err)
	}
	n.redisLis = lis
	n.redis.Serve(n.sec.listen(lis))
	return nil
}

// RedisAddr is the Redis protocol's own port (--redis-addr), "" if none;
// RESP is served on Addr as well.
func (n *Node) RedisAddr() string {
	if n.redisLis == nil {
		return ""
	}
	return n.redisLis.Addr().String()
}

// Members lists the addresses a client may find a node serving at
// (CONCORD.MEMBERS; the CS739 library adds them to its server list). A
// REMOVED node serves nothing, and a REPLACED one's address is its
// successor's (listed under that node): both are left out. A DEAD node is
// kept: it is the same identity if it comes back (a restart on its data
// dir), and a client that tries it while it is down only moves on to the
// next address. A LEAVING node still serves until it is removed, so it is
// kept too.
func (b redisBackend) Members() []string {
	var out []string
	for _, d := range b.n.book.all() {
		switch d.GetState() {
		case concordpb.NodeState_NODE_REMOVED, concordpb.NodeState_NODE_REPLACED:
			continue
		}
		if a := d.GetAddress(); !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func (b redisBackend) Die(clean bool)                            { b.n.die(clean) }
func (b redisBackend) Partition(reachable []string) []ids.NodeID { return b.n.partitionFrom(reachable) }
func (b redisBackend) Heal()                                     { b.n.heal() }
func (b redisBackend) DiskLow(low bool) error                    { return b.n.setDiskLow(low) }
