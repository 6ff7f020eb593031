package grpcapi

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/pbcount"
	"github.com/concord-kv/concord/internal/storepb"
)

// decodeRequest decodes a framed client connection's StreamRequest, as
// proto.Unmarshal does into a fresh message. A message of puts and gets
// (the write and read loads) takes four allocations: its bytes, the
// request, one block holding every call's StreamCall, oneof wrapper,
// request and header, and the call pointers, instead of proto's six or so
// per call (proto.Unmarshal was 5 % of a get's server CPU). The keys and
// values alias the one copy of data, which the caller may therefore reuse
// (the frame reader's buffer). Anything else (another kind of call, a
// field it does not know, a message field given twice, which proto would
// merge, bytes that do not parse) goes to proto.Unmarshal, so the result
// is always what proto.Unmarshal gives (TestDecodeRequestMatchesProto,
// FuzzDecodeRequest).
//
// A message of more than frame.MaxStreamCalls calls and batch ops, or one
// that does not parse down to its batches' ops, is refused before either
// decoder allocates anything for it: each call or op decodes into a few
// hundred bytes (this decoder's blocks, or proto's messages) however few
// bytes it takes on the wire.
func decodeRequest(data []byte) (*concordpb.StreamRequest, error) {
	calls, ok := countCalls(data)
	if !ok {
		return nil, errors.New("bad frame: not a StreamRequest")
	}
	if calls < 0 {
		return nil, fmt.Errorf("bad frame: more than %d calls and batch ops in one message", frame.MaxStreamCalls)
	}
	if req, ok := decodeCalls(data, calls); ok {
		return req, nil
	}
	req := &concordpb.StreamRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		return nil, fmt.Errorf("bad frame: %w", err)
	}
	return req, nil
}

// fastCall holds a put, get or batch call and everything it points to but
// a batch's ops (their own array). The calls of a message share one array
// of them, and its bytes: they stay in memory until the last of the
// message's calls is done with.
type fastCall struct {
	call   concordpb.StreamCall
	wput   concordpb.StreamCall_Put
	wget   concordpb.StreamCall_Get
	wbatch concordpb.StreamCall_Batch
	put    concordpb.PutRequest
	get    concordpb.GetRequest
	batch  concordpb.BatchRequest
	hdr    concordpb.RequestHeader
}

// decodeCalls decodes a request whose calls are all puts, gets and
// batches (a batch's ops in one more block: what a node forwards to a
// shard's leader, merged); false otherwise. n is its calls (countCalls).
func decodeCalls(data []byte, n int) (*concordpb.StreamRequest, bool) {
	data = append([]byte(nil), data...) // the calls outlive the caller's buffer
	req := &concordpb.StreamRequest{}
	var blocks []fastCall
	if n > 0 {
		blocks = make([]fastCall, n)
		req.Calls = make([]*concordpb.StreamCall, 0, n)
	}
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return nil, false
		}
		data = data[l:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return nil, false
			}
			data = data[l:]
			b := &blocks[len(req.Calls)]
			if !b.decode(v) {
				return nil, false
			}
			req.Calls = append(req.Calls, &b.call)
		case num == 2 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 {
				return nil, false
			}
			req.FromNodeId, data = v, data[l:]
		case num == 3 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 {
				return nil, false
			}
			req.ClusterId, data = v, data[l:]
		default:
			return nil, false
		}
	}
	return req, true
}

// decode decodes a StreamCall that must carry a put, a get or a batch;
// false for anything else.
func (b *fastCall) decode(data []byte) bool {
	seen := false
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch {
		case (num == 3 || num == 4 || num == 8) && typ == protowire.BytesType && !seen:
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return false
			}
			switch num {
			case 8:
				seen = b.decodeBatch(v)
				b.wbatch.Batch = &b.batch
				b.call.Request = &b.wbatch
			case 4:
				seen = b.decodePut(v)
				b.wput.Put = &b.put
				b.call.Request = &b.wput
			default:
				seen = b.decodeGet(v)
				b.wget.Get = &b.get
				b.call.Request = &b.wget
			}
			if !seen {
				return false
			}
			data = data[l:]
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 {
				return false
			}
			data = data[l:]
			if num == 1 {
				b.call.Id = v
			} else {
				b.call.TimeoutMs = uint32(v) // as proto: the low 32 bits
			}
		default:
			return false
		}
	}
	return seen
}

