package client

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// The framed wire's messages, encoded and decoded by hand for the calls
// that make the load (puts and gets), the others through proto. The bytes
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

	fCallID      = 1
	fCallTimeout = 2
	fCallGet     = 3
	fCallPut     = 4

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

	fStreamResponseReplies = 1

	fReplyID      = 1
	fReplyCode    = 2
	fReplyMessage = 3
	fReplyGet     = 4
	fReplyPut     = 5

	fRespHeader = 1 // GetResponse, PutResponse
	fGetFound   = 2 // PutResponse's prev_exists
	fGetValue   = 3 // PutResponse's prev_value
	fGetExpire  = 4

	fRHShard    = 1
	fRHServedBy = 2
	fRHLeader   = 3
	fRHAddress  = 4
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
	return appendVarintField(b, fStreamRequestFromNode, req.GetFromNodeId()), nil
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
	}
	b = protowire.AppendVarint(b, uint64(proto.Size(c)))
	return proto.MarshalOptions{}.MarshalAppend(b, c)
}

// callSize is the size of c's encoding.
func callSize(c *concordpb.StreamCall) int {
	head := varintFieldSize(fCallID, c.GetId()) + varintFieldSize(fCallTimeout, uint64(c.GetTimeoutMs()))
	switch r := c.GetRequest().(type) {
	case *concordpb.StreamCall_Put:
		if r.Put != nil {
			return head + messageFieldSize(fCallPut, putSize(r.Put))
		}
	case *concordpb.StreamCall_Get:
		if r.Get != nil {
			return head + messageFieldSize(fCallGet, getSize(r.Get))
		}
	}
	return proto.Size(c)
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
// fresh message. A response whose replies are all gets and puts (with at
// most an error code and message) takes three allocations (one for a lone
// reply): the response, one block per reply holding its StreamReply,
// oneof wrapper, response and header, and the reply pointers; and one per
// value (a get's, a put's previous one: copied out of data, which the
// caller reuses) and per leader address not seen lately.
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
	reply concordpb.StreamReply
	wput  concordpb.StreamReply_Put
	wget  concordpb.StreamReply_Get
	put   concordpb.PutResponse
	get   concordpb.GetResponse
	hdr   concordpb.ResponseHeader
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
		case (num == fReplyGet || num == fReplyPut) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 || r.Response != nil { // a second response: proto's to resolve
				return false
			}
			data = data[m:]
			if !b.decodeResponse(num, v, addrs) {
				return false
			}
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
