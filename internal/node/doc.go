// Package node assembles one Concord process: the Pebble engine, the
// multiraft host with its replicas, the raft transport, and the gRPC server
// that serves the KV, Cluster and RaftTransport services on one address.
//
// Start order: open storage; listen and serve gRPC (a fresh node must answer
// its peers' probes before it has an identity); establish the identity
// (load it, bootstrap a new cluster, or join an existing one); start the
// transport and host; start the background loops (heartbeats to the
// placement leader, replica repair on the placement leader, session expiry).
//
// Goroutines owned by a Node: the gRPC server's, the host loop, the
// transport's per-peer senders, and the background loops; Stop ends them
// in reverse order.
package node