// decodeGet decodes a GetRequest into b.get.
func (b *fastCall) decodeGet(data []byte) bool { return b.decodeFields(data, false) }

// decodePut decodes a PutRequest into b.put.
func (b *fastCall) decodePut(data []byte) bool { return b.decodeFields(data, true) }

// decodeFields decodes a PutRequest (put) or a GetRequest into b: both
// have a header (1) and a key (2); a put also a value (3), a TTL (4) and
// return_prev (5).
func (b *fastCall) decodeFields(data []byte, put bool) bool {
	header, key := &b.get.Header, &b.get.Key
	if put {
		header, key = &b.put.Header, &b.put.Key
	}
	seen := false
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		if typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return false
			}
			data = data[l:]
			switch {
			case num == 1 && !seen:
				if !decodeHeader(&b.hdr, v) {
					return false
				}
				*header, seen = &b.hdr, true
			case num == 2:
				*key = bytesField(v)
			case num == 3 && put:
				b.put.Value = bytesField(v)
			default:
				return false
			}
			continue
		}
		if typ != protowire.VarintType || !put {
			return false
		}
		v, l := protowire.ConsumeVarint(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch num {
		case 4:
			b.put.TtlMs = int64(v)
		case 5:
			b.put.ReturnPrev = protowire.DecodeBool(v)
		default:
			return false
		}
	}
	return true
}

// decodeBatch decodes a BatchRequest into b.batch: a header (1) and ops
// (2), every op in one array, decoded as a raft command's ops are
// (storepb.DecodeOp). An op it refuses (an unknown field, a wrong wire
// type) sends the whole request to proto.
func (b *fastCall) decodeBatch(data []byte) bool {
	n, ok := pbcount.Count(data, 2)
	if !ok {
		return false
	}
	var ops []concordpb.Op
	if n > 0 {
		ops = make([]concordpb.Op, n)
		b.batch.Ops = make([]*concordpb.Op, 0, n)
	}
	seen := false
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 || typ != protowire.BytesType {
			return false
		}
		data = data[l:]
		v, l := protowire.ConsumeBytes(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch {
		case num == 1 && !seen:
			if !decodeHeader(&b.hdr, v) {
				return false
			}
			b.batch.Header, seen = &b.hdr, true
		case num == 2:
			o := &ops[len(b.batch.Ops)]
			if !storepb.DecodeOp(o, v) {
				return false
			}
			b.batch.Ops = append(b.batch.Ops, o)
		default:
			return false
		}
	}
	return true
}

// countCalls counts a StreamRequest's calls; -1 when they and their
// batches' ops are more than frame.MaxStreamCalls. False if the message,
// a call or a batch does not parse (proto.Unmarshal would refuse it too).
func countCalls(data []byte) (int, bool) {
	calls, elems := 0, 0
	f := pbcount.Walk(data)
	for f.Next() {
		call, ok := f.Bytes(1)
		if !ok {
			continue
		}
		ops, ok := countBatchOps(call)
		if !ok {
			return 0, false
		}
		calls++
		elems += 1 + ops
	}
	if !f.OK() {
		return 0, false
	}
	if elems > frame.MaxStreamCalls {
		return -1, true
	}
	return calls, true
}

// countBatchOps counts the ops of a StreamCall's batches (the field
// given more than once, proto merges them); false if it does not parse.
func countBatchOps(call []byte) (int, bool) {
	ops := 0
	f := pbcount.Walk(call)
	for f.Next() {
		batch, ok := f.Bytes(8)
		if !ok {
			continue
		}
		n, ok := pbcount.Count(batch, 2)
		if !ok {
			return 0, false
		}
		ops += n
	}
	if !f.OK() {
		return 0, false
	}
	return ops, true
}

// decodeHeader decodes a RequestHeader into h.
func decodeHeader(h *concordpb.RequestHeader, data []byte) bool {
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 || typ != protowire.VarintType {
			return false
		}
		data = data[l:]
		v, l := protowire.ConsumeVarint(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch num {
		case 1:
			h.SessionId = v
		case 2:
			h.Seq = v
		case 3:
			c := concordpb.Consistency(int32(v))
			h.Consistency = c // proto3 enums are open: any value is kept
		case 4:
			h.Hops = uint32(v)
		case 5:
			h.SessionFloor = v
		default:
			return false
		}
	}
	return true
}

// bytesField is a proto3 bytes field's value as proto.Unmarshal sets it:
// nil when empty, capped so an append copies.
func bytesField(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}
