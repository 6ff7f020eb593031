package pbcount

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// field is one field of a message a test builds: its number, wire type
// and value (the varint, or the bytes of a length-delimited one).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// encode encodes fields with protowire, in order.
func encode(fields ...field) []byte {
	var buf []byte
	for _, f := range fields {
		buf = protowire.AppendTag(buf, f.num, f.typ)
		switch f.typ {
		case protowire.VarintType:
			buf = protowire.AppendVarint(buf, f.v)
		case protowire.Fixed32Type:
			buf = protowire.AppendFixed32(buf, uint32(f.v))
		case protowire.Fixed64Type:
			buf = protowire.AppendFixed64(buf, f.v)
		case protowire.BytesType:
			buf = protowire.AppendBytes(buf, f.b)
		case protowire.StartGroupType:
			buf = protowire.AppendTag(buf, f.num, protowire.EndGroupType)
		}
	}
	return buf
}

// TestCountCountsOnlyDelimitedFieldsOfItsNumber: an element of a repeated
// message field is length-delimited, so the same number under another wire
// type, and other numbers, are not counted.
func TestCountCountsOnlyDelimitedFieldsOfItsNumber(t *testing.T) {
	msg := encode(
		field{num: 7, typ: protowire.BytesType, b: []byte("a")},
		field{num: 7, typ: protowire.VarintType, v: 300},
		field{num: 2, typ: protowire.BytesType, b: []byte("bc")},
		field{num: 7, typ: protowire.BytesType},
		field{num: 7, typ: protowire.Fixed64Type, v: 1},
		field{num: 7, typ: protowire.StartGroupType},
		field{num: 7, typ: protowire.BytesType, b: make([]byte, 200)},
	)
	for num, want := range map[protowire.Number]int{7: 3, 2: 1, 1: 0} {
		if got, ok := Count(msg, num); !ok || got != want {
			t.Errorf("Count(field %d) = %d, %v; want %d, true", num, got, ok, want)
		}
	}
	if got, ok := Count(nil, 7); !ok || got != 0 {
		t.Errorf("Count of the empty message = %d, %v; want 0, true", got, ok)
	}
}

// TestCountRefusesWhatDoesNotParse: a message cut inside a field, a
// length past its end or a field number 0 is refused, with no count, so a
// caller never bounds a message by a count of part of it.
func TestCountRefusesWhatDoesNotParse(t *testing.T) {
	whole := encode(
		field{num: 7, typ: protowire.BytesType, b: []byte("abc")},
		field{num: 1, typ: protowire.VarintType, v: 1 << 40},
	)
	for name, data := range map[string][]byte{
		"cut in a length-delimited value": whole[:3],
		"cut in a varint":                 whole[:len(whole)-1],
		"cut after a tag":                 whole[:6],
		"length past the end":             {7<<3 | 2, 5, 1},
		"field number 0":                  {0<<3 | 0, 1},
		"a lone end group":                {7<<3 | 4},
	} {
		if n, ok := Count(data, 7); ok || n != 0 {
			t.Errorf("%s: Count = %d, %v; want 0, false", name, n, ok)
		}
	}
}

// TestFieldsSteps: Fields yields each field's number and, for a
// length-delimited one asked for by number, its value without the length.
func TestFieldsSteps(t *testing.T) {
	msg := encode(
		field{num: 1, typ: protowire.VarintType, v: 5},
		field{num: 8, typ: protowire.BytesType, b: []byte("batch")},
		field{num: 8, typ: protowire.Fixed32Type, v: 9},
	)
	var nums []protowire.Number
	var vals []string
	f := Walk(msg)
	for f.Next() {
		nums = append(nums, f.Num())
		if v, ok := f.Bytes(8); ok {
			vals = append(vals, string(v))
		}
		if _, ok := f.Bytes(9); ok {
			t.Errorf("Bytes(9) matched field %d", f.Num())
		}
	}
	if !f.OK() || len(nums) != 3 || nums[0] != 1 || nums[1] != 8 || nums[2] != 8 {
		t.Fatalf("fields %v, ok %v; want [1 8 8], true", nums, f.OK())
	}
	if len(vals) != 1 || vals[0] != "batch" {
		t.Fatalf("values %q; want [batch]", vals)
	}
	bad := Walk(append(encode(field{num: 8, typ: protowire.BytesType, b: []byte("x")}), 8<<3|2, 9))
	if !bad.Next() || bad.Next() || bad.OK() {
		t.Fatal("a message whose second field is cut: want one field, then stop and not OK")
	}
	if bad.Next() {
		t.Fatal("Next after a bad field moved on")
	}
}

// FuzzCount builds a message from the fuzz input, cuts it somewhere, and
// checks Count against what was built: a cut at a field boundary counts
// the fields before it, any other cut is refused. Then it runs Count on
// the raw input: whatever proto.Unmarshal accepts, Count must parse too.
func FuzzCount(f *testing.F) {
	f.Add([]byte{0x7a, 0x01, 0x00, 0x08, 0x03}, uint16(3))
	f.Add([]byte{0x3a, 0x00, 0x3b, 0x3c}, uint16(1))
	f.Fuzz(func(t *testing.T, spec []byte, cut uint16) {
		fields := fieldsOf(spec)
		var msg []byte
		ends := map[int]int{0: 0} // a field boundary → elements of field 7 before it
		count := 0
		for _, fl := range fields {
			msg = append(msg, encode(fl)...)
			if fl.num == 7 && fl.typ == protowire.BytesType {
				count++
			}
			ends[len(msg)] = count
		}
		c := int(cut) % (len(msg) + 1)
		got, ok := Count(msg[:c], 7)
		want, boundary := ends[c]
		if ok != boundary || got != want {
			t.Fatalf("Count of %x (cut at %d of %d) = %d, %v; want %d, %v", msg[:c], c, len(msg), got, ok, want, boundary)
		}
		if proto.Unmarshal(spec, &emptypb.Empty{}) == nil {
			if _, ok := Count(spec, 7); !ok {
				t.Fatalf("proto.Unmarshal parses %x, Count does not", spec)
			}
		}
	})
}

// fieldsOf reads field specs from fuzz bytes, two bytes a field: the
// first picks a number (1 to 8) and a wire type, the second a value.
func fieldsOf(spec []byte) []field {
	types := []protowire.Type{protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType, protowire.StartGroupType}
	var fields []field
	for i := 0; i+1 < len(spec); i += 2 {
		fl := field{num: protowire.Number(spec[i]&7) + 1, typ: types[int(spec[i]>>3)%len(types)]}
		fl.v = uint64(spec[i+1]) << (spec[i+1] % 50)
		fl.b = make([]byte, spec[i+1]%20)
		fields = append(fields, fl)
	}
	return fields
}
