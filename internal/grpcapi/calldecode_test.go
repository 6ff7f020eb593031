package grpcapi

import (
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

// checkDecodeRequest fails t unless decodeRequest makes of data what
// proto.Unmarshal makes of it, even once data was overwritten (the frame
// reader reuses its buffer: nothing decoded may alias it).
func checkDecodeRequest(t *testing.T, data []byte) {
	t.Helper()
	want := &concordpb.StreamRequest{}
	werr := proto.Unmarshal(data, want)
	buf := append([]byte(nil), data...)
	got, gerr := decodeRequest(buf)
	for i := range buf {
		buf[i] ^= 0xff
	}
	if werr == nil && gerr != nil && streamCalls(want) > frame.MaxStreamCalls {
		return // refused for its size: proto has no bound
	}
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("% x: proto error %v, decoder error %v", data, werr, gerr)
	}
	if werr == nil && !proto.Equal(got, want) {
		t.Fatalf("% x:\n got  %v\n want %v", data, got, want)
	}
}

// streamCalls is req's calls and batch ops.
func streamCalls(req *concordpb.StreamRequest) int {
	n := 0
	for _, c := range req.GetCalls() {
		n += 1 + len(c.GetBatch().GetOps())
	}
	return n
}

// randomBytes is nil, empty or up to n random bytes.
func randomBytes(rng *rand.Rand, n int) []byte {
	switch rng.IntN(3) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rng.IntN(n+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randomRequest is a request of up to 10 calls, mostly puts and gets with
// every field set or not (extreme values included), sometimes a ping.
func randomRequest(rng *rand.Rand) *concordpb.StreamRequest {
	req := &concordpb.StreamRequest{}
	if rng.IntN(3) == 0 {
		req.FromNodeId = rng.Uint64()
	}
	if rng.IntN(3) == 0 {
		req.ClusterId = rng.Uint64()
	}
	for range rng.IntN(11) {
		c := &concordpb.StreamCall{Id: rng.Uint64(), TimeoutMs: rng.Uint32N(3) * rng.Uint32()}
		switch rng.IntN(10) {
		case 8, 9:
			bt := &concordpb.BatchRequest{}
			if rng.IntN(2) == 0 {
				bt.Header = &concordpb.RequestHeader{Consistency: concordpb.Consistency(rng.Int32N(5) - 1), Hops: rng.Uint32N(4)}
			}
			for range rng.IntN(6) {
				bt.Ops = append(bt.Ops, randomOp(rng))
			}
			c.Request = &concordpb.StreamCall_Batch{Batch: bt}
		case 0, 2:
			g := &concordpb.GetRequest{Key: randomBytes(rng, 20)}
			if rng.IntN(2) == 0 {
				g.Header = &concordpb.RequestHeader{Consistency: concordpb.Consistency(rng.Int32N(5) - 1), Hops: rng.Uint32N(4)}
			}
			c.Request = &concordpb.StreamCall_Get{Get: g}
		case 1:
			c.Request = &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}
		default:
			p := &concordpb.PutRequest{Key: randomBytes(rng, 20), Value: randomBytes(rng, 300),
				TtlMs: int64(rng.Uint64()) >> rng.IntN(64), ReturnPrev: rng.IntN(2) == 0}
			if rng.IntN(4) > 0 {
				p.Header = &concordpb.RequestHeader{SessionId: rng.Uint64(), Seq: rng.Uint64N(1000),
					Consistency: concordpb.Consistency(rng.Int32N(5) - 1), Hops: rng.Uint32N(4), SessionFloor: rng.Uint64N(2) * rng.Uint64N(1000)}
			}
			c.Request = &concordpb.StreamCall_Put{Put: p}
		}
		req.Calls = append(req.Calls, c)
	}
	return req
}

// randomOp is an op with each field set or not, extreme and unknown enum
// values included.
func randomOp(rng *rand.Rand) *concordpb.Op {
	o := &concordpb.Op{}
	maybe := func() bool { return rng.IntN(2) == 0 }
	if maybe() {
		o.Type = concordpb.OpType(rng.Int32N(24) - 2)
	}
	o.Key, o.Value, o.Expected = randomBytes(rng, 20), randomBytes(rng, 300), randomBytes(rng, 10)
	o.ExpectAbsent, o.Delete, o.KeepTtl, o.Persist, o.ReturnPrev = maybe(), maybe(), maybe(), maybe(), maybe()
	if maybe() {
		o.TtlMs = int64(rng.Uint64()) >> rng.IntN(64)
	}
	if maybe() {
		o.ExpireAtUnixMs = int64(rng.Uint64()) >> rng.IntN(64)
	}
	if maybe() {
		o.Condition = concordpb.Condition(rng.Int32N(6) - 1)
	}
	if maybe() {
		o.IntDelta = int64(rng.Uint64()) >> rng.IntN(64)
	}
	if maybe() {
		o.FloatDelta = []float64{math.Copysign(0, -1), 1.5, -3e300, math.Inf(1), 5e-324}[rng.IntN(5)]
	}
	if maybe() {
		o.Offset = int64(rng.Uint64()) >> rng.IntN(64)
	}
	if maybe() {
		o.Skip = rng.Uint32()
	}
	return o
}

// TestDecodeRequestMatchesProto protects the hand decoder of the client
// wire: whatever the frame (random requests; each with an unknown field in
// the request, the call, the put or its header; a put given twice, which
// proto merges; a truncation), decodeRequest gives what proto.Unmarshal
// gives. It fails if the decoder drops, invents or misreads a field, takes
// a frame proto refuses, or leaves anything aliasing the caller's buffer.
func TestDecodeRequestMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tag := protowire.AppendTag
	for range 2000 {
		data, err := proto.Marshal(randomRequest(rng))
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeRequest(t, data)
		put := protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte("k"))
		hdr := protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 9)
		for _, call := range [][]byte{
			protowire.AppendBytes(tag(nil, 4, protowire.BytesType), put),
			protowire.AppendBytes(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), put), // put twice: merged
				protowire.AppendBytes(tag(nil, 4, protowire.BytesType), protowire.AppendBytes(tag(nil, 3, protowire.BytesType), []byte("v")))),
			protowire.AppendVarint(tag(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), put), 10, protowire.VarintType), 1),
			protowire.AppendBytes(tag(nil, 4, protowire.BytesType), protowire.AppendVarint(tag(put, 9, protowire.VarintType), 1)),
			protowire.AppendBytes(tag(nil, 4, protowire.BytesType), protowire.AppendBytes(tag(put, 1, protowire.BytesType),
				protowire.AppendVarint(tag(hdr, 7, protowire.VarintType), 1))),
			protowire.AppendBytes(tag(nil, 4, protowire.BytesType), protowire.AppendBytes(tag(put, 1, protowire.BytesType), // header twice: merged
				protowire.AppendBytes(tag(hdr, 1, protowire.BytesType), hdr))),
			protowire.AppendBytes(tag(nil, 4, protowire.BytesType), protowire.AppendVarint(tag(put, 2, protowire.VarintType), 0)),     // key as varint
			protowire.AppendVarint(tag(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), put), 1, protowire.VarintType), 1<<40), // id again
			protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 3),                                                              // no request
			protowire.AppendBytes(tag(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), put), 2, protowire.BytesType), nil),     // timeout as bytes
			protowire.AppendBytes(tag(nil, 3, protowire.BytesType), put),                                                              // a get of key k
			protowire.AppendBytes(protowire.AppendBytes(tag(nil, 3, protowire.BytesType), put), // get twice: merged
				protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendBytes(tag(nil, 1, protowire.BytesType), hdr))),
			protowire.AppendBytes(protowire.AppendBytes(tag(nil, 3, protowire.BytesType), put), // get, then put: the put wins
				protowire.AppendBytes(tag(nil, 4, protowire.BytesType), put)),
			protowire.AppendBytes(tag(protowire.AppendBytes(tag(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), // put, get, put: a fresh put wins
				protowire.AppendBytes(tag(put, 3, protowire.BytesType), []byte("v"))), 3, protowire.BytesType), put), 4, protowire.BytesType), put),
			protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendVarint(tag(put, 9, protowire.VarintType), 1)), // unknown field
			protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendBytes(tag(put, 3, protowire.BytesType), nil)), // a value in a get
			protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendVarint(tag(put, 4, protowire.VarintType), 5)), // a TTL in a get
			protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendBytes(tag(put, 1, protowire.BytesType), // header twice: merged
				protowire.AppendBytes(tag(hdr, 1, protowire.BytesType), hdr))),
			protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 0)), // key as varint
		} {
			checkDecodeRequest(t, protowire.AppendBytes(tag(data, 1, protowire.BytesType), call))
		}
		op := protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte("k")) // an op of key k
		for _, batch := range [][]byte{
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), op),
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), protowire.AppendVarint(tag(op, 17, protowire.VarintType), 1)),  // unknown field
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), protowire.AppendVarint(tag(op, 3, protowire.VarintType), 1)),   // value as varint
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), protowire.AppendFixed64(tag(op, 7, protowire.Fixed64Type), 1)), // TTL as fixed64
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), protowire.AppendFixed32(tag(op, 13, protowire.Fixed32Type), 1)),
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), protowire.AppendVarint(tag(protowire.AppendVarint(tag(op, 7, // TTL twice: the last
				protowire.VarintType), 5), 7, protowire.VarintType), 9)),
			protowire.AppendBytes(protowire.AppendBytes(tag(nil, 1, protowire.BytesType), hdr), // header twice: merged
				protowire.AppendBytes(tag(nil, 1, protowire.BytesType), hdr)),
			protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 1), // unknown field of the batch
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{0xff}),
		} {
			call := protowire.AppendBytes(tag(nil, 8, protowire.BytesType), batch)
			checkDecodeRequest(t, protowire.AppendBytes(tag(data, 1, protowire.BytesType), call))
			// a batch, then a put: the put wins
			call = protowire.AppendBytes(tag(call, 4, protowire.BytesType), put)
			checkDecodeRequest(t, protowire.AppendBytes(tag(data, 1, protowire.BytesType), call))
		}
		checkDecodeRequest(t, protowire.AppendVarint(tag(data, 3, protowire.VarintType), 1))
		checkDecodeRequest(t, protowire.AppendVarint(tag(data, 2, protowire.VarintType), 4))
		if len(data) > 0 {
			checkDecodeRequest(t, data[:rng.IntN(len(data))])
		}
	}
	checkDecodeRequest(t, nil)
}

