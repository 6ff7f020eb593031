package raftwire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The encoder writes field numbers of its own: they must be raft.proto's.
func TestFieldNumbers(t *testing.T) {
	check := func(md protoreflect.MessageDescriptor, want map[string]protoreflect.FieldNumber) {
		for name, num := range want {
			f := md.Fields().ByName(protoreflect.Name(name))
			if f == nil || f.Number() != num {
				t.Errorf("%s.%s: descriptor %v, encoder writes field %d", md.Name(), name, f, num)
			}
		}
		if md.Fields().Len() != len(want) {
			t.Errorf("%s has %d fields, the encoder knows %d: a new field would be dropped", md.Name(), md.Fields().Len(), len(want))
		}
	}
	check((&pb.Message{}).ProtoReflect().Descriptor(), map[string]protoreflect.FieldNumber{
		"type": fType, "to": fTo, "from": fFrom, "term": fTerm, "logTerm": fLogTerm, "index": fIndex,
		"entries": fEntries, "commit": fCommit, "snapshot": fSnapshot, "reject": fReject,
		"rejectHint": fRejectHint, "context": fContext, "vote": fVote, "responses": 14})
	check((&pb.Entry{}).ProtoReflect().Descriptor(), map[string]protoreflect.FieldNumber{
		"Type": eType, "Term": eTerm, "Index": eIndex, "Data": eData})
}

// RandomMessage returns a message of any type with each optional field
// set or not, zero or not, entries of any size (nil, empty or large data)
// and sometimes an undefined enum value, which proto still encodes.
func RandomMessage(r *rand.Rand) *pb.Message {
	m := &pb.Message{}
	if r.IntN(8) > 0 {
		t := pb.MessageType(r.IntN(len(pb.MessageType_name)))
		if r.IntN(20) == 0 {
			t = pb.MessageType(r.Int32N(1000) - 500) // negative: a 10-byte varint
		}
		m.Type = &t
	}
	for _, f := range []**uint64{&m.To, &m.From, &m.Term, &m.LogTerm, &m.Index, &m.Commit, &m.RejectHint, &m.Vote} {
		*f = randUint(r)
	}
	if r.IntN(3) == 0 {
		m.Reject = new(r.IntN(2) == 0)
	}
	m.Context = randBytes(r, 64)
	for range r.IntN(4) {
		e := &pb.Entry{Term: randUint(r), Index: randUint(r), Data: randBytes(r, 4096)}
		if r.IntN(2) == 0 {
			e.Type = new(pb.EntryType(r.IntN(len(pb.EntryType_name))))
		}
		if r.IntN(50) == 0 {
			e.Data = bytes.Repeat([]byte{'x'}, 1<<20+r.IntN(100)) // a large entry
		}
		m.Entries = append(m.Entries, e)
	}
	if r.IntN(10) == 0 {
		m.Entries = []*pb.Entry{} // empty, not nil: encodes as nothing, as with proto
	}
	return m
}

func randUint(r *rand.Rand) *uint64 {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return new(uint64(0))
	case 2:
		return new(uint64(math.MaxUint64 - r.Uint64N(3)))
	}
	return new(r.Uint64N(1 << (r.IntN(63) + 1)))
}

func randBytes(r *rand.Rand, max int) []byte {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, 1+r.IntN(max))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// roundTrip encodes m after a prefix and checks that the bytes are Size
// long, leave the prefix alone, and unmarshal to m.
func roundTrip(t testing.TB, m *pb.Message) []byte {
	t.Helper()
	n, ok := Size(m)
	if !ok {
		t.Fatalf("Size refused %v", m)
	}
	prefix := []byte("prefix")
	buf := Append(append([]byte(nil), prefix...), m)
	if !bytes.Equal(buf[:len(prefix)], prefix) || len(buf)-len(prefix) != n {
		t.Fatalf("Append wrote %d bytes after the prefix (%q), Size said %d", len(buf)-len(prefix), buf[:len(prefix)], n)
	}
	data := buf[len(prefix):]
	var got pb.Message
	if err := proto.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v: %v", m, err)
	}
	if !proto.Equal(&got, m) {
		t.Fatalf("decoded %v, want %v", &got, m)
	}
	if want := proto.Size(m); n != want {
		t.Fatalf("Size %d, proto.Size %d for %v", n, want, m)
	}
	return data
}

// TestRoundTrip: random messages of every type, with unset, zero, empty
// and large fields, read back through proto.Unmarshal as they were.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		roundTrip(t, RandomMessage(r))
	}
	roundTrip(t, &pb.Message{})
}

// A snapshot, responses or unknown fields are proto's: Size refuses them.
func TestRefuses(t *testing.T) {
	unknown := &pb.Message{Type: pb.MsgApp.Enum()}
	unknown.ProtoReflect().SetUnknown(protoreflect.RawFields{15<<3 | 0, 1})
	unknownEntry := &pb.Entry{}
	unknownEntry.ProtoReflect().SetUnknown(protoreflect.RawFields{15<<3 | 0, 1})
	for name, m := range map[string]*pb.Message{
		"snapshot":      {Type: pb.MsgSnap.Enum(), Snapshot: &pb.Snapshot{}},
		"responses":     {Type: pb.MsgStorageAppend.Enum(), Responses: []*pb.Message{{}}},
		"unknown":       unknown,
		"unknown entry": {Entries: []*pb.Entry{unknownEntry}},
		"nil entry":     {Entries: []*pb.Entry{nil}},
	} {
		if _, ok := Size(m); ok {
			t.Errorf("%s: Size accepted a message it cannot encode", name)
		}
	}
}

// FuzzRoundTrip: any message proto.Unmarshal makes of the input that Size
// accepts encodes to bytes that unmarshal to an equal message.
func FuzzRoundTrip(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		m := RandomMessage(r)
		if len(m.Entries) > 0 && len(m.Entries[0].Data) > 1<<16 {
			continue
		}
		data, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.Message
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		if _, ok := Size(&m); !ok {
			return
		}
		roundTrip(t, &m)
	})
}

// TestDecodedOverheadCountsEntries: what a receiver counts of an encoded
// message (DecodedOverhead) is what its sender counted of it (Overhead),
// so a batch a sender cut within the budget passes the receiver's check;
// bytes that do not parse are refused.
func TestDecodedOverheadCountsEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		m := RandomMessage(r)
		if _, ok := Size(m); !ok {
			continue
		}
		got, ok := DecodedOverhead(Append(nil, m))
		if want := Overhead(m); !ok || got != want {
			t.Fatalf("%v: DecodedOverhead %d, %v; Overhead %d", m, got, ok, want)
		}
	}
	if _, ok := DecodedOverhead([]byte{7<<3 | 2, 5, 1}); ok {
		t.Fatal("a truncated entry parsed")
	}
}
