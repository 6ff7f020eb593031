package client

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// randBytes is nil, empty or n random bytes.
func randBytes(rng *rand.Rand) []byte {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rng.IntN(300))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randUint is 0, small, or any uint64.
func randUint(rng *rand.Rand) uint64 {
	switch rng.IntN(3) {
	case 0:
		return 0
	case 1:
		return uint64(rng.IntN(300))
	}
	return rng.Uint64()
}

func randRequestHeader(rng *rand.Rand) *concordpb.RequestHeader {
	if rng.IntN(4) == 0 {
		return nil
	}
	return &concordpb.RequestHeader{SessionId: randUint(rng), Seq: randUint(rng),
		Consistency: concordpb.Consistency(rng.IntN(2)), Hops: uint32(randUint(rng)), SessionFloor: randUint(rng)}
}

// randCall is a put, a get, another kind of call, or a call of a put or
// get oneof holding nil.
func randCall(rng *rand.Rand) *concordpb.StreamCall {
	c := &concordpb.StreamCall{Id: randUint(rng), TimeoutMs: uint32(randUint(rng))}
	switch rng.IntN(8) {
	case 6, 7:
		bt := &concordpb.BatchRequest{Header: randRequestHeader(rng)}
		for range rng.IntN(5) {
			bt.Ops = append(bt.Ops, randOp(rng))
		}
		if rng.IntN(8) == 0 && len(bt.Ops) > 0 { // relayed from a newer client: proto keeps it
			bt.Ops[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
		}
		c.Request = &concordpb.StreamCall_Batch{Batch: bt}
	case 0, 1:
		c.Request = &concordpb.StreamCall_Put{Put: &concordpb.PutRequest{Header: randRequestHeader(rng), Key: randBytes(rng),
			Value: randBytes(rng), TtlMs: int64(randUint(rng)) - int64(rng.IntN(2)), ReturnPrev: rng.IntN(2) == 0}}
	case 2, 3:
		c.Request = &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Header: randRequestHeader(rng), Key: randBytes(rng)}}
	case 4:
		c.Request = &concordpb.StreamCall_Delete{Delete: &concordpb.DeleteRequest{Header: randRequestHeader(rng), Key: randBytes(rng)}}
	default:
		c.Request = &concordpb.StreamCall_Ping{Ping: &concordpb.KeepalivePing{}}
	}
	return c
}

// randOp is an op with each field set or not, negative and unknown enum
// values and -0 included.
func randOp(rng *rand.Rand) *concordpb.Op {
	o := &concordpb.Op{Key: randBytes(rng), Value: randBytes(rng), Expected: randBytes(rng)}
	maybe := func() bool { return rng.IntN(2) == 0 }
	if maybe() {
		o.Type = concordpb.OpType(rng.Int32N(24) - 2)
	}
	o.ExpectAbsent, o.Delete, o.KeepTtl, o.Persist, o.ReturnPrev = maybe(), maybe(), maybe(), maybe(), maybe()
	o.TtlMs, o.ExpireAtUnixMs = int64(randUint(rng))-int64(rng.IntN(2)), int64(randUint(rng))
	if maybe() {
		o.Condition = concordpb.Condition(rng.Int32N(6) - 1)
	}
	o.IntDelta, o.Offset, o.Skip = int64(randUint(rng))-int64(rng.IntN(3)), -int64(randUint(rng)), uint32(randUint(rng))
	o.Repeat = uint32(randUint(rng))
	if maybe() {
		o.FloatDelta = []float64{math.Copysign(0, -1), 2.5, -1e300, math.Inf(-1), math.NaN()}[rng.IntN(5)]
	}
	if maybe() {
		o.FloatDeltaText = randBytes(rng)
	}
	if maybe() {
		o.TentativeVersion = randUint(rng)
	}
	return o
}

// TestAppendRequestMatchesProto: the hand encoder writes proto.Marshal's
// bytes, and callSize is proto.Size, for puts, gets and the calls it
// leaves to proto.
func TestAppendRequestMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		req := &concordpb.StreamRequest{FromNodeId: randUint(rng), ClusterId: randUint(rng)}
		for range rng.IntN(4) {
			req.Calls = append(req.Calls, randCall(rng))
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendRequest([]byte("head"), req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[4:], want) {
			t.Fatalf("request %d: %v\nhand  %x\nproto %x", i, req, got[4:], want)
		}
		for _, c := range req.GetCalls() {
			if callSize(c) != proto.Size(c) {
				t.Fatalf("callSize %d, proto.Size %d of %v", callSize(c), proto.Size(c), c)
			}
		}
	}
}

func randResponseHeader(rng *rand.Rand) *concordpb.ResponseHeader {
	if rng.IntN(4) == 0 {
		return nil
	}
	addrs := []string{"", "127.0.0.1:7001", "127.0.0.1:7002", "[::1]:7003"}
	return &concordpb.ResponseHeader{ShardId: randUint(rng), ServedByNodeId: randUint(rng),
		LeaderNodeId: randUint(rng), LeaderAddress: addrs[rng.IntN(len(addrs))]}
}

