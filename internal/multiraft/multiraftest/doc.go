// Package multiraftest runs a cluster of real multiraft Hosts in one test
// process, as etcd's rafttest does for single raft nodes.
//
// Each node is a real multiraft.Host on its own real Pebble engine (on an
// in-memory vfs, so restarts find what was synced and nothing touches the
// disk), with the real kv state machine for every shard. What is fake is
// only what the Host lets a test inject:
//
//   - the network: an in-memory multiraft.Transport. Messages are marshalled
//     as on the wire and delivered when the sender flushes, unless the test
//     cut a node off (both ways), set a drop rate, or set a delay in ticks.
//     Snapshots stream the sender's shard span into the receiver's staged
//     SSTable, as the gRPC transport does;
//   - time: every Host gets a ManualTicks source. Cluster.Tick advances all
//     running hosts one tick at a time and then lets the cluster settle
//     (every host has processed everything it was sent), so tests are
//     written in ticks, never in wall-clock sleeps. Ticks synchronise with
//     the loops only: a Host call a test makes in the background is begun
//     with Begin, which returns once the call has reached its host;
//   - randomness: drops and id bases come from one seed, printed by Seed
//     (rerun a failure with CONCORD_SEED=...). Raft's own randomized
//     election timeouts use etcd raft's global source and are not seeded;
//     goroutine scheduling is not either, so a seed reproduces the faults a
//     run injected, not every interleaving.
//
// Usage:
//
//	c := multiraftest.New(t, multiraftest.Options{Nodes: 3})
//	leader := c.WaitLeader(1)
//	c.Put("k", "v")
//	c.Cut(leader)
//	c.RunUntil("a new leader", 200, func() bool { ... })
package multiraftest