// FuzzDecodeRequest checks decodeRequest against proto.Unmarshal on
// arbitrary frames (go test -fuzz FuzzDecodeRequest ./internal/grpcapi/).
func FuzzDecodeRequest(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		data, _ := proto.Marshal(randomRequest(rng))
		f.Add(data)
	}
	f.Fuzz(checkDecodeRequest)
}

// putFrame is a client wire message of ten puts of 16-byte keys and
// 256-byte values with a session header, as the put benchmark sends them.
func putFrame(tb testing.TB) []byte {
	req := &concordpb.StreamRequest{}
	for i := range 10 {
		req.Calls = append(req.Calls, &concordpb.StreamCall{Id: uint64(i + 1), TimeoutMs: 5000,
			Request: &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{
				Header: &concordpb.RequestHeader{SessionId: 77, Seq: uint64(i)},
				Key:    make([]byte, 16), Value: make([]byte, 256)}}})
	}
	data, err := proto.Marshal(req)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestDecodeRequestAllocations protects the point of the decoder: a
// message of ten puts, or of ten gets, in four allocations (its bytes, the
// request, the calls' blocks, their pointers), proto.Unmarshal's 66; a
// batch in two more, whatever its ops.
func TestDecodeRequestAllocations(t *testing.T) {
	data := putFrame(t)
	if got := testing.AllocsPerRun(100, func() {
		if _, err := decodeRequest(data); err != nil {
			t.Fatal(err)
		}
	}); got != 4 {
		t.Fatalf("%v allocations for ten puts, want 4", got)
	}
	req := &concordpb.StreamRequest{}
	for i := range 10 {
		req.Calls = append(req.Calls, &concordpb.StreamCall{Id: uint64(i + 1), TimeoutMs: 5000,
			Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Key: make([]byte, 16)}}})
	}
	gets, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := testing.AllocsPerRun(100, func() {
		if _, err := decodeRequest(gets); err != nil {
			t.Fatal(err)
		}
	}); got != 4 {
		t.Fatalf("%v allocations for ten gets, want 4", got)
	}
	// A forwarded batch of 100 gets: two more, its ops and their pointers.
	bt := &concordpb.BatchRequest{Header: &concordpb.RequestHeader{Hops: 1}}
	for range 100 {
		bt.Ops = append(bt.Ops, &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: make([]byte, 16)})
	}
	batch, err := proto.Marshal(&concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: 1, Request: &concordpb.StreamCall_Batch{Batch: bt}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := testing.AllocsPerRun(100, func() {
		if _, err := decodeRequest(batch); err != nil {
			t.Fatal(err)
		}
	}); got != 6 {
		t.Fatalf("%v allocations for a batch of 100 gets, want 6", got)
	}
}

// BenchmarkDecodeRequest is the decode of one client wire message of ten
// puts (putFrame) with proto.Unmarshal, as connStream.Recv did before, and
// with decodeRequest.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, frame := range []struct {
		name string
		data []byte
	}{{"puts", putFrame(b)}, {"batch", getBatchFrame(b)}} {
		b.Run(frame.name+"/proto.Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := proto.Unmarshal(frame.data, &concordpb.StreamRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(frame.name+"/decodeRequest", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := decodeRequest(frame.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// getBatchFrame is a forwarded batch of 235 gets of 16-byte keys, as a
// node forwards a Redis port's merged pipelined GETs to their leader.
func getBatchFrame(tb testing.TB) []byte {
	bt := &concordpb.BatchRequest{Header: &concordpb.RequestHeader{Hops: 1}}
	for range 235 {
		bt.Ops = append(bt.Ops, &concordpb.Op{Type: concordpb.OpType_OP_GET, Key: make([]byte, 16)})
	}
	data, err := proto.Marshal(&concordpb.StreamRequest{Calls: []*concordpb.StreamCall{{Id: 1, TimeoutMs: 5000,
		Request: &concordpb.StreamCall_Batch{Batch: bt}}}})
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
