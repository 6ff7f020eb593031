// Package redisapi is Concord's Redis protocol front door: a RESP2/RESP3
// server (internal/resp) whose commands run on the same KV service the gRPC
// front door serves (internal/grpcapi's KV, called in process), so that
// validation, routing to the key's shard, forwarding to the shard's leader
// and error mapping live in one place. redis-cli, redis-benchmark and
// ordinary client libraries work against any node.
//
// How a command runs:
//   - A key command (GET, SET, INCR, MSET, ...) is first planned (plan.go,
//     strings.go): its arguments are checked and turned into concordpb Ops,
//     with a function that renders the Ops' results as the Redis reply. A
//     plan of reads only runs as Gets (one per key, at the connection's
//     consistency: linearizable by default); any other plan runs as one
//     BatchRequest per shard its keys fall in (atomic per shard).
//   - MULTI queues plans; EXEC sends all their Ops as one BatchRequest,
//     refused with CROSSSLOT when the keys span shards (multi.go).
//   - Keyspace commands (SCAN, KEYS, DBSIZE, RANDOMKEY, FLUSHDB) page
//     through ScanRequests (keyspace.go); connection and server commands
//     (HELLO, AUTH, CLIENT, INFO, COMMAND, CONFIG) answer from the
//     connection's state and the node's figures (server_cmds.go).
//
// Pipelining (conn.go): a connection reads every command already buffered
// (up to maxPipeline), runs consecutive key commands whose keys do not
// conflict concurrently, so that pipelined writes to one shard reach the
// replica host in the same loop turn and share a raft entry and an fsync,
// and writes the replies in request order. Commands on the same key run in
// order; connection commands run alone, in order.
//
// Errors: a gRPC status from the KV service becomes a Redis error reply
// (errors.go): InvalidArgument "ERR ...", Unavailable "UNAVAILABLE ...",
// a write that may have applied (Unknown, DeadlineExceeded, Canceled,
// Internal, gRPC's ResourceExhausted, an Unavailable that says it was
// sent: mayHaveApplied) "AMBIGUOUS ...".
// Nothing is retried here: a write that failed ambiguously may have
// applied, and a retry without a session could apply it twice.
//
// What it is not: it holds no data and decides no placement. Its state is
// per connection (protocol version, name, consistency, a MULTI queue) plus
// the node-wide SCAN cursor table and client list. See docs/redis.md for
// the command table and the rules.
package redisapi
