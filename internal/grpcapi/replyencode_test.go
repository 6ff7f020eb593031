package grpcapi

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// randomString is a random string of up to n runes, now and then not
// UTF-8.
func randomString(rng *rand.Rand, n int) string {
	if rng.IntN(10) == 0 {
		return string(randomBytes(rng, n))
	}
	r := make([]rune, rng.IntN(n+1))
	for i := range r {
		r[i] = []rune{'a', '7', ':', 'é', '漢', '🙂'}[rng.IntN(6)]
	}
	return string(r)
}

// randomHeader is nil, empty, or a response header with random fields.
func randomHeader(rng *rand.Rand) *concordpb.ResponseHeader {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return &concordpb.ResponseHeader{}
	}
	return &concordpb.ResponseHeader{ShardId: rng.Uint64() >> rng.IntN(64), ServedByNodeId: rng.Uint64N(4),
		LeaderNodeId: rng.Uint64N(4), LeaderAddress: randomString(rng, 30), Tentative: rng.IntN(2) == 0}
}

// withUnknown gives m an unknown field, now and then.
func withUnknown[M proto.Message](rng *rand.Rand, m M) M {
	if rng.IntN(12) == 0 {
		m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	}
	return m
}

// randomReply is a reply of every kind the hand encoder takes (gets, puts,
// errors, pongs, batches, with every field set or not, extreme values included) and
// a few it leaves to proto.
func randomReply(rng *rand.Rand) *concordpb.StreamReply {
	r := &concordpb.StreamReply{Id: rng.Uint64() >> rng.IntN(64)}
	hdr := func() *concordpb.ResponseHeader {
		if h := randomHeader(rng); h != nil {
			return withUnknown(rng, h)
		}
		return nil
	}
	switch rng.IntN(10) {
	case 8, 9:
		bt := &concordpb.BatchResponse{Header: hdr()}
		for range rng.IntN(6) {
			bt.Results = append(bt.Results, withUnknown(rng, &concordpb.OpResult{Ok: rng.IntN(2) == 0,
				Value: randomBytes(rng, 300), Exists: rng.IntN(2) == 0, IntValue: int64(rng.Uint64()) >> rng.IntN(64),
				ExpireAtUnixMs: int64(rng.Uint64()) >> rng.IntN(64), Error: concordpb.OpError(rng.Int32N(7) - 1),
				Skipped: rng.IntN(2) == 0, RepeatApplied: rng.Uint32() >> rng.IntN(33)}))
		}
		r.Response = &concordpb.StreamReply_Batch{Batch: withUnknown(rng, bt)}
	case 0:
		r.Code, r.Message = rng.Uint32N(17), randomString(rng, 40)
	case 1, 2:
		r.Response = &concordpb.StreamReply_Get{Get: withUnknown(rng, &concordpb.GetResponse{Header: hdr(),
			Found: rng.IntN(2) == 0, Value: randomBytes(rng, 300), ExpireAtUnixMs: int64(rng.Uint64()) >> rng.IntN(64)})}
	case 3, 4:
		r.Response = &concordpb.StreamReply_Put{Put: withUnknown(rng, &concordpb.PutResponse{Header: hdr(),
			PrevExists: rng.IntN(2) == 0, PrevValue: randomBytes(rng, 30)})}
	case 5:
		r.Response = &concordpb.StreamReply_Pong{Pong: withUnknown(rng, &concordpb.KeepalivePing{})}
	case 6:
		r.Response = &concordpb.StreamReply_Delete{Delete: &concordpb.DeleteResponse{Header: hdr(), Existed: true}}
	case 7:
		r.Response = &concordpb.StreamReply_Scan{Scan: &concordpb.ScanResponse{Header: hdr(),
			Kvs: []*concordpb.KeyValue{{Key: randomBytes(rng, 5), Value: randomBytes(rng, 5)}}}}
	}
	return withUnknown(rng, r)
}

// TestAppendResponseMatchesProto protects the reply encoder of the client
// wire: for random responses (every reply kind, every field set or not,
// unknown fields at every level, which only proto keeps, strings that are
// not UTF-8, which proto refuses) it writes exactly proto.Marshal's bytes,
// after whatever the buffer held, or fails as proto does. It fails if the
// encoder drops, reorders or misencodes a field, or encodes by hand a
// reply whose unknown fields it would lose.
func TestAppendResponseMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 5000 {
		resp := &concordpb.StreamResponse{}
		for range rng.IntN(6) {
			resp.Replies = append(resp.Replies, randomReply(rng))
		}
		want, werr := proto.Marshal(resp)
		prefix := randomBytes(rng, 8)
		got, err := appendResponse(append([]byte(nil), prefix...), resp)
		if (werr != nil) != (err != nil) {
			t.Fatalf("%v: proto error %v, encoder error %v", resp, werr, err)
		}
		if werr != nil {
			continue // a string that is not UTF-8: refused by both
		}
		if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("%v:\n got  % x\n want % x", resp, got[len(prefix):], want)
		}
	}
}

// TestAppendResponseAllocations protects the point of the encoder: a
// message of replies to gets and puts (with leader addresses), errors and
// a batch is encoded without allocating.
func TestAppendResponseAllocations(t *testing.T) {
	resp := &concordpb.StreamResponse{}
	for i := range 10 {
		h := &concordpb.ResponseHeader{ShardId: 3, ServedByNodeId: 1, LeaderNodeId: 2, LeaderAddress: "127.0.0.1:7001"}
		resp.Replies = append(resp.Replies,
			&concordpb.StreamReply{Id: uint64(i), Response: &concordpb.StreamReply_Get{Get: &concordpb.GetResponse{Header: h, Found: true, Value: make([]byte, 256)}}},
			&concordpb.StreamReply{Id: uint64(i), Response: &concordpb.StreamReply_Put{Put: &concordpb.PutResponse{Header: h}}},
			&concordpb.StreamReply{Id: uint64(i), Code: 14, Message: "not the leader of shard 3"})
	}
	bt := &concordpb.BatchResponse{Header: &concordpb.ResponseHeader{ShardId: 3, ServedByNodeId: 1}}
	for range 100 {
		bt.Results = append(bt.Results, &concordpb.OpResult{Ok: true, Exists: true, Value: make([]byte, 256)})
	}
	resp.Replies = append(resp.Replies, &concordpb.StreamReply{Id: 99, Response: &concordpb.StreamReply_Batch{Batch: bt}})
	buf := make([]byte, 0, 1<<16)
	if got := testing.AllocsPerRun(100, func() {
		if _, err := appendResponse(buf[:0], resp); err != nil {
			t.Fatal(err)
		}
	}); got != 0 {
		t.Fatalf("%v allocations for 30 replies and a batch of 100 results, want 0", got)
	}
}
