package storepb

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/concord-kv/concord/api/concordpb"
)

// everyOpField is an Op with every scalar field of its descriptor set to a
// non-zero value (negative integers: ten-byte varints), so a field added
// to Op later is covered too.
func everyOpField() *concordpb.Op {
	op := &concordpb.Op{}
	m := op.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		var v protoreflect.Value
		switch f.Kind() {
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.EnumKind:
			v = protoreflect.ValueOfEnum(f.Enum().Values().Get(f.Enum().Values().Len() - 1).Number())
		case protoreflect.BytesKind:
			v = protoreflect.ValueOfBytes([]byte("bytes of " + string(f.Name())))
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString("string of " + string(f.Name()))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			v = protoreflect.ValueOfInt64(-int64(f.Number()))
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			v = protoreflect.ValueOfInt32(-int32(f.Number()))
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			v = protoreflect.ValueOfUint64(1<<40 + uint64(f.Number()))
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			v = protoreflect.ValueOfUint32(1<<20 + uint32(f.Number()))
		case protoreflect.DoubleKind:
			v = protoreflect.ValueOfFloat64(-1.5)
		case protoreflect.FloatKind:
			v = protoreflect.ValueOfFloat32(2.5)
		default:
			continue
		}
		m.Set(f, v)
	}
	return op
}

func kvCommand(kv *KVCommand) *Command {
	return &Command{Id: 9, UnixNanos: -3, Kind: &Command_Kv{Kv: kv}}
}

// withID appends an id field to a marshalled command, as
// multiraft.marshalWithID does after the proposal's own marshal.
func withID(data []byte, id uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), data...), 1, protowire.VarintType), id)
}

// decoderCases are encoded commands: the fast path's (KV commands) and the
// fallback's.
func decoderCases(t testing.TB) [][]byte {
	msgs := []proto.Message{
		kvCommand(&KVCommand{SessionId: 1 << 62, Seq: 7, MaxValueBytes: -1, SessionFloor: 3, ExpiryOnStamps: true, MaxResultBytes: 63 << 20,
			Ops: []*concordpb.Op{everyOpField(), {Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}, everyOpField()}}),
		putCommand(),
		kvCommand(&KVCommand{}),
		kvCommand(&KVCommand{Ops: []*concordpb.Op{{}}}),
		kvCommand(&KVCommand{Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_CAS, Key: []byte("k"), Expected: []byte("e"), ExpectAbsent: true}}}),
		&Command{Id: 3, UnixNanos: 4, Kind: &Command_ExpireSessions{ExpireSessions: &ExpireSessions{IdleBeforeUnixNanos: 5}}},
		&Command{Kind: &Command_AddNode{AddNode: &AddNode{Address: "a:1", JoinToken: []byte("t")}}},
		&Command{Id: 1, UnixNanos: 2},
		&Command{},
	}
	var out [][]byte
	for _, m := range msgs {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data, withID(data, 1<<63+5))
	}
	// Shapes proto.Marshal does not write but a decoder must take as
	// proto.Unmarshal does: empty bytes fields present, a field twice, kv
	// twice (merged), an unknown field, a field with the wrong wire type,
	// truncated input.
	op := protowire.AppendTag(nil, 2, protowire.BytesType)
	op = protowire.AppendBytes(op, nil)
	op = protowire.AppendTag(op, 3, protowire.BytesType)
	op = protowire.AppendBytes(op, []byte("first"))
	op = protowire.AppendTag(op, 3, protowire.BytesType)
	op = protowire.AppendBytes(op, []byte("second"))
	kv := protowire.AppendTag(nil, 3, protowire.BytesType)
	kv = protowire.AppendBytes(kv, op)
	cmd := protowire.AppendTag(nil, 3, protowire.BytesType)
	cmd = protowire.AppendBytes(cmd, kv)
	out = append(out, cmd, append(append([]byte(nil), cmd...), cmd...))
	unknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), cmd...), 99, protowire.VarintType), 1)
	wrongType := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), cmd...), 2, protowire.Fixed64Type), 1)
	out = append(out, unknown, wrongType, cmd[:len(cmd)-1], []byte{0xff})
	return out
}

