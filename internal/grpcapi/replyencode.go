package grpcapi

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// appendResponse appends resp's encoding, byte for byte what proto.Marshal
// gives (TestAppendResponseMatchesProto). The replies of the hot calls
// (a get's or a put's value, an error, a pong, a batch's results) are
// encoded by hand:
// proto.Marshal was 4 % of a get's server CPU. Any other reply, or one
// carrying fields this code does not know (a newer leader's reply relayed
// by a forward) or a string that is not UTF-8 (which proto refuses), goes
// through proto.
func appendResponse(buf []byte, resp *concordpb.StreamResponse) ([]byte, error) {
	for _, r := range resp.GetReplies() {
		buf = protowire.AppendTag(buf, 1, protowire.BytesType)
		if n, body, ok := replySize(r); ok {
			buf = protowire.AppendVarint(buf, uint64(n))
			buf = appendReply(buf, r, body)
			continue
		}
		buf = protowire.AppendVarint(buf, uint64(proto.Size(r)))
		var err error
		if buf, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(buf, r); err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// Sizes of a field of number below 16 with its tag (one byte).
func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func sizeBytes(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

func sizeMessage(n int) int { return 1 + protowire.SizeBytes(n) }

func sizeBool(v bool) int {
	if v {
		return 2
	}
	return 0
}

// known reports whether m carries no unknown fields: only those are
// encoded by hand.
func known(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

// replySize is r's encoded size, and that of its get or put response's
// own encoding (body), if r is encoded by hand.
func replySize(r *concordpb.StreamReply) (n, body int, ok bool) {
	if !known(r) || !utf8.ValidString(r.GetMessage()) {
		return 0, 0, false
	}
	switch w := r.GetResponse().(type) {
	case nil:
	case *concordpb.StreamReply_Get:
		if body, ok = getSize(w.Get); !ok {
			return 0, 0, false
		}
		n = sizeMessage(body)
	case *concordpb.StreamReply_Put:
		if body, ok = putSize(w.Put); !ok {
			return 0, 0, false
		}
		n = sizeMessage(body)
	case *concordpb.StreamReply_Pong:
		if w.Pong == nil || !known(w.Pong) {
			return 0, 0, false
		}
		n = sizeMessage(0)
	case *concordpb.StreamReply_Batch:
		if body, ok = batchSize(w.Batch); !ok {
			return 0, 0, false
		}
		n = sizeMessage(body)
	default:
		return 0, 0, false
	}
	return n + sizeVarint(r.GetId()) + sizeVarint(uint64(r.GetCode())) + sizeBytes(len(r.GetMessage())), body, true
}

// headerSize is the size of h's field in its response (0 when nil).
func headerSize(h *concordpb.ResponseHeader) (int, bool) {
	if h == nil {
		return 0, true
	}
	if !known(h) || !utf8.ValidString(h.GetLeaderAddress()) {
		return 0, false
	}
	return sizeMessage(headerBody(h)), true
}

// headerBody is the size of h's own encoding.
func headerBody(h *concordpb.ResponseHeader) int {
	return sizeVarint(h.GetShardId()) + sizeVarint(h.GetServedByNodeId()) +
		sizeVarint(h.GetLeaderNodeId()) + sizeBytes(len(h.GetLeaderAddress())) + sizeBool(h.GetTentative())
}

// getSize and putSize are the size of a response's own encoding, if it is
// encoded by hand.
func getSize(g *concordpb.GetResponse) (int, bool) {
	if g == nil || !known(g) {
		return 0, false
	}
	h, ok := headerSize(g.GetHeader())
	return h + sizeBool(g.GetFound()) + sizeBytes(len(g.GetValue())) + sizeVarint(uint64(g.GetExpireAtUnixMs())), ok
}

func putSize(p *concordpb.PutResponse) (int, bool) {
	if p == nil || !known(p) {
		return 0, false
	}
	h, ok := headerSize(p.GetHeader())
	return h + sizeBool(p.GetPrevExists()) + sizeBytes(len(p.GetPrevValue())), ok
}

// batchSize is the size of a batch response's own encoding, if it is
// encoded by hand: the answer to a batch a node forwarded, hundreds of
// results to one message.
func batchSize(bt *concordpb.BatchResponse) (int, bool) {
	if bt == nil || !known(bt) {
		return 0, false
	}
	n, ok := headerSize(bt.GetHeader())
	for _, r := range bt.GetResults() {
		if r == nil || !known(r) {
			return 0, false
		}
		n += sizeMessage(resultSize(r))
	}
	return n, ok
}

func resultSize(r *concordpb.OpResult) int {
	return sizeBool(r.GetOk()) + sizeBytes(len(r.GetValue())) + sizeBool(r.GetExists()) +
		sizeVarint(uint64(r.GetIntValue())) + sizeVarint(uint64(r.GetExpireAtUnixMs())) +
		sizeVarint(uint64(r.GetError())) + sizeBool(r.GetSkipped()) + sizeVarint(uint64(r.GetRepeatApplied()))
}

// Appenders of a field of number num, omitted when zero (proto3).
func appendVarint(buf []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return buf
	}
	return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), v)
}

func appendBytes(buf []byte, num protowire.Number, b []byte) []byte {
	if len(b) == 0 {
		return buf
	}
	return protowire.AppendBytes(protowire.AppendTag(buf, num, protowire.BytesType), b)
}

func appendString(buf []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return buf
	}
	return protowire.AppendString(protowire.AppendTag(buf, num, protowire.BytesType), v)
}

