package multiraft

import (
	"errors"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/pbcount"
)

// decodeMessage decodes a raft message a peer sent, as proto.Unmarshal
// does into a fresh pb.Message, but an append, heartbeat, vote or
// acknowledgement — nearly all peer traffic — in at most four allocations
// (two for an append of up to smallAppend entries)
// instead of one per field and five per entry (raftpb's optional fields are
// pointers): the message's scalars live in one block, its entries and
// theirs in another, and entry data and context alias one copy of data
// (none is made for a message without either: acknowledgements and
// heartbeats allocate only their block). The result never aliases data,
// which the caller may reuse: the framed wire decodes envelopes in place
// in its receive buffer (internal/transport, batchDecoder).
//
// Anything else (a snapshot, responses, a field it does not know, an enum
// value raftpb does not define, bytes that do not parse) goes to
// proto.Unmarshal, so the result is always what proto.Unmarshal gives
// (FuzzDecodeMessage), but for one refusal: an entry too short to hold a
// term and an index (errShortEntry), which no raft log holds. Each decoded
// entry takes some 120 bytes, so a message of empty entries (two bytes
// each) would make 60 times its size before any check; entries of at
// least minEntryBytes bound that to 20. What a whole batch may make is
// bounded before it reaches Deliver (transport's decode budget, counted
// with raftwire.DecodedOverhead: the sizes here).
func decodeMessage(data []byte) (*pb.Message, error) {
	if m, ok := decodeMessageFast(data); ok {
		return m, nil
	}
	if shortEntry(data) {
		return nil, errShortEntry
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, err
	}
	return m, nil
}

// messageBlock holds a message and the values its optional fields point to.
type messageBlock struct {
	m                                                     pb.Message
	typ                                                   pb.MessageType
	to, from, term, logTerm, index, commit, vote, rejHint uint64
	reject                                                bool
}

// smallAppend is the most entries an appendBlock holds.
const smallAppend = 4

// appendBlock holds a message of at most smallAppend entries, its entries
// and the entries' pointers.
type appendBlock struct {
	messageBlock
	ents [smallAppend]entryBlock
	ptrs [smallAppend]*pb.Entry
}

// entryBlock holds an entry and the values its optional fields point to.
type entryBlock struct {
	e           pb.Entry
	term, index uint64
	typ         pb.EntryType
}

func decodeMessageFast(data []byte) (*pb.Message, bool) {
	n, aliased, ok := countEntries(data)
	if !ok {
		return nil, false
	}
	if aliased {
		// The caller may reuse data (the framed wire's receive buffer):
		// the entries' data and the context keep a copy of their own, one
		// allocation for the message.
		data = append([]byte(nil), data...)
	}
	var blk *messageBlock
	var ents []entryBlock
	switch {
	case n == 0:
		blk = &messageBlock{}
	case n <= smallAppend:
		// An append of a few entries, as a loop turn at many shards sends
		// them (1–2 entries a shard): message, entries and their pointers
		// in one allocation.
		a := &appendBlock{}
		blk, ents = &a.messageBlock, a.ents[:n]
		blk.m.Entries = a.ptrs[:0:n]
	default:
		blk = &messageBlock{}
		ents = make([]entryBlock, n)
		blk.m.Entries = make([]*pb.Entry, 0, n)
	}
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return nil, false
		}
		data = data[l:]
		switch typ {
		case protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 || !blk.set(num, v) {
				return nil, false
			}
			data = data[l:]
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return nil, false
			}
			data = data[l:]
			switch num {
			case 7:
				e := &ents[len(blk.m.Entries)]
				if !e.decode(v) {
					return nil, false
				}
				blk.m.Entries = append(blk.m.Entries, &e.e)
			case 12:
				blk.m.Context = present(v)
			default: // snapshot, responses, unknown: proto's
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return &blk.m, true
}

// minEntryBytes is the least an entry of a raft log encodes to: a term
// and an index, each a tag and a varint of at least a byte (both are at
// least 1 in every entry raft sends).
const minEntryBytes = 4

var errShortEntry = errors.New("a raft entry too short to hold its term and index")

// shortEntry reports whether data, a message that parses, holds an entry
// shorter than minEntryBytes.
func shortEntry(data []byte) bool {
	f := pbcount.Walk(data)
	for f.Next() {
		if v, ok := f.Bytes(7); ok && len(v) < minEntryBytes {
			return true
		}
	}
	return false
}

// countEntries counts the entries field's occurrences in a message and
// says whether its decoded form would alias data (entries or a context);
// false if it does not parse.
func countEntries(data []byte) (n int, aliased, ok bool) {
	f := pbcount.Walk(data)
	for f.Next() {
		if e, ok := f.Bytes(7); ok {
			if len(e) < minEntryBytes {
				return 0, false, false // too short an entry (decodeMessage)
			}
			n++
			aliased = true
		} else if _, ok := f.Bytes(12); ok {
			aliased = true
		}
	}
	if !f.OK() {
		return 0, false, false
	}
	return n, aliased, true
}

// set sets the message's varint field num to v; false for a field it does
// not take (unknown, or an enum value raftpb does not define: proto2 enums
// are closed, and proto keeps such a value among unknown fields).
func (b *messageBlock) set(num protowire.Number, v uint64) bool {
	m := &b.m
	switch num {
	case 1:
		t := pb.MessageType(int32(v))
		if _, ok := pb.MessageType_name[int32(t)]; !ok {
			return false
		}
		b.typ, m.Type = t, &b.typ
	case 2:
		b.to, m.To = v, &b.to
	case 3:
		b.from, m.From = v, &b.from
	case 4:
		b.term, m.Term = v, &b.term
	case 5:
		b.logTerm, m.LogTerm = v, &b.logTerm
	case 6:
		b.index, m.Index = v, &b.index
	case 8:
		b.commit, m.Commit = v, &b.commit
	case 10:
		b.reject, m.Reject = protowire.DecodeBool(v), &b.reject
	case 11:
		b.rejHint, m.RejectHint = v, &b.rejHint
	case 13:
		b.vote, m.Vote = v, &b.vote
	default:
		return false
	}
	return true
}

// decode decodes an entry into e; false for anything proto would keep as
// an unknown field.
func (e *entryBlock) decode(data []byte) bool {
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		if num == 4 && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return false
			}
			e.e.Data, data = present(v), data[l:]
			continue
		}
		if typ != protowire.VarintType {
			return false
		}
		v, l := protowire.ConsumeVarint(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch num {
		case 1:
			t := pb.EntryType(int32(v))
			if _, ok := pb.EntryType_name[int32(t)]; !ok {
				return false
			}
			e.typ, e.e.Type = t, &e.typ
		case 2:
			e.term, e.e.Term = v, &e.term
		case 3:
			e.index, e.e.Index = v, &e.index
		default:
			return false
		}
	}
	return true
}

// present is a proto2 bytes field's value as proto.Unmarshal sets it: never
// nil once the field is present, and capped so an append copies.
func present(v []byte) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	return v[:len(v):len(v)]
}
