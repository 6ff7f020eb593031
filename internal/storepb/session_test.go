package storepb

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// sessionRecordCases are encodings of session records: as the state
// machine writes them (one at a time and windowed, with results), and
// the odd ones proto.Unmarshal reads its own way (the field twice, of
// another wire type, unknown fields, cut short).
func sessionRecordCases(t testing.TB) [][]byte {
	result := &CommandResult{Results: []*concordpb.OpResult{{Ok: true, Value: []byte("a stored value")}}}
	var out [][]byte
	for _, rec := range []*SessionRecord{
		{},
		{Seq: 7, Result: result, LastActiveUnixNanos: 1_700_000_000_123_456_789},
		{Seq: 1, LastActiveUnixNanos: -5},
		{Floor: 3, LastActiveUnixNanos: 42, Window: []*SessionResult{{Seq: 3, Result: result}, {Seq: 4, Result: result}}},
		{Seq: 2, Result: result}, // never active: 0
	} {
		data, err := proto.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	base := out[1]
	twice := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 3, protowire.VarintType), 99)
	otherType := protowire.AppendFixed64(protowire.AppendTag(append([]byte(nil), base...), 3, protowire.Fixed64Type), 77)
	unknown := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), base...), 40, protowire.BytesType), []byte("x"))
	return append(out, twice, otherType, unknown, base[:len(base)-1], base[:1], []byte{0x18})
}

// checkLastActive fails unless SessionLastActive reads data as
// proto.Unmarshal does: the same time wherever proto.Unmarshal reads the
// record.
func checkLastActive(t *testing.T, data []byte) {
	var rec SessionRecord
	uerr := proto.Unmarshal(data, &rec)
	got, err := SessionLastActive(data)
	switch {
	case uerr == nil && err != nil:
		t.Fatalf("%x: SessionLastActive refused a record proto.Unmarshal reads: %v", data, err)
	case uerr == nil && got != rec.GetLastActiveUnixNanos():
		t.Fatalf("%x: last active %d, proto.Unmarshal reads %d", data, got, rec.GetLastActiveUnixNanos())
	case uerr != nil && err == nil:
		// Only past the framing: a skipped field whose content does not
		// parse, which SessionLastActive does not look into.
		if _, ferr := framing(data); ferr != nil {
			t.Fatalf("%x: bad framing read as %d, proto.Unmarshal refuses it: %v", data, got, uerr)
		}
	}
}

// framing walks data's top-level fields, as a check on what
// SessionLastActive may accept.
func framing(data []byte) (int, error) {
	fields := 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, data[n:])
		if m < 0 {
			return 0, protowire.ParseError(m)
		}
		data, fields = data[n+m:], fields+1
	}
	return fields, nil
}

// TestSessionLastActiveAsUnmarshal: session expiry decodes only the
// activity time of each record, and must expire exactly the records a
// full unmarshal would (every replica, of any binary, the same set).
func TestSessionLastActiveAsUnmarshal(t *testing.T) {
	for _, data := range sessionRecordCases(t) {
		checkLastActive(t, data)
	}
}

func FuzzSessionLastActive(f *testing.F) {
	for _, data := range sessionRecordCases(f) {
		f.Add(data)
	}
	f.Fuzz(checkLastActive)
}
