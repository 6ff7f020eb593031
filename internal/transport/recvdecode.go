package transport

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/pbcount"
)

// batchDecoder decodes the RaftBatch frames of one framed connection
// without allocating per message: proto.Unmarshal allocated a RaftEnvelope
// and a copy of its message bytes for every message (and grew the pointer
// slice), about a fifth of a node's allocations under put load
// (docs/benchmarks.md, "Receiving a raft message"). Here the envelopes are
// reused from frame to frame and their messages alias the frame's bytes;
// that is safe because Receiver.Deliver copies whatever it keeps (the host
// copies a message that its decoded form would alias).
//
// Anything the hand decoder does not expect (an unknown field, a wrong wire
// type, bytes that do not parse) goes to proto.Unmarshal, so the batch is
// always what proto.Unmarshal makes of the frame (TestDecodeBatchMatchesProto,
// FuzzDecodeBatch).
type batchDecoder struct {
	b    concordpb.RaftBatch
	envs []concordpb.RaftEnvelope
	ptrs []*concordpb.RaftEnvelope
}

// decode decodes data into the decoder's batch and returns it; the batch
// and its envelopes are valid until the next call, and alias data.
//
// A frame of more than maxRecvBatch messages, or one that does not parse
// (proto.Unmarshal would refuse it too), is refused before anything is
// allocated for its messages: an envelope of two bytes on the wire decodes
// into some eighty, kept with the decoder.
func (d *batchDecoder) decode(data []byte) (*concordpb.RaftBatch, error) {
	if err := CheckBatchBytes(data); err != nil {
		return nil, fmt.Errorf("bad frame: %w", err)
	}
	if d.decodeFast(data) {
		return &d.b, nil
	}
	b := &concordpb.RaftBatch{}
	if err := proto.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("bad frame: %w", err)
	}
	return b, nil
}

// CheckBatchBytes refuses an encoded RaftBatch of more than maxRecvBatch
// messages, or one that does not parse, without decoding it: what both
// wires check before a batch is decoded (the gRPC server's codec,
// internal/grpcapi ServerCodec, calls it before proto.Unmarshal).
func CheckBatchBytes(data []byte) error {
	n, ok := pbcount.Count(data, batchMessagesField)
	if !ok {
		return errors.New("not a RaftBatch")
	}
	if n > maxRecvBatch {
		return fmt.Errorf("%d messages in one batch (at most %d)", n, maxRecvBatch)
	}
	return nil
}

// CheckChunkBytes refuses an encoded SnapshotChunk of more than
// maxRecvChunkKVs pairs, or one that does not parse, without decoding it
// (the gRPC server's codec calls it before proto.Unmarshal): a pair of two
// bytes on the wire decodes into some eighty.
func CheckChunkBytes(data []byte) error {
	n, ok := pbcount.Count(data, chunkKVsField)
	if !ok {
		return errors.New("not a SnapshotChunk")
	}
	if n > maxRecvChunkKVs {
		return fmt.Errorf("%d pairs in one snapshot chunk (at most %d)", n, maxRecvChunkKVs)
	}
	return nil
}

// chunkKVsField is SnapshotChunk.kvs's field number (raft.proto).
const chunkKVsField = 6

// maxChunkKVs bounds the pairs a sender puts in one snapshot chunk (as
// well as SnapshotChunkBytes); a receiver takes eight times that
// (maxRecvChunkKVs), above the 104,858 pairs of the shortest keys (ten
// bytes, a state span's prefix) that fill a 1 MiB chunk, which a sender
// from before the count could send.
const (
	maxChunkKVs     = 1 << 14
	maxRecvChunkKVs = 8 * maxChunkKVs
)

// decodeFast decodes a batch of the fields it knows; false hands it to
// proto.
func (d *batchDecoder) decodeFast(data []byte) bool {
	b := &d.b
	b.ClusterId, b.FromNodeId, b.ToNodeId = 0, 0, 0
	n := 0
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
			data = data[l:]
			if n == len(d.envs) {
				d.envs = append(d.envs, concordpb.RaftEnvelope{})
			}
			if !decodeEnvelope(&d.envs[n], v) {
				return false
			}
			n++
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
		switch num { // a repeated scalar: the last one wins, as in proto
		case 1:
			b.ClusterId = v
		case 2:
			b.FromNodeId = v
		case 3:
			b.ToNodeId = v
		default:
			return false
		}
	}
	d.ptrs = d.ptrs[:0]
	for i := range n {
		d.ptrs = append(d.ptrs, &d.envs[i])
	}
	b.Messages = d.ptrs
	if n == 0 {
		b.Messages = nil // as proto leaves an absent repeated field
	}
	return true
}

// decodeEnvelope decodes one envelope into e, its message aliasing data.
func decodeEnvelope(e *concordpb.RaftEnvelope, data []byte) bool {
	e.ShardId, e.Message = 0, nil
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return false
		}
		data = data[l:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 {
				return false
			}
			e.ShardId, data = v, data[l:]
		case num == 2 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return false
			}
			// proto3 bytes: an empty value reads back as nil.
			e.Message, data = nil, data[l:]
			if len(v) > 0 {
				e.Message = v[:len(v):len(v)]
			}
		default:
			return false
		}
	}
	return true
}

// maxRecvBatch bounds the messages of one incoming RaftBatch: eight times
// what a sender puts in one (maxBatch).
const maxRecvBatch = 8 * maxBatch
