package multiraft

import (
	"fmt"
	"runtime"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// appMessage is a leader's append of n entries of size bytes each.
func appMessage(n, size int) *pb.Message {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(5)),
		LogTerm: new(uint64(5)), Index: new(uint64(99)), Commit: new(uint64(98))}
	for i := range n {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(5)), Index: new(uint64(100 + i)),
			Type: pb.EntryNormal.Enum(), Data: make([]byte, size)})
	}
	return m
}

// messageCases are encoded raft messages: the fast path's and the
// fallback's.
func messageCases(t testing.TB) [][]byte {
	app := appMessage(3, 40)
	app.Entries[1].Data = []byte{} // present but empty: non-nil after proto.Unmarshal
	app.Entries[2].Type = pb.EntryConfChangeV2.Enum()
	msgs := []*pb.Message{
		app,
		appMessage(0, 0),
		appMessage(1, 10),
		appMessage(smallAppend+2, 10), // more than an appendBlock holds
		{Type: pb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(3)), Term: new(uint64(5)), Index: new(uint64(120)),
			Reject: new(true), RejectHint: new(uint64(7)), LogTerm: new(uint64(4))},
		{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(5)), Commit: new(uint64(0)),
			Context: []byte("read-ctx")},
		{Type: pb.MsgHeartbeatResp.Enum(), Context: []byte{}},
		{Type: pb.MsgVote.Enum(), Term: new(uint64(6)), Vote: new(uint64(0)), Reject: new(false)},
		{Type: pb.MsgSnap.Enum(), Snapshot: &pb.Snapshot{Data: []byte("s"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(9))}}},
		{Type: pb.MsgStorageAppend.Enum(), Responses: []*pb.Message{{Type: pb.MsgAppResp.Enum()}}},
		{},
	}
	var out [][]byte
	for _, m := range msgs {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	// Shapes proto.Marshal does not write: a field twice, an enum value
	// raftpb does not define (kept as unknown by proto), an unknown field,
	// a wrong wire type, an entry with an unknown field, truncation.
	twice := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), out[0]...), 4, protowire.VarintType), 77)
	badType := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 999)
	unknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), out[2]...), 99, protowire.VarintType), 1)
	wire := protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 1)
	ent := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 77) // EntryType 77
	badEntry := protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), ent)
	ent = protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)
	unknownInEntry := protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), ent)
	return append(out, twice, badType, unknown, wire, badEntry, unknownInEntry, out[0][:len(out[0])-3], []byte{0x38})
}

// checkMessage fails t unless decodeMessage gives what proto.Unmarshal
// gives for data: the same error or none and an equal message (proto.Equal
// tells a present empty bytes field from an absent one in proto2), even
// once the decoded bytes were overwritten (the framed wire reuses its
// receive buffer: nothing decoded may alias it).
func checkMessage(t *testing.T, data []byte) {
	t.Helper()
	want := &pb.Message{}
	werr := proto.Unmarshal(data, want)
	buf := append([]byte(nil), data...)
	got, gerr := decodeMessage(buf)
	for i := range buf {
		buf[i] ^= 0xff
	}
	if werr == nil && gerr == errShortEntry && shortEntry(data) {
		return // the one refusal of what proto takes (decodeMessage)
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("decode %x: error %v, proto.Unmarshal's %v", data, gerr, werr)
	}
	if werr == nil && !proto.Equal(got, want) {
		t.Fatalf("decode %x:\n got  %v\n want %v", data, got, want)
	}
}

// TestDecodeMessageMatchesUnmarshal protects decodeMessage's contract:
// whatever the bytes, what proto.Unmarshal returns.
func TestDecodeMessageMatchesUnmarshal(t *testing.T) {
	for _, data := range messageCases(t) {
		checkMessage(t, data)
	}
}

// TestDecodeAppendAllocations protects the point of decodeMessage: an
// append of eight entries decodes in four allocations (its own copy of the
// bytes, message block, entry blocks, entry pointers), one of up to
// smallAppend entries in two (the copy, one block for the rest), an
// acknowledgement in one (nothing of it aliases the bytes, so no copy).
func TestDecodeAppendAllocations(t *testing.T) {
	for _, c := range []struct {
		m    *pb.Message
		want float64
	}{
		{appMessage(8, 300), 4},
		{appMessage(2, 300), 2},
		{appMessage(smallAppend, 300), 2},
		{appMessage(smallAppend+1, 300), 4},
		{&pb.Message{Type: pb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(5)), Index: new(uint64(9))}, 1},
	} {
		data, err := proto.Marshal(c.m)
		if err != nil {
			t.Fatal(err)
		}
		if got := testing.AllocsPerRun(100, func() {
			if _, err := decodeMessage(data); err != nil {
				t.Fatal(err)
			}
		}); got != c.want {
			t.Fatalf("%v with %d entries: %v allocations, want %v", c.m.GetType(), len(c.m.GetEntries()), got, c.want)
		}
	}
}

// FuzzDecodeMessage checks decodeMessage against proto.Unmarshal on
// arbitrary bytes (go test -fuzz FuzzDecodeMessage ./internal/multiraft/).
func FuzzDecodeMessage(f *testing.F) {
	for _, data := range messageCases(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkMessage(t, data) })
}

// BenchmarkDecodeMessage is the decode of each raft message a peer sends
// (Host.Deliver): an append of eight and one of two 300-byte entries, with
// proto.Unmarshal (as before) and with decodeMessage.
func BenchmarkDecodeMessage(b *testing.B) {
	for _, n := range []int{8, 2} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) { benchmarkDecodeMessage(b, n) })
	}
}

func benchmarkDecodeMessage(b *testing.B, n int) {
	data, err := proto.Marshal(appMessage(n, 300))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := proto.Unmarshal(data, &pb.Message{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeMessage", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := decodeMessage(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestShortEntriesRefused (found by review): a message of empty entries
// (two bytes each on the wire, some 120 decoded) made 60 times its size
// before the loop checked anything: 64 MB for 1 MiB, from anyone who knows
// the cluster's and a node's ids. An entry too short to hold a term and an
// index, which no raft log has, is refused before anything is made; the
// entries of real appends (appMessage: term, index, type, data) decode.
func TestShortEntriesRefused(t *testing.T) {
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.MsgApp))
	for range 512 << 10 {
		msg = append(msg, 7<<3|byte(protowire.BytesType), 0)
	}
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	m, err := decodeMessage(msg)
	runtime.ReadMemStats(&b)
	if err != errShortEntry {
		t.Fatalf("a message of %d empty entries: %d entries, %v; want errShortEntry", 512<<10, len(m.GetEntries()), err)
	}
	if n := b.TotalAlloc - a.TotalAlloc; n > uint64(len(msg)) {
		t.Fatalf("refusing %d bytes of empty entries allocated %d bytes", len(msg), n)
	}
	one := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1) // term, no index
	short := protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), one)
	if _, err := decodeMessage(short); err != errShortEntry {
		t.Fatalf("an entry of a term alone: %v; want errShortEntry", err)
	}
	data, err := proto.Marshal(appMessage(3, 0))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decodeMessage(data); err != nil || len(m.GetEntries()) != 3 {
		t.Fatalf("an append of three entries without data: %v, %v", m, err)
	}
}
