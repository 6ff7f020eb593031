// Package node assembles one Concord process: the Pebble engine, the
// multiraft host with its replicas, the raft transport, and the gRPC server
// on one address, which serves the front door's services (internal/grpcapi:
// KV, Cluster, Admin, RaftTransport).
//
// What the node holds itself:
//   - identity (bootstrap.go): load it, or for an empty data dir probe the
//     peers and bootstrap a new cluster or join an existing one; addNode is
//     the placement leader's side of a join.
//   - wiring (node.go): Start/Stop order, the gRPC server and the
//     registration of grpcapi's services, the long-running loops.
//   - what it knows of peers (peers.go): the address book, the seen set,
//     the connection pool; and of shards (routes.go): descriptors and leaders.
//   - the loops: heartbeats to the placement leader and, on it, the view of
//     every node's reports (heartbeat.go, status.go); replica repair on the
//     placement leader (repair.go); session expiry (sessions.go).
//   - the fault-injection hooks behind the Admin service (faults.go).
//
// The front door reaches the node only through grpcapi.Backend, which
// backend.go implements by delegating to the node. The node in turn calls
// the front door for node-to-node requests of its own (heartbeats, replica
// changes: grpcapi.ClusterClientFor and Cluster.ChangeReplicas), so the
// forwarding rules (hop limit, partitions) live in one place.
//
// Start order: open storage; listen and serve gRPC (a fresh node must answer
// its peers' probes before it has an identity); establish the identity;
// start the transport and host; start the background loops.
//
// Goroutines owned by a Node: the gRPC server's, the host loop, the
// transport's per-peer senders, and the background loops. Stop closes the
// gRPC server first (no new requests), then the host and the transport,
// waits for the background loops, and closes storage last. Locks: addressBook.writeMu,
// addressBook.mu, seenSet.mu, seenEntry.mu, connPool.mu, placementState.mu, each
// guarding only what its comment says.
package node
