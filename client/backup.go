package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
)

// BackupShard streams one user shard's live keys, with their expiry, as of
// one linearizable point (the Backup service: every write acknowledged
// before the call is in it), and passes each chunk to fn in order: the
// first carries the shard's info, the last is marked done.
//
// It asks the shard's leader if the client knows it, else the other nodes
// in turn, until one begins the stream (any node relays it from the
// leader). BackupShard returns nil only once fn has received the whole
// stream, its record count checked. If it fails after fn received chunks,
// the caller must drop them and call again. It has no attempt timeout:
// ctx bounds it.
func (c *Client) BackupShard(ctx context.Context, shard uint64, fn func(*concordpb.BackupShardChunk) error) error {
	lastErr := errors.New("concord: no node known")
	for _, addr := range c.backupTargets(shard) {
		conn, err := c.conn(addr)
		if err != nil {
			lastErr = err
			continue
		}
		started, err := backupFrom(ctx, conn, shard, fn)
		if err == nil || started || status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return ended(ctx, err) // a stream cut by ctx's deadline: gRPC's DeadlineExceeded
		}
		lastErr = err
	}
	return ended(ctx, lastErr)
}

// backupTargets lists the shard's leader first, then every other node.
func (c *Client) backupTargets(shard uint64) []string {
	r := c.routes.Load()
	var out []string
	if addr := r.addrs[r.leaders[shard]]; addr != "" {
		out = append(out, addr)
	}
	for _, a := range c.candidates() {
		if len(out) == 0 || a != out[0] {
			out = append(out, a)
		}
	}
	return out
}

// backupFrom reads the stream from one node; started reports whether fn
// received anything.
func backupFrom(ctx context.Context, conn *grpc.ClientConn, shard uint64, fn func(*concordpb.BackupShardChunk) error) (started bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if fn fails
	stream, err := concordpb.NewBackupClient(conn).Shard(ctx, &concordpb.BackupShardRequest{ShardId: shard})
	if err != nil {
		return false, err
	}
	var records uint64
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return started, fmt.Errorf("concord: shard %d: the backup stream ended before its last chunk", shard)
		}
		if err != nil {
			return started, err
		}
		if !started && chunk.GetInfo() == nil {
			return true, fmt.Errorf("concord: shard %d: the backup stream did not begin with the shard's info", shard)
		}
		records += uint64(len(chunk.GetRecords()))
		if chunk.GetDone() && chunk.GetCount() != records {
			return true, fmt.Errorf("concord: shard %d: the backup stream sent %d records, its end says %d", shard, records, chunk.GetCount())
		}
		started = true
		if err := fn(chunk); err != nil {
			return true, err
		}
		if chunk.GetDone() {
			return true, nil
		}
	}
}
