package grpcapi

import (
	"google.golang.org/grpc"

	"github.com/concord-kv/concord/api/concordpb"
)

// RaftTransport hands the RaftTransport service to the node's transport once
// the node is initialized; before that, peers are told to retry.
type RaftTransport struct {
	concordpb.UnimplementedRaftTransportServer
	b RaftBackend
}

// NewRaftTransport returns the RaftTransport service of b.
func NewRaftTransport(b RaftBackend) *RaftTransport { return &RaftTransport{b: b} }

func (s *RaftTransport) receiver() (concordpb.RaftTransportServer, error) {
	if err := ready(s.b, "node not initialized yet"); err != nil {
		return nil, err
	}
	return s.b.RaftReceiver(), nil
}

// Send receives a peer's stream of raft message batches.
func (s *RaftTransport) Send(st grpc.ClientStreamingServer[concordpb.RaftBatch, concordpb.RaftAck]) error {
	r, err := s.receiver()
	if err != nil {
		return err
	}
	return r.Send(st)
}

// SendSnapshot receives one snapshot in chunks.
func (s *RaftTransport) SendSnapshot(st grpc.ClientStreamingServer[concordpb.SnapshotChunk, concordpb.SnapshotAck]) error {
	r, err := s.receiver()
	if err != nil {
		return err
	}
	return r.SendSnapshot(st)
}
