package grpcapi

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
	"github.com/concord-kv/concord/internal/pbcount"
	"github.com/concord-kv/concord/internal/transport"
)

// ServerCodec is the node's gRPC server codec (grpc.ForceServerCodecV2):
// proto's, but a request with a repeated field a caller can fill with
// elements of a few bytes each, every one of which proto.Unmarshal turns
// into a Go value of tens to hundreds of bytes, is counted first and
// refused (codes.Internal, "failed to unmarshal") past its bound: a
// KV.Stream request's calls and batch ops and a KV.Batch request's ops
// (frame.MaxStreamCalls, as the framed client wire), a raft stream's
// batch of messages (transport.CheckBatchBytes, as the framed raft wire),
// a snapshot chunk's pairs (transport.CheckChunkBytes), a heartbeat's
// replicas and descriptors, a partition's addresses. Without it a message
// under the 64 MiB receive limit decoded into gigabytes before any
// handler saw it. Everything else is proto's codec as it is.
func ServerCodec() encoding.CodecV2 {
	return boundedCodec{encoding.GetCodecV2(grpcproto.Name)}
}

type boundedCodec struct{ encoding.CodecV2 }

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	check := boundOf(v)
	if check == nil {
		return c.CodecV2.Unmarshal(data, v)
	}
	// As proto's codec: one contiguous copy, freed once decoded
	// (proto.Unmarshal copies what it keeps).
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if err := check(b); err != nil {
		return err
	}
	return proto.Unmarshal(b, v.(proto.Message))
}

// boundOf is the count to run on an encoded v before it is decoded; nil
// for a message that has none.
func boundOf(v any) func([]byte) error {
	switch v.(type) {
	case *concordpb.StreamRequest:
		return checkStreamRequest
	case *concordpb.BatchRequest:
		return bounded("BatchRequest", fields{2: nil}) // ops
	case *concordpb.RaftBatch:
		return transport.CheckBatchBytes
	case *concordpb.SnapshotChunk:
		return transport.CheckChunkBytes
	case *concordpb.HeartbeatRequest:
		// replicas, and led descriptors with their replicas
		return bounded("HeartbeatRequest", fields{2: nil, 3: fields{4: nil}})
	case *concordpb.PartitionRequest:
		return bounded("PartitionRequest", fields{1: nil}) // reachable addresses
	}
	return nil
}

// checkStreamRequest is decodeRequest's count (the framed client wire's).
func checkStreamRequest(data []byte) error {
	calls, ok := countCalls(data)
	if !ok {
		return errors.New("not a StreamRequest")
	}
	if calls < 0 {
		return fmt.Errorf("more than %d calls and batch ops in one message", frame.MaxStreamCalls)
	}
	return nil
}

// fields names a message's repeated fields to count, each with the
// fields to count inside its elements (nil: none).
type fields map[protowire.Number]fields

// bounded refuses a message whose counted elements are more than
// frame.MaxStreamCalls, far above what any caller sends (validation
// answers anything between with its own clear error).
func bounded(name string, f fields) func([]byte) error {
	return func(data []byte) error {
		n, ok := countElems(data, f)
		if !ok {
			return fmt.Errorf("not a %s", name)
		}
		if n > frame.MaxStreamCalls {
			return fmt.Errorf("a %s of %d elements (at most %d)", name, n, frame.MaxStreamCalls)
		}
		return nil
	}
}

// countElems counts the occurrences of f's fields in a message, and of
// theirs in each; false if it does not parse.
func countElems(data []byte, f fields) (int, bool) {
	n := 0
	w := pbcount.Walk(data)
	for w.Next() {
		inner, ok := f[w.Num()]
		if !ok {
			continue
		}
		v, ok := w.Bytes(w.Num())
		if !ok {
			continue
		}
		n++
		if len(inner) > 0 {
			k, ok := countElems(v, inner)
			if !ok {
				return 0, false
			}
			n += k
		}
	}
	if !w.OK() {
		return 0, false
	}
	return n, true
}
