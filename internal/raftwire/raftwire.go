// Package raftwire encodes raft messages for the wire by hand: the
// appends, acknowledgements, heartbeats and votes that make up nearly all
// peer traffic, straight into a caller's buffer. proto.Marshal of a
// raftpb.Message walks it by reflection-driven tables and, through
// Transport.Send, allocated the bytes of every message; with a loop turn
// sending about 8 messages per shard batch that was ~4–5 % of a put's
// server CPU (docs/benchmarks.md, "Sending a raft message").
//
// The encoding is protobuf's (proto2: a field is written when its pointer
// is set, bytes when non-nil), so proto.Unmarshal and the receiver's fast
// decoder (internal/multiraft, decodeMessageFast) read it back to a message
// proto.Equal to the input (TestRoundTrip, FuzzRoundTrip). A message it
// does not handle (a snapshot, storage responses, unknown fields) makes
// Size report false: the caller marshals it with proto.
package raftwire

import (
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/concord-kv/concord/internal/pbcount"
)

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto);
// TestFieldNumbers checks them against the descriptors.
const (
	fType       = 1
	fTo         = 2
	fFrom       = 3
	fTerm       = 4
	fLogTerm    = 5
	fIndex      = 6
	fEntries    = 7
	fCommit     = 8
	fSnapshot   = 9
	fReject     = 10
	fRejectHint = 11
	fContext    = 12
	fVote       = 13

	eType  = 1
	eTerm  = 2
	eIndex = 3
	eData  = 4
)

// What a received message holds decoded beyond its own bytes (the
// receiver's decoder, internal/multiraft decodeMessage): its message block
// and inbox slot, and each entry's block. An entry takes at least six bytes
// on the wire (tag, length, term, index) and about 128 decoded, so a
// receiver bounds this before it decodes anything (transport, receive).
const (
	DecodedMessageBytes = 320
	DecodedEntryBytes   = 128
)

// Overhead is what m will hold decoded at its receiver beyond its bytes:
// what a sender counts to keep a batch within the receiver's budget.
func Overhead(m *pb.Message) int {
	return DecodedMessageBytes + DecodedEntryBytes*len(m.Entries)
}

// DecodedOverhead is Overhead of an encoded message, from a count of its
// entries (nothing is decoded); false if data does not parse.
func DecodedOverhead(data []byte) (int, bool) {
	n, ok := pbcount.Count(data, fEntries)
	if !ok {
		return 0, false
	}
	return DecodedMessageBytes + DecodedEntryBytes*n, true
}

// Size returns the encoded size of m, and false when Append cannot encode
// it (it has a snapshot, responses or unknown fields): marshal it with
// proto instead.
func Size(m *pb.Message) (int, bool) {
	if m.Snapshot != nil || len(m.Responses) > 0 || len(m.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	n := 0
	if m.Type != nil {
		n += 1 + protowire.SizeVarint(enum(int32(*m.Type)))
	}
	n += sizeOpt(m.To) + sizeOpt(m.From) + sizeOpt(m.Term) + sizeOpt(m.LogTerm) + sizeOpt(m.Index)
	for _, e := range m.Entries {
		if e == nil {
			return 0, false // proto.Marshal refuses a nil entry
		}
		es, ok := entrySize(e)
		if !ok {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(es)
	}
	n += sizeOpt(m.Commit)
	if m.Reject != nil {
		n += 2
	}
	n += sizeOpt(m.RejectHint)
	if m.Context != nil {
		n += 1 + protowire.SizeBytes(len(m.Context))
	}
	n += sizeOpt(m.Vote)
	return n, true
}

// Append appends m's encoding to buf; m must be one Size accepted, and
// unchanged since.
func Append(buf []byte, m *pb.Message) []byte {
	if m.Type != nil {
		buf = append(buf, fType<<3|byte(protowire.VarintType))
		buf = protowire.AppendVarint(buf, enum(int32(*m.Type)))
	}
	buf = appendOpt(buf, fTo, m.To)
	buf = appendOpt(buf, fFrom, m.From)
	buf = appendOpt(buf, fTerm, m.Term)
	buf = appendOpt(buf, fLogTerm, m.LogTerm)
	buf = appendOpt(buf, fIndex, m.Index)
	for _, e := range m.Entries {
		es, _ := entrySize(e)
		buf = append(buf, fEntries<<3|byte(protowire.BytesType))
		buf = protowire.AppendVarint(buf, uint64(es))
		buf = appendEntry(buf, e)
	}
	buf = appendOpt(buf, fCommit, m.Commit)
	if m.Reject != nil {
		buf = append(buf, fReject<<3|byte(protowire.VarintType), byte(protowire.EncodeBool(*m.Reject)))
	}
	buf = appendOpt(buf, fRejectHint, m.RejectHint)
	if m.Context != nil {
		buf = append(buf, fContext<<3|byte(protowire.BytesType))
		buf = protowire.AppendBytes(buf, m.Context)
	}
	buf = appendOpt(buf, fVote, m.Vote)
	return buf
}

func entrySize(e *pb.Entry) (int, bool) {
	if len(e.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	n := 0
	if e.Type != nil {
		n += 1 + protowire.SizeVarint(enum(int32(*e.Type)))
	}
	n += sizeOpt(e.Term) + sizeOpt(e.Index)
	if e.Data != nil {
		n += 1 + protowire.SizeBytes(len(e.Data))
	}
	return n, true
}

// appendEntry writes the fields in proto.Marshal's order (by number).
func appendEntry(buf []byte, e *pb.Entry) []byte {
	if e.Type != nil {
		buf = append(buf, eType<<3|byte(protowire.VarintType))
		buf = protowire.AppendVarint(buf, enum(int32(*e.Type)))
	}
	buf = appendOpt(buf, eTerm, e.Term)
	buf = appendOpt(buf, eIndex, e.Index)
	if e.Data != nil {
		buf = append(buf, eData<<3|byte(protowire.BytesType))
		buf = protowire.AppendBytes(buf, e.Data)
	}
	return buf
}

// sizeOpt is the size of an optional uint64 field numbered below 16 (a
// one-byte tag), 0 when unset.
func sizeOpt(v *uint64) int {
	if v == nil {
		return 0
	}
	return 1 + protowire.SizeVarint(*v)
}

func appendOpt(buf []byte, num byte, v *uint64) []byte {
	if v == nil {
		return buf
	}
	buf = append(buf, num<<3|byte(protowire.VarintType))
	return protowire.AppendVarint(buf, *v)
}

// enum is an enum's varint: protobuf sign-extends a negative int32.
func enum(v int32) uint64 { return uint64(int64(v)) }