func appendBool(buf []byte, num protowire.Number, v bool) []byte {
	if !v {
		return buf
	}
	return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), 1)
}

func appendMessageHead(buf []byte, num protowire.Number, size int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.BytesType), uint64(size))
}

// appendReply appends r, which replySize accepted with its response's
// body size.
func appendReply(buf []byte, r *concordpb.StreamReply, body int) []byte {
	buf = appendVarint(buf, 1, r.GetId())
	buf = appendVarint(buf, 2, uint64(r.GetCode()))
	buf = appendString(buf, 3, r.GetMessage())
	switch w := r.GetResponse().(type) {
	case *concordpb.StreamReply_Get:
		g := w.Get
		buf = appendMessageHead(buf, 4, body)
		buf = appendHeader(buf, g.GetHeader())
		buf = appendBool(buf, 2, g.GetFound())
		buf = appendBytes(buf, 3, g.GetValue())
		buf = appendVarint(buf, 4, uint64(g.GetExpireAtUnixMs()))
	case *concordpb.StreamReply_Put:
		p := w.Put
		buf = appendMessageHead(buf, 5, body)
		buf = appendHeader(buf, p.GetHeader())
		buf = appendBool(buf, 2, p.GetPrevExists())
		buf = appendBytes(buf, 3, p.GetPrevValue())
	case *concordpb.StreamReply_Pong:
		buf = appendMessageHead(buf, 10, 0)
	case *concordpb.StreamReply_Batch:
		buf = appendMessageHead(buf, 9, body)
		buf = appendHeader(buf, w.Batch.GetHeader())
		for _, res := range w.Batch.GetResults() {
			buf = appendMessageHead(buf, 2, resultSize(res))
			buf = appendBool(buf, 1, res.GetOk())
			buf = appendBytes(buf, 2, res.GetValue())
			buf = appendBool(buf, 3, res.GetExists())
			buf = appendVarint(buf, 4, uint64(res.GetIntValue()))
			buf = appendVarint(buf, 5, uint64(res.GetExpireAtUnixMs()))
			buf = appendVarint(buf, 6, uint64(res.GetError()))
			buf = appendBool(buf, 7, res.GetSkipped())
			buf = appendVarint(buf, 8, uint64(res.GetRepeatApplied()))
		}
	}
	return buf
}

func appendHeader(buf []byte, h *concordpb.ResponseHeader) []byte {
	if h == nil {
		return buf
	}
	buf = appendMessageHead(buf, 1, headerBody(h))
	buf = appendVarint(buf, 1, h.GetShardId())
	buf = appendVarint(buf, 2, h.GetServedByNodeId())
	buf = appendVarint(buf, 3, h.GetLeaderNodeId())
	buf = appendString(buf, 4, h.GetLeaderAddress())
	return appendBool(buf, 5, h.GetTentative()) // available mode's held write
}
