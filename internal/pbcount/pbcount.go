// Package pbcount steps over the fields of an encoded protobuf message
// without decoding it, so that a decoder can count the elements of its
// repeated fields and refuse a message that holds more than its bounds
// before it allocates per element: a two-byte element on the wire can cost
// a hundred decoded, so counting first is what keeps a receiver's memory
// bounded by its input (the raft wires, the gRPC server codec, the
// client-call decoder).
//
// It is one routine on purpose: each of those decoders once carried its
// own copy of this loop, and a fix to one (a wire type not checked, a
// truncated value not refused) had to be found and made four times.
package pbcount

import "google.golang.org/protobuf/encoding/protowire"

// Fields steps over the fields of one message, in order. The zero value
// is an empty message; make one with Walk.
type Fields struct {
	rest []byte           // what is not stepped over yet
	num  protowire.Number // the current field's number
	typ  protowire.Type   // its wire type
	val  []byte           // its value as encoded (a length-delimited one with its length)
	bad  bool             // the rest did not parse
}

// Walk returns a Fields positioned before the first field of data.
func Walk(data []byte) Fields {
	return Fields{rest: data}
}

// Next moves to the next field: false at the end of the message, or where
// what is left does not parse (then OK reports false).
func (f *Fields) Next() bool {
	if len(f.rest) == 0 || f.bad {
		return false
	}
	num, typ, l := protowire.ConsumeTag(f.rest)
	if l < 0 {
		f.bad = true
		return false
	}
	f.rest = f.rest[l:]
	l = protowire.ConsumeFieldValue(num, typ, f.rest)
	if l < 0 {
		f.bad = true
		return false
	}
	f.num, f.typ, f.val = num, typ, f.rest[:l]
	f.rest = f.rest[l:]
	return true
}

// Num is the current field's number.
func (f *Fields) Num() protowire.Number { return f.num }

// Bytes returns the current field's value when it is the length-delimited
// field num (a message, bytes or string): the only wire type a repeated
// message field takes, so the only one an element count counts.
func (f *Fields) Bytes(num protowire.Number) ([]byte, bool) {
	if f.num != num || f.typ != protowire.BytesType {
		return nil, false
	}
	v, _ := protowire.ConsumeBytes(f.val) // Next has checked it parses
	return v, true
}

// OK reports whether every field stepped over so far parsed: after Next
// has returned false, whether the whole message did.
func (f *Fields) OK() bool { return !f.bad }

// Count counts the occurrences of the length-delimited field num in a
// message; false if the message does not parse.
func Count(data []byte, num protowire.Number) (int, bool) {
	n := 0
	f := Walk(data)
	for f.Next() {
		if _, ok := f.Bytes(num); ok {
			n++
		}
	}
	if !f.OK() {
		return 0, false
	}
	return n, true
}
