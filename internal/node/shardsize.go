package node

import (
	"sync"
	"time"

	"github.com/concord-kv/concord/internal/ids"
)

// shardSizeEvery is how often a node measures its replicas' sizes on disk
// for its heartbeats (ReplicaStatus.approx_bytes). One shard's estimate
// reads Pebble's file metadata, under a microsecond
// (storage.BenchmarkShardDiskUsage: 0.8 µs on an engine of 64 shards), so
// even a node of thousands of replicas could afford it every heartbeat;
// but a shard's size changes slowly, placement needs it only to within
// the reserve's margin, and the cost grows with the node's files, so it
// is measured every 10 s and the heartbeats between reuse it.
const shardSizeEvery = 10 * time.Second

// shardSizes caches each hosted replica's approximate size
// (storage.Engine.ShardDiskUsage) between measurements.
type shardSizes struct {
	mu    sync.Mutex
	at    time.Time              // when every hosted shard was measured last
	bytes map[ids.ShardID]uint64 // by shard, as measured then (or since: new replicas)
}

// approxBytes returns the sizes of shards, the replicas this node hosts,
// for a heartbeat at now (in a map of its own): measured anew every
// shardSizeEvery (testHooks.shardSizeEvery, if set), else as last
// measured; a shard hosted since the last measurement is measured at
// once. A new measurement forgets the shards no longer hosted.
func (n *Node) approxBytes(now time.Time, shards []ids.ShardID) map[ids.ShardID]uint64 {
	every := shardSizeEvery
	if n.testHooks.shardSizeEvery > 0 {
		every = n.testHooks.shardSizeEvery
	}
	c := &n.shardSizes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes == nil || now.Sub(c.at) >= every {
		c.bytes, c.at = make(map[ids.ShardID]uint64, len(shards)), now
	}
	out := make(map[ids.ShardID]uint64, len(shards))
	for _, s := range shards {
		b, ok := c.bytes[s]
		if !ok {
			b = n.eng.ShardDiskUsage(s)
			c.bytes[s] = b
		}
		out[s] = b
	}
	return out
}

// measuredBytes returns shard's size as last measured for the heartbeats
// (approxBytes), without measuring: 0 if it has not been (unknown).
func (n *Node) measuredBytes(shard ids.ShardID) uint64 {
	c := &n.shardSizes
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes[shard]
}
