package transport

import (
	"bytes"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// The lane writes RaftBatch and RaftEnvelope fields by number: they must
// be raft.proto's.
func TestEnvelopeFieldNumbers(t *testing.T) {
	for _, c := range []struct {
		md   protoreflect.MessageDescriptor
		name protoreflect.Name
		num  protoreflect.FieldNumber
	}{
		{(&concordpb.RaftBatch{}).ProtoReflect().Descriptor(), "cluster_id", 1},
		{(&concordpb.RaftBatch{}).ProtoReflect().Descriptor(), "from_node_id", 2},
		{(&concordpb.RaftBatch{}).ProtoReflect().Descriptor(), "to_node_id", 3},
		{(&concordpb.RaftBatch{}).ProtoReflect().Descriptor(), "messages", batchMessagesField},
		{(&concordpb.RaftEnvelope{}).ProtoReflect().Descriptor(), "shard_id", envShardField},
		{(&concordpb.RaftEnvelope{}).ProtoReflect().Descriptor(), "message", envMessageField},
	} {
		if f := c.md.Fields().ByName(c.name); f == nil || f.Number() != c.num {
			t.Errorf("%s.%s: descriptor %v, the lane writes field %d", c.md.Name(), c.name, f, c.num)
		}
	}
}

type sent struct {
	shard uint64
	m     *pb.Message
}

// decodeQueue decodes the frames l holds as a receiver would, checking
// every frame's header and its message count.
func decodeQueue(t *testing.T, l *lane) (got []sent, batches []*concordpb.RaftBatch) {
	t.Helper()
	q := l.take()
	fr := newFrameReader(bytes.NewReader(q.buf), 1<<30)
	for i, n := range q.counts {
		b := &concordpb.RaftBatch{}
		if err := fr.Next(b); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if b.GetClusterId() != 7 || b.GetFromNodeId() != 1 || b.GetToNodeId() != 2 {
			t.Fatalf("frame %d: header %d/%d/%d, want cluster 7 from 1 to 2", i, b.GetClusterId(), b.GetFromNodeId(), b.GetToNodeId())
		}
		if len(b.GetMessages()) != n {
			t.Fatalf("frame %d: %d messages, the queue counted %d", i, len(b.GetMessages()), n)
		}
		for _, e := range b.GetMessages() {
			m := &pb.Message{}
			if err := proto.Unmarshal(e.GetMessage(), m); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			got = append(got, sent{e.GetShardId(), m})
		}
		batches = append(batches, b)
	}
	if err := fr.Next(&concordpb.RaftBatch{}); err == nil {
		t.Fatal("the queue holds more frames than it counted")
	}
	return got, batches
}

// What Send queues is frames a receiver decodes to the messages sent, in
// order, whichever encoder took them: raftwire's (appends, acks,
// heartbeats, an empty message, shard 0) or proto's (storage responses);
// and changing a message after Send does not change what goes out.
func TestQueuedFramesDecode(t *testing.T) {
	tr, p := queueOnly(Config{})
	withResponses := &pb.Message{Type: pb.MsgStorageAppend.Enum(), Responses: []*pb.Message{{Type: pb.MsgAppResp.Enum()}}}
	app := appendOf(300)
	want := []sent{
		{1, app},
		{0, heartbeat(2)},
		{3, &pb.Message{}},
		{1 << 40, withResponses},
		{5, appendOf(0)},
	}
	for _, s := range want {
		tr.Send(2, idsShard(s.shard), s.m)
	}
	wantApp := proto.Clone(app).(*pb.Message)
	app.Entries[0].Data[0] = 'y' // after Send: must not show
	want[0].m = wantApp
	got, _ := decodeQueue(t, p.bulk)
	control, _ := decodeQueue(t, p.control)
	got = append(got, control...)
	// heartbeat takes the control lane: the bulk lane's order, then control's.
	order := []sent{want[0], want[2], want[3], want[4], want[1]}
	if len(got) != len(order) {
		t.Fatalf("%d messages decoded, %d sent", len(got), len(order))
	}
	for i := range order {
		if got[i].shard != order[i].shard || !proto.Equal(got[i].m, order[i].m) {
			t.Errorf("message %d: shard %d %v, want shard %d %v", i, got[i].shard, got[i].m, order[i].shard, order[i].m)
		}
	}
}

// Frames keep the limits RaftBatches had: at most maxBatch messages and
// MaxBatchBytes bytes, but a larger message alone; and the queue, once
// written, starts over empty.
func TestQueuedFramesSplit(t *testing.T) {
	tr, p := queueOnly(Config{})
	for range maxBatch + 10 {
		tr.Send(2, 1, heartbeat(2))
	}
	if _, batches := decodeQueue(t, p.control); len(batches) != 2 || len(batches[0].GetMessages()) != maxBatch {
		t.Fatalf("%d heartbeats made %d frames, want 2 of at most %d", maxBatch+10, len(batches), maxBatch)
	}
	tr, p = queueOnly(Config{MaxBatchBytes: 4096})
	for range 10 {
		tr.Send(2, 1, appendOf(1000))
	}
	tr.Send(2, 1, appendOf(10000))
	tr.Send(2, 1, appendOf(1000))
	got, batches := decodeQueue(t, p.bulk)
	if len(got) != 12 {
		t.Fatalf("%d messages decoded, 12 sent", len(got))
	}
	for i, b := range batches {
		size := 0
		for _, e := range b.GetMessages() {
			size += envelopeBytes(e)
		}
		if size > 4096 && len(b.GetMessages()) > 1 {
			t.Errorf("frame %d: %d messages, %d bytes; the limit is 4096", i, len(b.GetMessages()), size)
		}
	}
	if p.bulk.hasPending() {
		t.Fatal("a taken queue still has messages")
	}
	tr.Send(2, 1, heartbeat(2)) // into the recycled buffers
	if got, _ := decodeQueue(t, p.control); len(got) != 1 {
		t.Fatalf("after a take, %d messages decoded, 1 sent", len(got))
	}
}

func idsShard(s uint64) ids.ShardID { return ids.ShardID(s) }
