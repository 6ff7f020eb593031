package grpcapi

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/routing"
)

// backupChunkBytes is about how many bytes of keys and values one chunk of
// a shard's backup stream carries: well under the gRPC message limit, and
// small enough that a chunk read holds the engine only briefly.
const backupChunkBytes = 1 << 20

// Backup implements the Backup service: one user shard's live keys as of a
// linearizable point, streamed from the shard's leader (relayed by any
// other node).
type Backup struct {
	concordpb.UnimplementedBackupServer
	kv *KV
}

// NewBackup returns the Backup service, which routes and reads as kv does.
func NewBackup(kv *KV) *Backup { return &Backup{kv: kv} }

// Shard streams req's shard: from this node's view after a read barrier if
// it leads the shard, else relayed from the leader. A leadership that moves
// before anything was sent is followed (rerouted); after that, the stream
// fails and the caller reads the shard again.
func (s *Backup) Shard(req *concordpb.BackupShardRequest, stream grpc.ServerStreamingServer[concordpb.BackupShardChunk]) error {
	b := s.kv.b
	if err := ready(b, notReady); err != nil {
		return err
	}
	shard := ids.ShardID(req.GetShardId())
	if _, ok := b.Descriptors()[shard]; !ok || shard == routing.MetaShard {
		return status.Errorf(codes.NotFound, "user shard %d does not exist", shard)
	}
	ctx := stream.Context()
	return s.kv.rerouted(ctx, shard, func() error {
		s.kv.awaitLeader(ctx, nil, shard)
		leader, local := b.Leader(shard)
		if !local {
			return s.relay(ctx, req, leader, stream)
		}
		view, err := s.kv.readBarrier(ctx, shard)
		if err != nil {
			return err
		}
		defer view.Close()
		return streamView(b.ID(), shard, view, stream)
	})
}

// streamView sends the shard's state in view: info first, then the
// records in chunks, the last one marked done with the count.
func streamView(self ids.NodeID, shard ids.ShardID, view ShardView, stream grpc.ServerStreamingServer[concordpb.BackupShardChunk]) error {
	applied, desc, err := view.State()
	if err != nil {
		return toStatus(err)
	}
	// One instant decides which keys have expired, for the whole shard.
	at := time.Now().UnixMilli()
	chunk := &concordpb.BackupShardChunk{Info: &concordpb.BackupShardInfo{
		ShardId: uint64(shard), StartHash: desc.GetStartHash(), EndHash: desc.GetEndHash(),
		AppliedIndex: applied, ServedByNodeId: uint64(self), ReadAtUnixMs: at,
	}}
	var start []byte
	var count uint64
	for {
		recs, more, err := view.Export(start, backupChunkBytes, at)
		if err != nil {
			return toStatus(err)
		}
		count += uint64(len(recs))
		chunk.Records = recs
		if !more {
			chunk.Done, chunk.Count = true, count
			return stream.Send(chunk)
		}
		if err := stream.Send(chunk); err != nil {
			return err
		}
		chunk = &concordpb.BackupShardChunk{}
		start = append(append([]byte(nil), recs[len(recs)-1].GetKey()...), 0)
	}
}

// relay forwards the request to leader and passes its chunks on. Unlike a
// unary forward it has no deadline of its own: a shard takes as long as it
// takes, bounded by the caller's.
func (s *Backup) relay(ctx context.Context, req *concordpb.BackupShardRequest, leader ids.NodeID, stream grpc.ServerStreamingServer[concordpb.BackupShardChunk]) error {
	shard := ids.ShardID(req.GetShardId())
	_, conn, err := peerConnFor(s.kv.b, leader, req.GetHops(), shard) // the same checks as a KV forward: hops, partition, address
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in, err := concordpb.NewBackupClient(conn).Shard(ctx, &concordpb.BackupShardRequest{ShardId: req.GetShardId(), Hops: req.GetHops() + 1})
	if err != nil {
		return err
	}
	for {
		chunk, err := in.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(chunk); err != nil {
			return err
		}
	}
}
