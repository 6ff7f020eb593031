package transport

import (
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// checkDecodeBatch fails t unless the batch decoder d makes of data what
// proto.Unmarshal makes of it: the same batch, or an error for both.
func checkDecodeBatch(t *testing.T, d *batchDecoder, data []byte) {
	t.Helper()
	want := &concordpb.RaftBatch{}
	werr := proto.Unmarshal(data, want)
	got, gerr := d.decode(data)
	if werr == nil && gerr != nil && len(want.GetMessages()) > maxRecvBatch {
		return // refused for its size: proto has no bound
	}
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("% x: proto error %v, decoder error %v", data, werr, gerr)
	}
	if werr != nil {
		return
	}
	if !proto.Equal(got, want) {
		t.Fatalf("% x: decoded %v, proto %v", data, got, want)
	}
	if len(got.GetMessages()) != len(want.GetMessages()) {
		t.Fatalf("% x: %d messages, proto %d", data, len(got.GetMessages()), len(want.GetMessages()))
	}
}

// randomBatch is a batch of up to 12 envelopes of random shards and
// messages (nil, empty or random bytes; real appends and acknowledgements).
func randomBatch(rng *rand.Rand) *concordpb.RaftBatch {
	b := &concordpb.RaftBatch{ClusterId: rng.Uint64(), FromNodeId: rng.Uint64N(5), ToNodeId: rng.Uint64N(5)}
	for range rng.IntN(13) {
		e := &concordpb.RaftEnvelope{ShardId: rng.Uint64N(1 << uint(rng.IntN(64)))}
		switch rng.IntN(4) {
		case 0:
		case 1:
			e.Message = make([]byte, rng.IntN(600))
			for i := range e.Message {
				e.Message[i] = byte(rng.Uint32())
			}
		case 2:
			e.Message, _ = proto.Marshal(&pb.Message{Type: pb.MsgApp.Enum(), Index: new(uint64(7)),
				Entries: []*pb.Entry{{Data: make([]byte, rng.IntN(400))}, {Index: new(uint64(9))}}})
		default:
			e.Message, _ = proto.Marshal(&pb.Message{Type: pb.MsgAppResp.Enum(), Index: new(rng.Uint64())})
		}
		b.Messages = append(b.Messages, e)
	}
	return b
}

// TestDecodeBatchMatchesProto protects the hand decoder of the receive
// path: whatever the frame (real batches, then each with a field proto
// keeps as unknown, a repeated header field, a truncation, a field of the
// wrong wire type), one decoder reused across all of them gives what
// proto.Unmarshal gives. It fails if the decoder drops or invents a field,
// keeps an envelope of the previous frame, or takes a frame proto refuses.
func TestDecodeBatchMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d batchDecoder
	for range 2000 {
		data, err := proto.Marshal(randomBatch(rng))
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeBatch(t, &d, data)
		checkDecodeBatch(t, &d, protowire.AppendVarint(protowire.AppendTag(data, 1, protowire.VarintType), rng.Uint64()))
		checkDecodeBatch(t, &d, protowire.AppendVarint(protowire.AppendTag(data, 9, protowire.VarintType), 1))
		checkDecodeBatch(t, &d, protowire.AppendBytes(protowire.AppendTag(data, 2, protowire.BytesType), []byte{1}))
		checkDecodeBatch(t, &d, protowire.AppendBytes(protowire.AppendTag(data, 4, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 5)))
		checkDecodeBatch(t, &d, protowire.AppendBytes(protowire.AppendTag(data, 4, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil)))
		checkDecodeBatch(t, &d, protowire.AppendBytes(protowire.AppendTag(data, 4, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 0)))
		if len(data) > 0 {
			checkDecodeBatch(t, &d, data[:rng.IntN(len(data))])
		}
	}
	checkDecodeBatch(t, &d, nil)
}

// TestDecodeBatchReusesEnvelopes protects the point of the decoder: once
// it has seen a frame as large, a frame of eight messages decodes without
// allocating.
func TestDecodeBatchReusesEnvelopes(t *testing.T) {
	data := typicalFrame(t)
	var d batchDecoder
	if got := testing.AllocsPerRun(100, func() {
		b, err := d.decode(data)
		if err != nil || len(b.GetMessages()) != 8 {
			t.Fatalf("decode: %d messages, %v", len(b.GetMessages()), err)
		}
	}); got != 0 {
		t.Fatalf("%v allocations per frame, want 0", got)
	}
}

// FuzzDecodeBatch checks the decoder against proto.Unmarshal on arbitrary
// frames (go test -fuzz FuzzDecodeBatch ./internal/transport/).
func FuzzDecodeBatch(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		data, _ := proto.Marshal(randomBatch(rng))
		f.Add(data)
	}
	var d batchDecoder
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeBatch(t, &d, data) })
}

// typicalFrame is a frame as a put load sends it: for 4 shards an append
// of two 300-byte entries and an acknowledgement.
func typicalFrame(tb testing.TB) []byte {
	b := &concordpb.RaftBatch{ClusterId: 7, FromNodeId: 2, ToNodeId: 1}
	for s := range uint64(4) {
		app, err := proto.Marshal(&pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(1)), From: new(uint64(2)),
			Term: new(uint64(3)), LogTerm: new(uint64(3)), Index: new(uint64(100)), Commit: new(uint64(99)),
			Entries: []*pb.Entry{{Term: new(uint64(3)), Index: new(uint64(101)), Data: make([]byte, 300)},
				{Term: new(uint64(3)), Index: new(uint64(102)), Data: make([]byte, 300)}}})
		if err != nil {
			tb.Fatal(err)
		}
		resp, err := proto.Marshal(&pb.Message{Type: pb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)),
			Term: new(uint64(3)), Index: new(uint64(102))})
		if err != nil {
			tb.Fatal(err)
		}
		b.Messages = append(b.Messages, &concordpb.RaftEnvelope{ShardId: s, Message: app}, &concordpb.RaftEnvelope{ShardId: s, Message: resp})
	}
	data, err := proto.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// BenchmarkDecodeBatch is the decode of one received frame (typicalFrame:
// 8 messages) with proto.Unmarshal, as ServeConn did before, and with the
// batch decoder.
func BenchmarkDecodeBatch(b *testing.B) {
	data := typicalFrame(b)
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		m := &concordpb.RaftBatch{}
		for range b.N {
			proto.Reset(m)
			if err := proto.Unmarshal(data, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("batchDecoder", func(b *testing.B) {
		b.ReportAllocs()
		var d batchDecoder
		for range b.N {
			if _, err := d.decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