// checkDecode fails t unless the decoder gives what proto.Unmarshal gives
// for data: the same error or none, an equal message, and nil byte fields
// where proto's are nil.
func checkDecode(t *testing.T, d *CommandDecoder, data []byte) {
	t.Helper()
	var want Command
	werr := proto.Unmarshal(data, &want)
	got, gerr := d.Decode(data)
	if werr == nil && hasUnknown(want.ProtoReflect()) {
		// A field this binary does not know: refused, not dropped.
		if !errors.Is(gerr, ErrUnknownFields) {
			t.Fatalf("decode %x: a command with unknown fields gave %v, %v; want ErrUnknownFields", data, got, gerr)
		}
		return
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("decode %x: error %v, proto.Unmarshal's %v", data, gerr, werr)
	}
	if werr != nil {
		return
	}
	if !proto.Equal(got, &want) {
		t.Fatalf("decode %x:\n got  %v\n want %v", data, got, &want)
	}
	gops, wops := got.GetKv().GetOps(), want.GetKv().GetOps()
	for i := range wops {
		for _, f := range [][2][]byte{{gops[i].Key, wops[i].Key}, {gops[i].Value, wops[i].Value}, {gops[i].Expected, wops[i].Expected}} {
			if (f[0] == nil) != (f[1] == nil) {
				t.Fatalf("decode %x: op %d: a bytes field is %q, proto's %q", data, i, f[0], f[1])
			}
		}
	}
}

// TestUnknownFieldsRefused: a command with a field this binary does not
// know, at the top, in the KV command or in an op, is refused with
// ErrUnknownFields (its replica stops: package version), never applied
// without the field.
func TestUnknownFieldsRefused(t *testing.T) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("k"), IntDelta: 1}
	op.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 5))
	inOp, err := proto.Marshal(&Command{Id: 1, Kind: &Command_Kv{Kv: &KVCommand{Ops: []*concordpb.Op{op}}}})
	if err != nil {
		t.Fatal(err)
	}
	kvCmd := &KVCommand{Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k")}}}
	kvCmd.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 5))
	inKV, err := proto.Marshal(&Command{Id: 2, Kind: &Command_Kv{Kv: kvCmd}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := proto.Marshal(&Command{Id: 3, Kind: &Command_MarkNode{MarkNode: &MarkNode{NodeId: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	top := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), plain...), 999, protowire.VarintType), 5)
	var d CommandDecoder
	for name, data := range map[string][]byte{"op": inOp, "kv command": inKV, "command": top} {
		if cmd, err := d.Decode(data); !errors.Is(err, ErrUnknownFields) {
			t.Errorf("%s: Decode = %v, %v; want ErrUnknownFields", name, cmd, err)
		}
	}
	if cmd, err := d.Decode(plain); err != nil || cmd.GetMarkNode().GetNodeId() != 4 {
		t.Errorf("a command without unknown fields: Decode = %v, %v", cmd, err)
	}
}

// TestCommandDecoderMatchesUnmarshal protects CommandDecoder's contract:
// whatever the bytes, it returns what proto.Unmarshal returns, one
// decoder reused across commands (nothing of one leaks into the next).
func TestCommandDecoderMatchesUnmarshal(t *testing.T) {
	var d CommandDecoder
	cases := decoderCases(t)
	for range 2 {
		for _, data := range cases {
			checkDecode(t, &d, data)
		}
	}
}

// TestCommandDecoderPutAllocatesNothing protects the point of the decoder:
// a put's command decodes without an allocation, its bytes aliasing the
// entry.
func TestCommandDecoderPutAllocatesNothing(t *testing.T) {
	data, err := proto.Marshal(putCommand())
	if err != nil {
		t.Fatal(err)
	}
	data = withID(data, 77)
	var d CommandDecoder
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := d.Decode(data); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("decoding a put allocates %v times, want 0", allocs)
	}
	cmd, _ := d.Decode(data) // the value ends just before the id's 2 bytes
	if cmd.GetId() != 77 || &cmd.GetKv().GetOps()[0].GetValue()[255] != &data[len(data)-3] {
		t.Fatalf("decoded id %d; value not aliasing the entry's data", cmd.GetId())
	}
}

