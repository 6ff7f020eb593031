package client

import (
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// The framed wire's messages, encoded and decoded by hand for the calls
// that make the load (puts and gets; batches too when encoded: what a node
// forwards to a leader, merged), the others through proto. The bytes
// written are proto.Marshal's (TestAppendRequestMatchesProto), and a
// decoded response is what proto.Unmarshal gives
// (TestDecodeResponseMatchesProto): proto's generic code, its sizes
// computed apart from the marshalling, and its allocations per reply were
// a fifth of a loaded client's CPU (docs/benchmarks.md, "A leaner load
// generator and Go client").

// Field numbers of the messages encoded or decoded here (api/concordpb/kv.proto).
const (
	fStreamRequestCalls    = 1
	fStreamRequestFromNode = 2
	fStreamRequestCluster  = 3

	fCallID      = 1
	fCallTimeout = 2
	fCallGet     = 3
	fCallPut     = 4
	fCallBatch   = 8

	fHeaderSession     = 1
	fHeaderSeq         = 2
	fHeaderConsistency = 3
	fHeaderHops        = 4
	fHeaderFloor       = 5

	fReqHeader     = 1 // GetRequest, PutRequest
	fReqKey        = 2
	fPutValue      = 3
	fPutTTL        = 4
	fPutReturnPrev = 5
	fBatchOps      = 2

	fOpType         = 1
	fOpKey          = 2
	fOpValue        = 3
	fOpExpected     = 4
	fOpExpectAbsent = 5
	fOpDelete       = 6
	fOpTTL          = 7
	fOpExpireAt     = 8
	fOpKeepTTL      = 9
	fOpPersist      = 10
	fOpCondition    = 11
	fOpIntDelta     = 12
	fOpFloatDelta   = 13
	fOpOffset       = 14
	fOpSkip         = 15
	fOpReturnPrev   = 16
	fOpRepeat       = 17
	fOpFloatText    = 18
	fOpTentative    = 19

	fStreamResponseReplies = 1

	fReplyID      = 1
	fReplyCode    = 2
	fReplyMessage = 3
	fReplyGet     = 4
	fReplyPut     = 5
	fReplyBatch   = 9

	fRespHeader = 1 // GetResponse, PutResponse
	fGetFound   = 2 // PutResponse's prev_exists
	fGetValue   = 3 // PutResponse's prev_value
	fGetExpire  = 4

	fBatchResults = 2 // BatchResponse (its header is 1)

	fResOk       = 1
	fResValue    = 2
	fResExists   = 3
	fResInt      = 4
	fResExpireAt = 5
	fResError    = 6
	fResSkipped  = 7
	fResRepeat   = 8

	fRHShard    = 1
	fRHServedBy = 2
	fRHLeader   = 3
	fRHAddress  = 4
	// fRHTentative: an available write held by the node (available mode).
	fRHTentative = 5
)

// appendRequest appends req's encoding (no frame header).
func appendRequest(b []byte, req *concordpb.StreamRequest) ([]byte, error) {
	for _, c := range req.GetCalls() {
		var err error
		b = protowire.AppendTag(b, fStreamRequestCalls, protowire.BytesType)
		if b, err = appendCall(b, c); err != nil {
			return b, err
		}
	}
	b = appendVarintField(b, fStreamRequestFromNode, req.GetFromNodeId())
	return appendVarintField(b, fStreamRequestCluster, req.GetClusterId()), nil
}

// appendCall appends c's length and encoding.
func appendCall(b []byte, c *concordpb.StreamCall) ([]byte, error) {
	switch r := c.GetRequest().(type) {
	case *concordpb.StreamCall_Put:
		if r.Put == nil {
			break
		}
		b = protowire.AppendVarint(b, uint64(callSize(c)))
		b = appendCallHead(b, c)
		b = protowire.AppendTag(b, fCallPut, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(putSize(r.Put)))
		return appendPut(b, r.Put), nil
	case *concordpb.StreamCall_Get:
		if r.Get == nil {
			break
		}
		b = protowire.AppendVarint(b, uint64(callSize(c)))
		b = appendCallHead(b, c)
		b = protowire.AppendTag(b, fCallGet, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(getSize(r.Get)))
		return appendGet(b, r.Get), nil
	case *concordpb.StreamCall_Batch:
		if !plainBatch(r.Batch) {
			break
		}
		n := batchSize(r.Batch) // once: it sizes every op
		b = protowire.AppendVarint(b, uint64(callHeadSize(c)+messageFieldSize(fCallBatch, n)))
		b = appendCallHead(b, c)
		b = protowire.AppendTag(b, fCallBatch, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		return appendBatch(b, r.Batch), nil
	}
	b = protowire.AppendVarint(b, uint64(proto.Size(c)))
	return proto.MarshalOptions{}.MarshalAppend(b, c)
}

// callSize is the size of c's encoding.
func callSize(c *concordpb.StreamCall) int {
	head := callHeadSize(c)
	switch r := c.GetRequest().(type) {
	case *concordpb.StreamCall_Put:
		if r.Put != nil {
			return head + messageFieldSize(fCallPut, putSize(r.Put))
		}
	case *concordpb.StreamCall_Get:
		if r.Get != nil {
			return head + messageFieldSize(fCallGet, getSize(r.Get))
		}
	case *concordpb.StreamCall_Batch:
		if plainBatch(r.Batch) {
			return head + messageFieldSize(fCallBatch, batchSize(r.Batch))
		}
	}
	return proto.Size(c)
}

// callHeadSize is the size of c's id and timeout.
func callHeadSize(c *concordpb.StreamCall) int {
	return varintFieldSize(fCallID, c.GetId()) + varintFieldSize(fCallTimeout, uint64(c.GetTimeoutMs()))
}

func appendCallHead(b []byte, c *concordpb.StreamCall) []byte {
	b = appendVarintField(b, fCallID, c.GetId())
	return appendVarintField(b, fCallTimeout, uint64(c.GetTimeoutMs()))
}

func putSize(p *concordpb.PutRequest) int {
	n := headerSize(p.GetHeader()) + bytesFieldSize(fReqKey, p.GetKey()) + bytesFieldSize(fPutValue, p.GetValue()) +
		varintFieldSize(fPutTTL, uint64(p.GetTtlMs()))
	if p.GetReturnPrev() {
		n += protowire.SizeTag(fPutReturnPrev) + 1
	}
	return n
}

func appendPut(b []byte, p *concordpb.PutRequest) []byte {
	b = appendHeader(b, p.GetHeader())
	b = appendBytesField(b, fReqKey, p.GetKey())
	b = appendBytesField(b, fPutValue, p.GetValue())
	b = appendVarintField(b, fPutTTL, uint64(p.GetTtlMs()))
	if p.GetReturnPrev() {
		b = appendVarintField(b, fPutReturnPrev, 1)
	}
	return b
}

func getSize(g *concordpb.GetRequest) int {
	return headerSize(g.GetHeader()) + bytesFieldSize(fReqKey, g.GetKey())
}

func appendGet(b []byte, g *concordpb.GetRequest) []byte {
	b = appendHeader(b, g.GetHeader())
	return appendBytesField(b, fReqKey, g.GetKey())
}

// plainBatch reports whether the batch's encoding may be written here: it
// is not nil and neither it, its header nor an op holds unknown fields
// (an op relayed from a newer client keeps them through proto).
func plainBatch(bt *concordpb.BatchRequest) bool {
	if bt == nil || len(bt.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	if h := bt.GetHeader(); h != nil && len(h.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, o := range bt.GetOps() {
		if o == nil || len(o.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

func batchSize(bt *concordpb.BatchRequest) int {
	n := headerSize(bt.GetHeader())
	for _, o := range bt.GetOps() {
		n += messageFieldSize(fBatchOps, opSize(o))
	}
	return n
}

func appendBatch(b []byte, bt *concordpb.BatchRequest) []byte {
	b = appendHeader(b, bt.GetHeader())
	for _, o := range bt.GetOps() {
		b = protowire.AppendTag(b, fBatchOps, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(opSize(o)))
		b = appendOp(b, o)
	}
	return b
}

// opSize is the size of o's encoding, in field order as appendOp writes it.
func opSize(o *concordpb.Op) int {
	return varintFieldSize(fOpType, uint64(o.GetType())) + bytesFieldSize(fOpKey, o.GetKey()) +
		bytesFieldSize(fOpValue, o.GetValue()) + bytesFieldSize(fOpExpected, o.GetExpected()) +
		boolFieldSize(fOpExpectAbsent, o.GetExpectAbsent()) + boolFieldSize(fOpDelete, o.GetDelete()) +
		varintFieldSize(fOpTTL, uint64(o.GetTtlMs())) + varintFieldSize(fOpExpireAt, uint64(o.GetExpireAtUnixMs())) +
		boolFieldSize(fOpKeepTTL, o.GetKeepTtl()) + boolFieldSize(fOpPersist, o.GetPersist()) +
		varintFieldSize(fOpCondition, uint64(o.GetCondition())) + varintFieldSize(fOpIntDelta, uint64(o.GetIntDelta())) +
		doubleFieldSize(fOpFloatDelta, o.GetFloatDelta()) + varintFieldSize(fOpOffset, uint64(o.GetOffset())) +
		varintFieldSize(fOpSkip, uint64(o.GetSkip())) + boolFieldSize(fOpReturnPrev, o.GetReturnPrev()) +
		varintFieldSize(fOpRepeat, uint64(o.GetRepeat())) + bytesFieldSize(fOpFloatText, o.GetFloatDeltaText()) +
		varintFieldSize(fOpTentative, o.GetTentativeVersion())
}

func appendOp(b []byte, o *concordpb.Op) []byte {
	b = appendVarintField(b, fOpType, uint64(o.GetType()))
	b = appendBytesField(b, fOpKey, o.GetKey())
	b = appendBytesField(b, fOpValue, o.GetValue())
	b = appendBytesField(b, fOpExpected, o.GetExpected())
	b = appendBoolField(b, fOpExpectAbsent, o.GetExpectAbsent())
	b = appendBoolField(b, fOpDelete, o.GetDelete())
	b = appendVarintField(b, fOpTTL, uint64(o.GetTtlMs()))
	b = appendVarintField(b, fOpExpireAt, uint64(o.GetExpireAtUnixMs()))
	b = appendBoolField(b, fOpKeepTTL, o.GetKeepTtl())
	b = appendBoolField(b, fOpPersist, o.GetPersist())
	b = appendVarintField(b, fOpCondition, uint64(o.GetCondition()))
	b = appendVarintField(b, fOpIntDelta, uint64(o.GetIntDelta()))
	b = appendDoubleField(b, fOpFloatDelta, o.GetFloatDelta())
	b = appendVarintField(b, fOpOffset, uint64(o.GetOffset()))
	b = appendVarintField(b, fOpSkip, uint64(o.GetSkip()))
	b = appendBoolField(b, fOpReturnPrev, o.GetReturnPrev())
	b = appendVarintField(b, fOpRepeat, uint64(o.GetRepeat()))
	b = appendBytesField(b, fOpFloatText, o.GetFloatDeltaText())
	// A node's reconciling op (available mode), forwarded on the peer
	// wire: dropped, it applied as a plain put over newer writes.
	return appendVarintField(b, fOpTentative, o.GetTentativeVersion())
}

// headerSize is the size of h as a request's field 1, none if nil.
func headerSize(h *concordpb.RequestHeader) int {
	if h == nil {
		return 0
	}
	return messageFieldSize(fReqHeader, headerBodySize(h))
}

func headerBodySize(h *concordpb.RequestHeader) int {
	return varintFieldSize(fHeaderSession, h.GetSessionId()) + varintFieldSize(fHeaderSeq, h.GetSeq()) +
		varintFieldSize(fHeaderConsistency, uint64(h.GetConsistency())) + varintFieldSize(fHeaderHops, uint64(h.GetHops())) +
		varintFieldSize(fHeaderFloor, h.GetSessionFloor())
}

func appendHeader(b []byte, h *concordpb.RequestHeader) []byte {
	if h == nil {
		return b
	}
	b = protowire.AppendTag(b, fReqHeader, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(headerBodySize(h)))
	b = appendVarintField(b, fHeaderSession, h.GetSessionId())
	b = appendVarintField(b, fHeaderSeq, h.GetSeq())
	b = appendVarintField(b, fHeaderConsistency, uint64(h.GetConsistency()))
	b = appendVarintField(b, fHeaderHops, uint64(h.GetHops()))
	return appendVarintField(b, fHeaderFloor, h.GetSessionFloor())
}

// The fields below are proto3's: a zero value is left out.

func varintFieldSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func boolFieldSize(num protowire.Number, v bool) int {
	if !v {
		return 0
	}
	return protowire.SizeTag(num) + 1
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), 1)
}

// A double is left out only when it is +0 (proto writes -0 and NaN).
func doubleFieldSize(num protowire.Number, v float64) int {
	if math.Float64bits(v) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + 8
}

func appendDoubleField(b []byte, num protowire.Number, v float64) []byte {
	if math.Float64bits(v) == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), math.Float64bits(v))
}

func bytesFieldSize(num protowire.Number, v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// messageFieldSize is the size of a message field (always written, empty
// or not) whose message takes n bytes.
func messageFieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// decodeResponse decodes a StreamResponse as proto.Unmarshal does into a
// fresh message. A response whose replies are all gets, puts and batches
// (with at most an error code and message) takes three allocations (one
// for a lone reply): the response, one block per reply holding its
// StreamReply, oneof wrapper, response and header, and the reply pointers;
// and one per value (a get's, a put's previous one: copied out of data,
// which the caller reuses), three per batch (its results, their pointers,
// their values) and one per leader address not seen lately.
// Anything else (another kind of reply, a field it does not know, a
// message field given twice, which proto would merge, bytes that do not
// parse) goes to proto.Unmarshal. addrs interns leader addresses: it is
// the receiver's own.
func decodeResponse(data []byte, addrs *addrCache) (*concordpb.StreamResponse, error) {
	if resp, ok := decodeFast(data, addrs); ok {
		return resp, nil
	}
	resp := &concordpb.StreamResponse{}
	if err := proto.Unmarshal(data, resp); err != nil {
		return nil, fmt.Errorf("bad frame: %w", err)
	}
	return resp, nil
}

// replyBlock holds a reply and everything it points to.
type replyBlock struct {
	reply  concordpb.StreamReply
	wput   concordpb.StreamReply_Put
	wget   concordpb.StreamReply_Get
	wbatch concordpb.StreamReply_Batch
	put    concordpb.PutResponse
	get    concordpb.GetResponse
	batch  concordpb.BatchResponse
	hdr    concordpb.ResponseHeader
}

func decodeFast(data []byte, addrs *addrCache) (*concordpb.StreamResponse, bool) {
	n := 0
	for rest := data; len(rest) > 0; n++ {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 || num != fStreamResponseReplies || typ != protowire.BytesType {
			return nil, false
		}
		rest = rest[l:]
		if l = protowire.ConsumeFieldValue(num, typ, rest); l < 0 {
			return nil, false
		}
		rest = rest[l:]
	}
	if n == 0 {
		return &concordpb.StreamResponse{}, true
	}
	var resp *concordpb.StreamResponse
	var blocks []replyBlock
	if n == 1 { // a lone reply (a client with one call in flight): one allocation
		one := &struct {
			resp  concordpb.StreamResponse
			ptr   [1]*concordpb.StreamReply
			block [1]replyBlock
		}{}
		resp, blocks = &one.resp, one.block[:]
		resp.Replies = one.ptr[:]
	} else {
		resp, blocks = &concordpb.StreamResponse{}, make([]replyBlock, n)
		resp.Replies = make([]*concordpb.StreamReply, n)
	}
	for i := range blocks {
		_, _, l := protowire.ConsumeTag(data)
		v, m := protowire.ConsumeBytes(data[l:])
		data = data[l+m:]
		if !blocks[i].decode(v, addrs) {
			return nil, false
		}
		resp.Replies[i] = &blocks[i].reply
	}
	return resp, true
}

// decode decodes one reply into b.
func (b *replyBlock) decode(data []byte, addrs *addrCache) bool {
	r := &b.reply
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch {
		case (num == fReplyID || num == fReplyCode) && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			if num == fReplyID {
				r.Id = v
			} else {
				r.Code = uint32(v)
			}
		case num == fReplyMessage && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 || !utf8.Valid(v) {
				return false
			}
			data = data[m:]
			r.Message = string(v)
		case (num == fReplyGet || num == fReplyPut || num == fReplyBatch) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 || r.Response != nil { // a second response: proto's to resolve
				return false
			}
			data = data[m:]
			if num == fReplyBatch {
				if !b.decodeBatch(v, addrs) {
					return false
				}
			} else if !b.decodeResponse(num, v, addrs) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// decodeBatch decodes a batch's response: a header and its results, the
// results in one array and their values copied into one buffer (the
// caller reuses data), whatever their number.
func (b *replyBlock) decodeBatch(data []byte, addrs *addrCache) bool {
	b.wbatch.Batch = &b.batch
	b.reply.Response = &b.wbatch
	n, size := 0, 0
	for rest := data; len(rest) > 0; {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 || typ != protowire.BytesType {
			return false
		}
		v, m := protowire.ConsumeBytes(rest[l:])
		if m < 0 {
			return false
		}
		rest = rest[l+m:]
		if num == fBatchResults {
			n++
			size += len(v) // at least the values' bytes
		}
	}
	var results []concordpb.OpResult
	if n > 0 {
		results = make([]concordpb.OpResult, n)
		b.batch.Results = make([]*concordpb.OpResult, 0, n)
	}
	values := make([]byte, 0, size)
	for len(data) > 0 {
		num, _, l := protowire.ConsumeTag(data)
		v, m := protowire.ConsumeBytes(data[l:])
		data = data[l+m:]
		switch num {
		case fRespHeader:
			if b.batch.Header != nil || !decodeRespHeader(&b.hdr, v, addrs) {
				return false
			}
			b.batch.Header = &b.hdr
		case fBatchResults:
			r := &results[len(b.batch.Results)]
			if !decodeResult(r, v, &values) {
				return false
			}
			b.batch.Results = append(b.batch.Results, r)
		default:
			return false
		}
	}
	return true
}

// decodeResult decodes an OpResult into r, its value appended to values
// (sized beforehand: it never moves) and r.Value its slice of it.
func decodeResult(r *concordpb.OpResult, data []byte, values *[]byte) bool {
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		if num == fResValue && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			start := len(*values)
			*values = append(*values, v...)
			r.Value = (*values)[start:len(*values):len(*values)] // as proto: non-nil, even empty
			continue
		}
		if typ != protowire.VarintType {
			return false
		}
		v, m := protowire.ConsumeVarint(data)
		if m < 0 {
			return false
		}
		data = data[m:]
		switch num {
		case fResOk:
			r.Ok = v != 0
		case fResExists:
			r.Exists = v != 0
		case fResInt:
			r.IntValue = int64(v)
		case fResExpireAt:
			r.ExpireAtUnixMs = int64(v)
		case fResError:
			r.Error = concordpb.OpError(int32(v))
		case fResSkipped:
			r.Skipped = v != 0
		case fResRepeat:
			r.RepeatApplied = uint32(v)
		default:
			return false
		}
	}
	return true
}

// decodeResponse decodes a get's or a put's response: their fields have
// the same numbers and types (header; found or prev_exists; value or
// prev_value; the get's expiry).
func (b *replyBlock) decodeResponse(num protowire.Number, data []byte, addrs *addrCache) bool {
	var hdr **concordpb.ResponseHeader
	var flag *bool
	var value *[]byte
	var expire *int64
	if num == fReplyGet {
		b.wget.Get = &b.get
		b.reply.Response = &b.wget
		hdr, flag, value, expire = &b.get.Header, &b.get.Found, &b.get.Value, &b.get.ExpireAtUnixMs
	} else {
		b.wput.Put = &b.put
		b.reply.Response = &b.wput
		hdr, flag, value = &b.put.Header, &b.put.PrevExists, &b.put.PrevValue
	}
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch {
		case num == fRespHeader && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 || *hdr != nil || !decodeRespHeader(&b.hdr, v, addrs) {
				return false
			}
			data = data[m:]
			*hdr = &b.hdr
		case num == fGetFound && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			*flag = v != 0
		case num == fGetValue && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			*value = append([]byte{}, v...) // the caller reuses data
		case num == fGetExpire && typ == protowire.VarintType && expire != nil:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			*expire = int64(v)
		default:
			return false
		}
	}
	return true
}

func decodeRespHeader(h *concordpb.ResponseHeader, data []byte, addrs *addrCache) bool {
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch {
		case num >= fRHShard && num <= fRHLeader && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			switch num {
			case fRHShard:
				h.ShardId = v
			case fRHServedBy:
				h.ServedByNodeId = v
			default:
				h.LeaderNodeId = v
			}
		case num == fRHTentative && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			h.Tentative = protowire.DecodeBool(v)
		case num == fRHAddress && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 || !utf8.Valid(v) {
				return false
			}
			data = data[m:]
			h.LeaderAddress = addrs.intern(v)
		default:
			return false
		}
	}
	return true
}

// addrCache interns the leader addresses of a connection's replies: a
// node names the same few in every reply, and a string per reply was an
// allocation per op.
type addrCache struct{ last [4]string }

func (c *addrCache) intern(b []byte) string {
	for _, s := range c.last {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	copy(c.last[1:], c.last[:len(c.last)-1])
	c.last[0] = s
	return s
}
