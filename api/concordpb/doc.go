// Package concordpb holds Concord's wire API: the KV and Cluster services that
// clients use, and the RaftTransport service between nodes. The Go code is
// generated from the .proto files beside it by `make generate` and committed,
// so a checkout builds with the Go toolchain alone.
package concordpb
