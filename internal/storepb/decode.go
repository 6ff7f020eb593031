package storepb

import (
	"errors"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/concord-kv/concord/api/concordpb"
)

// CommandDecoder decodes the Command of a raft entry as proto.Unmarshal
// does, but a KV command — every client write — without allocating: into
// structs it reuses, the ops' byte fields aliasing the entry's data. Every
// replica decodes every committed entry, and proto.Unmarshal cost 7
// allocations and about 1 µs per put (BenchmarkCommandUnmarshal against
// BenchmarkCommandDecode).
//
// Anything else (another kind of command, a field it does not know, a
// field twice where proto would merge, bytes that do not parse) goes to
// proto.Unmarshal into a fresh Command, so the result is always what
// proto.Unmarshal gives (FuzzCommandDecoder), and a field added to Op or
// KVCommand later is decoded, only on the slower path, until it is added
// here. A field this binary does not know at all is refused
// (ErrUnknownFields), not dropped.
//
// Not safe for concurrent use.
type CommandDecoder struct {
	cmd  Command
	kind Command_Kv
	kv   KVCommand
	ops  []*concordpb.Op // reused op structs, allocated as a command first needs them
}

// Decode returns the command data encodes. A KV command and its ops are
// valid until the next Decode, and alias data, which must not change
// meanwhile (a raft entry's data never does); the caller must not keep
// them.
func (d *CommandDecoder) Decode(data []byte) (*Command, error) {
	if cmd, ok := d.decodeKV(data); ok {
		return cmd, nil
	}
	cmd := &Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, err
	}
	if HasUnknown(cmd) {
		return nil, ErrUnknownFields
	}
	return cmd, nil
}

// ErrUnknownFields is Decode's error for a command with a field this
// binary does not know: one proposed under a cluster version above this
// binary's (package version). Applying it without the field could apply
// something else than the replicas that know it (proto drops unknown
// fields silently), so the replica must stop instead: its node needs a
// newer binary.
var ErrUnknownFields = errors.New("the command has fields this binary does not know: it was proposed for a newer cluster version; run a newer concord binary on this node")

// HasUnknown reports whether m, or any message in it, holds fields this
// binary does not know.
func HasUnknown(m proto.Message) bool { return hasUnknown(m.ProtoReflect()) }

func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				found = hasUnknown(l.Get(i).Message())
			}
		default:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// decodeKV decodes data into d's command if it is a KV command it can
// decode exactly as proto.Unmarshal would; ok is false otherwise.
func (d *CommandDecoder) decodeKV(data []byte) (cmd *Command, ok bool) {
	d.cmd = Command{}
	sawKV := false
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil, false
		}
		data = data[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return nil, false
			}
			d.cmd.Id, data = v, data[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return nil, false
			}
			d.cmd.UnixNanos, data = int64(v), data[n:]
		case num == 3 && typ == protowire.BytesType && !sawKV: // a second kv would merge into the first
			v, n := protowire.ConsumeBytes(data)
			if n < 0 || !d.decodeKVCommand(v) {
				return nil, false
			}
			sawKV, data = true, data[n:]
		default:
			return nil, false
		}
	}
	if !sawKV {
		return nil, false
	}
	d.kind.Kv = &d.kv
	d.cmd.Kind = &d.kind
	return &d.cmd, true
}

func (d *CommandDecoder) decodeKVCommand(data []byte) bool {
	d.kv = KVCommand{}
	nops := 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		if num == 3 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return false
			}
			if nops == len(d.ops) {
				d.ops = append(d.ops, new(concordpb.Op))
			}
			if !DecodeOp(d.ops[nops], v) {
				return false
			}
			nops, data = nops+1, data[n:]
			continue
		}
		if typ != protowire.VarintType {
			return false
		}
		v, n := protowire.ConsumeVarint(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		switch num {
		case 1:
			d.kv.SessionId = v
		case 2:
			d.kv.Seq = v
		case 4:
			d.kv.MaxValueBytes = int64(v)
		case 5:
			d.kv.SessionFloor = v
		case 6:
			d.kv.ExpiryOnStamps = protowire.DecodeBool(v)
		case 7:
			d.kv.MaxResultBytes = int64(v)
		case 8:
			d.kv.Versioned = protowire.DecodeBool(v)
		default:
			return false
		}
	}
	if nops > 0 {
		d.kv.Ops = d.ops[:nops:nops] // capped: an append by the caller copies
	}
	return true
}

// DecodeOp decodes an Op into op, conversions as protobuf-go's: enums and
// uint32 truncate, bools are any non-zero varint, and an empty bytes field
// is nil. False for an unknown field or a wrong wire type: the caller's
// message then goes to proto.Unmarshal. The bytes fields alias data. The
// client wire's batches (grpcapi) use it too.
func DecodeOp(op *concordpb.Op, data []byte) bool {
	*op = concordpb.Op{}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return false
			}
			data = data[n:]
			if len(v) == 0 {
				v = nil
			} else {
				v = v[:len(v):len(v)] // an append by the caller copies
			}
			switch num {
			case 2:
				op.Key = v
			case 3:
				op.Value = v
			case 4:
				op.Expected = v
			case 18:
				op.FloatDeltaText = v
			default:
				return false
			}
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(data)
			if n < 0 || num != 13 {
				return false
			}
			op.FloatDelta, data = math.Float64frombits(v), data[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 || !setOpVarint(op, num, v) {
				return false
			}
			data = data[n:]
		default:
			return false
		}
	}
	return true
}

// setOpVarint sets op's varint field num to v; false for a number that is
// not one.
func setOpVarint(op *concordpb.Op, num protowire.Number, v uint64) bool {
	switch num {
	case 1:
		op.Type = concordpb.OpType(int32(v))
	case 5:
		op.ExpectAbsent = protowire.DecodeBool(v)
	case 6:
		op.Delete = protowire.DecodeBool(v)
	case 7:
		op.TtlMs = int64(v)
	case 8:
		op.ExpireAtUnixMs = int64(v)
	case 9:
		op.KeepTtl = protowire.DecodeBool(v)
	case 10:
		op.Persist = protowire.DecodeBool(v)
	case 11:
		op.Condition = concordpb.Condition(int32(v))
	case 12:
		op.IntDelta = int64(v)
	case 14:
		op.Offset = int64(v)
	case 15:
		op.Skip = uint32(v)
	case 16:
		op.ReturnPrev = protowire.DecodeBool(v)
	case 17:
		op.Repeat = uint32(v)
	case 19:
		op.TentativeVersion = v
	default:
		return false
	}
	return true
}