// FuzzCommandDecoder checks the decoder against proto.Unmarshal on
// arbitrary bytes (go test -fuzz FuzzCommandDecoder ./internal/storepb/).
func FuzzCommandDecoder(f *testing.F) {
	for _, data := range decoderCases(f) {
		f.Add(data)
	}
	var d CommandDecoder
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, &d, data) })
}

// TestCommandDecoderKeepsRepeat protects replicas from diverging silently:
// an entry with a repeated INCR (a leader's coalesced run) decodes on the
// fast path with its repeat intact. A decoder that skipped field 17 would
// have every replica apply one INCR where the leader meant hundreds.
func TestCommandDecoderKeepsRepeat(t *testing.T) {
	incr := &concordpb.Op{Type: concordpb.OpType_OP_INCR, Key: []byte("counter"), IntDelta: -7, Repeat: 350}
	cmd := kvCommand(&KVCommand{Ops: []*concordpb.Op{
		{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}, incr,
		{Type: concordpb.OpType_OP_INCR, Key: []byte("counter"), IntDelta: 1, Repeat: 1<<32 - 1}}})
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var d CommandDecoder
	got, ok := d.decodeKV(data)
	if !ok {
		t.Fatal("a command with a repeated INCR left the fast path")
	}
	if !proto.Equal(got, cmd) {
		t.Fatalf("decoded\n %v\nwant\n %v", got, cmd)
	}
	if r := got.GetKv().GetOps()[1].GetRepeat(); r != 350 {
		t.Fatalf("repeat decoded as %d, want 350", r)
	}
	var op concordpb.Op
	if b, _ := proto.Marshal(incr); !DecodeOp(&op, b) || !proto.Equal(&op, incr) {
		t.Fatalf("DecodeOp gave %v, want %v", &op, incr)
	}
}

// TestCommandDecoderKeepsResultBudget: a leader's write command carries
// the result budget (max_result_bytes, version.ResultBudget) on every
// write, so it must decode on the fast path, with the budget intact: a
// fallback to proto.Unmarshal would cost every replica allocations on
// every entry.
func TestCommandDecoderKeepsResultBudget(t *testing.T) {
	cmd := kvCommand(&KVCommand{MaxValueBytes: 1 << 20, ExpiryOnStamps: true, MaxResultBytes: 63 << 20,
		Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_GET_DELETE, Key: []byte("k")}}})
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var d CommandDecoder
	got, ok := d.decodeKV(data)
	if !ok {
		t.Fatal("a command with max_result_bytes left the fast path")
	}
	if !proto.Equal(got, cmd) || got.GetKv().GetMaxResultBytes() != 63<<20 {
		t.Fatalf("decoded\n %v\nwant\n %v", got, cmd)
	}
}

// TestCommandDecoderKeepsFloatDeltaText: an INCRBYFLOAT's op carries its
// increment as text (version.IncrFloatText) and decodes on the fast path
// with the text intact, as proto.Unmarshal gives it.
func TestCommandDecoderKeepsFloatDeltaText(t *testing.T) {
	incr := &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte("f"), FloatDeltaText: []byte("3.0000000000000001")}
	cmd := kvCommand(&KVCommand{Ops: []*concordpb.Op{incr}})
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var d CommandDecoder
	got, ok := d.decodeKV(data)
	if !ok {
		t.Fatal("a command with float_delta_text left the fast path")
	}
	if !proto.Equal(got, cmd) {
		t.Fatalf("decoded\n %v\nwant\n %v", got, cmd)
	}
	var op concordpb.Op
	if b, _ := proto.Marshal(incr); !DecodeOp(&op, b) || !proto.Equal(&op, incr) {
		t.Fatalf("DecodeOp gave %v, want %v", &op, incr)
	}
}
