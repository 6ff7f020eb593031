package grpcapi

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// TestBackupShardIsRelayedFromTheLeader protects the Backup stream: a node
// that does not lead the shard relays the leader's stream; the leader reads
// after a barrier; the first chunk names the shard, the last is marked done
// with the count of every record sent.
func TestBackupShardIsRelayedFromTheLeader(t *testing.T) {
	f1, f2 := newFakeNode(t, 1, 2, 2), newFakeNode(t, 2, 2, 2)
	fillShards(f2, 20)
	f2.expiry = map[string]int64{"k03": 123, "k04": 456}
	serve(t, f2, f1)
	c1 := concordpb.NewBackupClient(serve(t, f1, f2))
	const shard = 1
	stream, err := c1.Shard(context.Background(), &concordpb.BackupShardRequest{ShardId: shard})
	if err != nil {
		t.Fatal(err)
	}
	var chunks []*concordpb.BackupShardChunk
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	want := f2.data[shard]
	if len(chunks) != len(want) || len(want) < 2 {
		t.Fatalf("%d chunks for %d keys (the fake exports one key per chunk)", len(chunks), len(want))
	}
	info := chunks[0].GetInfo()
	if info.GetShardId() != shard || info.GetServedByNodeId() != 2 || info.GetEndHash() != f2.descs[shard].GetEndHash() {
		t.Fatalf("first chunk's info %v", info)
	}
	last := chunks[len(chunks)-1]
	if !last.GetDone() || last.GetCount() != uint64(len(want)) {
		t.Fatalf("last chunk done=%v count=%d, want done with %d", last.GetDone(), last.GetCount(), len(want))
	}
	for i, c := range chunks {
		if i > 0 && c.GetInfo() != nil || i < len(chunks)-1 && c.GetDone() {
			t.Fatalf("chunk %d: info %v, done %v", i, c.GetInfo(), c.GetDone())
		}
		r := c.GetRecords()[0]
		if string(r.GetKey()) != string(want[i].GetKey()) || r.GetExpireAtUnixMs() != f2.expiry[string(r.GetKey())] {
			t.Fatalf("chunk %d: record %v, want key %q", i, r, want[i].GetKey())
		}
	}
	if len(f1.readIndex) != 0 || len(f2.readIndex) != 1 || f2.readIndex[0] != ids.ShardID(shard) {
		t.Fatalf("barriers: %v on the follower, %v on the leader", f1.readIndex, f2.readIndex)
	}
}

func TestBackupRefusesTheMetaShard(t *testing.T) {
	f := newFakeNode(t, 1, 2, 1)
	c := concordpb.NewBackupClient(serve(t, f))
	for _, shard := range []uint64{0, 3} {
		stream, err := c.Shard(context.Background(), &concordpb.BackupShardRequest{ShardId: shard})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.NotFound {
			t.Fatalf("shard %d: %v, want NotFound", shard, err)
		}
	}
}
