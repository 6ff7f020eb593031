// Package grpcapi is Concord's front door: the gRPC services a node serves
// to clients and to its peers.
//
//   - KV (kvservice.go): Get, Put, Delete, CompareAndSwap, Batch, Scan. It
//     validates the request (validate.go: empty or oversized keys and
//     values, batches over 1,000 ops or across shards, a session without a
//     sequence number), finds the key's shard, and either serves it here
//     (propose through raft; a linearizable read after a ReadIndex barrier;
//     a stale read straight from the local replica) or forwards it to the
//     node that can (forward.go), at most 2 hops, with a deadline shorter
//     than the caller's (a stalled target gets Unavailable back in time for
//     the caller to try another node). Scan fans out to every shard and
//     merges.
//   - Cluster (clusterservice.go): Probe, Join, Heartbeat, ChangeReplicas and
//     TransferLeader (validated in membership.go, forwarded to the shard's
//     leader), RoutingTable, Status. Placement requests go to the meta
//     shard's leader.
//   - Backup (backup.go): Shard streams one user shard's live keys, with
//     their expiry, from the leader's view after a read barrier (one
//     linearizable point per shard); another node relays the leader's
//     stream. `concord backup` reads every shard through it.
//   - Admin (admin.go): fault injection (Die, Partition, Heal, DiskLow), refused with
//     PermissionDenied unless the node enables it.
//   - RaftTransport (raftservice.go): hands peers' raft streams to the
//     node's transport once the node is initialized.
//
// It also holds the two interceptors of node-to-node calls
// (interceptors.go): the client side stamps the caller's node id, the
// server side refuses calls from peers a fault-injected partition cuts off.
//
// Errors that cross the wire are gRPC status codes, mapped from internal
// errors in one place, toStatus (errors.go): Unavailable when nothing was
// applied (not leader, dropped proposal, no replica), Unknown when a write
// is ambiguous (DeadlineExceeded or Canceled when the client's context
// caused it), InvalidArgument for bad input. The texts of InvalidArgument
// errors name the flag that sets the limit (--max-key-bytes).
//
// What it is not: it owns no state and no goroutines beyond those of the
// RPCs it serves (and a Scan's per-shard fan-out, which ends before the RPC
// returns). It does not decide placement, run raft, or read Pebble: all of
// that is the node's, reached through the Backend interface (backend.go),
// which internal/node implements and tests fake. Each service takes only
// the part of Backend it uses (KVBackend, ClusterBackend, RaftBackend,
// Faults).
//
// Concurrency: gRPC calls every handler on its own goroutine, many at once;
// the services are stateless, so Backend's methods must be safe for
// concurrent use. Before Backend.Ready is closed, every service but Probe
// and Admin answers Unavailable.
//
// Who may call what is Auth (auth.go): a token for clients, a certificate
// signed by the cluster's CA for the calls only nodes make when TLS is on.
//
// Usage (what internal/node does):
//
//	auth := grpcapi.Auth{Token: token, TLS: tlsOn}
//	srv := grpc.NewServer(grpc.Creds(grpcapi.AlreadyTLS()), // TLS only: the listener under the port mux decrypts
//		grpc.ChainUnaryInterceptor(auth.Unary(), grpcapi.MarkAnswered(), grpcapi.RefuseOtherCluster(clusterID), grpcapi.DropPartitioned(blocked)),
//		grpc.StreamInterceptor(auth.Stream()))
//	concordpb.RegisterKVServer(srv, grpcapi.NewKV(b, grpcapi.Limits{MaxKeyBytes: 4096, MaxValueBytes: 1 << 20}))
//	concordpb.RegisterClusterServer(srv, grpcapi.NewCluster(b))
//	concordpb.RegisterBackupServer(srv, grpcapi.NewBackup(kv))
//	concordpb.RegisterRaftTransportServer(srv, grpcapi.NewRaftTransport(b))
//	concordpb.RegisterAdminServer(srv, grpcapi.NewAdmin(b, enableFaultInjection))
//	// peer connections: grpc.WithChainUnaryInterceptor(grpcapi.StampFromNode(id), grpcapi.StampCluster(clusterID))
package grpcapi