func randReply(rng *rand.Rand) *concordpb.StreamReply {
	r := &concordpb.StreamReply{Id: randUint(rng)}
	if rng.IntN(5) == 0 {
		r.Code, r.Message = uint32(1+rng.IntN(16)), "concord: not the leader"
	}
	switch rng.IntN(7) {
	case 0, 1:
		r.Response = &concordpb.StreamReply_Put{Put: &concordpb.PutResponse{Header: randResponseHeader(rng),
			PrevExists: rng.IntN(2) == 0, PrevValue: randBytes(rng)}}
	case 2, 3:
		r.Response = &concordpb.StreamReply_Get{Get: &concordpb.GetResponse{Header: randResponseHeader(rng),
			Found: rng.IntN(2) == 0, Value: randBytes(rng), ExpireAtUnixMs: int64(randUint(rng))}}
	case 4:
		r.Response = &concordpb.StreamReply_Pong{Pong: &concordpb.KeepalivePing{}}
	case 5:
		bt := &concordpb.BatchResponse{Header: randResponseHeader(rng)}
		for range rng.IntN(5) {
			bt.Results = append(bt.Results, &concordpb.OpResult{Ok: rng.IntN(2) == 0, Value: randBytes(rng),
				Exists: rng.IntN(2) == 0, IntValue: int64(randUint(rng)) - int64(rng.IntN(3)), ExpireAtUnixMs: int64(randUint(rng)),
				Error: concordpb.OpError(rng.Int32N(8) - 1), Skipped: rng.IntN(2) == 0, RepeatApplied: uint32(rng.IntN(3))})
		}
		r.Response = &concordpb.StreamReply_Batch{Batch: bt}
	}
	return r
}

// TestDecodeResponseMatchesProto: decodeResponse gives what proto.Unmarshal
// gives, for well-formed responses (the fast path or proto's) and for the
// cases it must leave to proto: a field given twice, an unknown field, a
// truncated message, a string that is not UTF-8.
func TestDecodeResponseMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var addrs addrCache
	check := func(i int, data []byte) {
		t.Helper()
		want := &concordpb.StreamResponse{}
		werr := proto.Unmarshal(data, want)
		buf := append([]byte(nil), data...)
		got, gerr := decodeResponse(buf, &addrs)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("case %d: proto error %v, decodeResponse error %v", i, werr, gerr)
		}
		if werr != nil {
			return
		}
		for j := range buf { // nothing decoded may alias the caller's buffer
			buf[j] = 0xff
		}
		if !proto.Equal(got, want) {
			t.Fatalf("case %d:\ngot  %v\nwant %v", i, got, want)
		}
	}
	for i := range 3000 {
		resp := &concordpb.StreamResponse{}
		for range rng.IntN(4) {
			resp.Replies = append(resp.Replies, randReply(rng))
		}
		data, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		check(i, data)
		if len(data) == 0 {
			continue
		}
		// Damaged and doubled forms: proto decides.
		check(i, data[:rng.IntN(len(data))])
		check(i, append(append([]byte(nil), data...), data...))
		unknown := protowire.AppendTag(append([]byte(nil), data...), 7, protowire.VarintType)
		check(i, protowire.AppendVarint(unknown, 1))
		bad := append([]byte(nil), data...)
		bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		check(i, bad)
	}
	// A leader address that is not UTF-8 fails as proto fails it.
	h, _ := proto.Marshal(&concordpb.ResponseHeader{ShardId: 1})
	h = protowire.AppendTag(h, fRHAddress, protowire.BytesType)
	h = protowire.AppendBytes(h, []byte{0xff, 0xfe})
	put := protowire.AppendBytes(protowire.AppendTag(nil, fRespHeader, protowire.BytesType), h)
	reply := protowire.AppendBytes(protowire.AppendTag(nil, fReplyPut, protowire.BytesType), put)
	check(-1, protowire.AppendBytes(protowire.AppendTag(nil, fStreamResponseReplies, protowire.BytesType), reply))
}

// TestAddrCacheInterns: a leader address seen before is the same string,
// not a new one.
func TestAddrCacheInterns(t *testing.T) {
	var c addrCache
	a := c.intern([]byte("127.0.0.1:7001"))
	b := c.intern([]byte("127.0.0.1:7001"))
	if a != "127.0.0.1:7001" || b != a {
		t.Fatalf("intern gave %q, %q", a, b)
	}
	if n := testing.AllocsPerRun(100, func() { c.intern([]byte("127.0.0.1:7001")) }); n != 0 {
		t.Fatalf("interning a known address allocated %v times", n)
	}
	if got := c.intern([]byte("127.0.0.1:7002")); got != "127.0.0.1:7002" {
		t.Fatalf("intern gave %q", got)
	}
}

// TestDecodeBatchResponseAllocations: the answer to a forwarded batch of
// 100 gets decodes in four allocations (the reply's block, the results,
// their pointers, one buffer for every value), proto.Unmarshal's ~200.
func TestDecodeBatchResponseAllocations(t *testing.T) {
	bt := &concordpb.BatchResponse{Header: &concordpb.ResponseHeader{ShardId: 3, ServedByNodeId: 1, LeaderAddress: "127.0.0.1:7001"}}
	for range 100 {
		bt.Results = append(bt.Results, &concordpb.OpResult{Ok: true, Exists: true, Value: make([]byte, 256)})
	}
	data, err := proto.Marshal(&concordpb.StreamResponse{Replies: []*concordpb.StreamReply{{Id: 7, Response: &concordpb.StreamReply_Batch{Batch: bt}}}})
	if err != nil {
		t.Fatal(err)
	}
	var addrs addrCache
	if n := testing.AllocsPerRun(100, func() {
		if _, err := decodeResponse(data, &addrs); err != nil {
			t.Fatal(err)
		}
	}); n != 4 {
		t.Fatalf("%v allocations for a batch of 100 results, want 4", n)
	}
}
