package grpcapi

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/dial"
	"github.com/concord-kv/concord/internal/frame"
)

// countingServices are KV and RaftTransport services that count the
// requests their handlers get, decoded.
type countingServices struct {
	concordpb.UnimplementedKVServer
	concordpb.UnimplementedRaftTransportServer
	concordpb.UnimplementedClusterServer
	got atomic.Int64
}

func (s *countingServices) Heartbeat(context.Context, *concordpb.HeartbeatRequest) (*concordpb.HeartbeatResponse, error) {
	s.got.Add(1)
	return &concordpb.HeartbeatResponse{}, nil
}

func (s *countingServices) SendSnapshot(st grpc.ClientStreamingServer[concordpb.SnapshotChunk, concordpb.SnapshotAck]) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	s.got.Add(1)
	return st.SendAndClose(&concordpb.SnapshotAck{})
}

func (s *countingServices) Batch(context.Context, *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	s.got.Add(1)
	return &concordpb.BatchResponse{}, nil
}

func (s *countingServices) Stream(st grpc.BidiStreamingServer[concordpb.StreamRequest, concordpb.StreamResponse]) error {
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
		s.got.Add(1)
		if err := st.Send(&concordpb.StreamResponse{}); err != nil {
			return err
		}
	}
}

func (s *countingServices) Send(st grpc.ClientStreamingServer[concordpb.RaftBatch, concordpb.RaftAck]) error {
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return st.SendAndClose(&concordpb.RaftAck{})
			}
			return err
		}
		s.got.Add(1)
	}
}

// TestServerCodecCountsBeforeDecode (found by review): the gRPC server
// proto.Unmarshalled a request whole before any handler could bound it,
// so a message under the 64 MiB receive limit of empty stream calls,
// batch ops, raft envelopes, snapshot pairs or heartbeat replicas (two
// bytes each on the wire, tens to hundreds decoded) made gigabytes. With ServerCodec, as the node serves, such
// a request is refused before it is decoded (its handler never sees it),
// and requests within the bounds pass as before.
func TestServerCodecCountsBeforeDecode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &countingServices{}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(ServerCodec()), grpc.MaxRecvMsgSize(dial.MaxMsgBytes))
	concordpb.RegisterKVServer(srv, svc)
	concordpb.RegisterRaftTransportServer(srv, svc)
	concordpb.RegisterClusterServer(srv, svc)
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(dial.MaxMsgBytes)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, raft := concordpb.NewKVClient(conn), concordpb.NewRaftTransportClient(conn)

	batch := func(n int) error {
		_, err := kv.Batch(ctx, &concordpb.BatchRequest{Ops: make([]*concordpb.Op, n)})
		return err
	}
	stream := func(n int) error {
		s, err := kv.Stream(ctx)
		if err != nil {
			return err
		}
		calls := make([]*concordpb.StreamCall, n)
		for i := range calls {
			calls[i] = &concordpb.StreamCall{}
		}
		if err := s.Send(&concordpb.StreamRequest{Calls: calls}); err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	raftBatch := func(n int) error {
		s, err := raft.Send(ctx)
		if err != nil {
			return err
		}
		envs := make([]*concordpb.RaftEnvelope, n)
		for i := range envs {
			envs[i] = &concordpb.RaftEnvelope{}
		}
		if err := s.Send(&concordpb.RaftBatch{Messages: envs}); err != nil {
			return err
		}
		_, err = s.CloseAndRecv()
		return err
	}
	chunk := func(n int) error {
		s, err := raft.SendSnapshot(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&concordpb.SnapshotChunk{Kvs: make([]*concordpb.KeyValue, n)}); err != nil {
			return err
		}
		_, err = s.CloseAndRecv()
		return err
	}
	// A heartbeat's elements: its replicas, and its led descriptors' replicas.
	heartbeat := func(n int) error {
		d := &concordpb.ShardDescriptor{Replicas: make([]*concordpb.ReplicaDescriptor, n-1)}
		_, err := concordpb.NewClusterClient(conn).Heartbeat(ctx, &concordpb.HeartbeatRequest{LedDescriptors: []*concordpb.ShardDescriptor{d}})
		return err
	}
	for _, c := range []struct {
		name        string
		send        func(int) error
		ok, tooMany int
	}{
		{"KV.Batch", batch, 2, frame.MaxStreamCalls + 1},
		{"KV.Stream", stream, 2, frame.MaxStreamCalls + 1},
		{"RaftTransport.Send", raftBatch, 2, 8*512 + 1},               // transport.maxRecvBatch + 1
		{"RaftTransport.SendSnapshot", chunk, 2, 8<<14 + 1},           // transport.maxRecvChunkKVs + 1
		{"Cluster.Heartbeat", heartbeat, 2, frame.MaxStreamCalls + 1}, // nested
	} {
		if err := c.send(c.tooMany); err == nil {
			t.Errorf("%s: %d elements accepted", c.name, c.tooMany)
		} else {
			t.Logf("%s: %d elements: %v", c.name, c.tooMany, err)
		}
		if n := svc.got.Load(); n != 0 {
			t.Fatalf("%s: a handler got %d requests of too many elements", c.name, n)
		}
		if err := c.send(c.ok); err != nil {
			t.Fatalf("%s: %d elements: %v", c.name, c.ok, err)
		}
		if n := svc.got.Swap(0); n != 1 {
			t.Fatalf("%s: the handler got %d requests within the bounds, want 1", c.name, n)
		}
	}
}
