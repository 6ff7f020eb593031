package multiraft

import (
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/internal/raftwire"
)

// randomMessage is a message of any defined type with each optional field
// unset, zero or not, and entries of nil, empty, small or large data. An
// entry's term and index are always set (zero or not), as in every raft
// log: the decoder refuses an entry too short to hold them (decodeMessage).
func randomMessage(r *rand.Rand) *pb.Message {
	opt := func() *uint64 {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return new(uint64(0))
		}
		return new(r.Uint64() >> r.IntN(64))
	}
	data := func(max int) []byte {
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
	m := &pb.Message{To: opt(), From: opt(), Term: opt(), LogTerm: opt(), Index: opt(), Commit: opt(),
		RejectHint: opt(), Vote: opt(), Context: data(32)}
	if r.IntN(6) > 0 {
		m.Type = new(pb.MessageType(r.IntN(len(pb.MessageType_name))))
	}
	if r.IntN(2) == 0 {
		m.Reject = new(r.IntN(2) == 0)
	}
	for range r.IntN(4) {
		set := func() *uint64 {
			if v := opt(); v != nil {
				return v
			}
			return new(uint64(0))
		}
		e := &pb.Entry{Term: set(), Index: set(), Data: data(600)}
		if r.IntN(2) == 0 {
			e.Type = new(pb.EntryType(r.IntN(len(pb.EntryType_name))))
		}
		if r.IntN(40) == 0 {
			e.Data = make([]byte, 2<<20) // larger than a frame reader's kept buffer
		}
		m.Entries = append(m.Entries, e)
	}
	return m
}

// The sender's hand-written encoding (raftwire) must be what this
// receiver's fast decoder takes, and decode to the message sent: every
// message raftwire encodes is one decodeMessageFast handles (no proto
// fallback), and both it and proto.Unmarshal give back an equal message.
func TestEncodeThenDecodeFast(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 3000 {
		m := randomMessage(r)
		checkEncodeDecode(t, m, true)
	}
}

func checkEncodeDecode(t testing.TB, m *pb.Message, wantFast bool) {
	t.Helper()
	n, ok := raftwire.Size(m)
	if !ok {
		t.Fatalf("raftwire refused %v", m)
	}
	data := raftwire.Append(make([]byte, 0, n), m)
	var viaProto pb.Message
	if err := proto.Unmarshal(data, &viaProto); err != nil || !proto.Equal(&viaProto, m) {
		t.Fatalf("proto.Unmarshal: %v, %v; want %v", &viaProto, err, m)
	}
	fast, ok := decodeMessageFast(data)
	if wantFast && !ok {
		t.Fatalf("decodeMessageFast refused the encoding of %v", m)
	}
	if ok && !proto.Equal(fast, m) {
		t.Fatalf("decodeMessageFast: %v, want %v", fast, m)
	}
}

// FuzzEncodeThenDecode: any message proto makes of the input that raftwire
// encodes reads back equal through both decoders; the fast one must take
// it whenever its enum values are ones raftpb defines.
func FuzzEncodeThenDecode(f *testing.F) {
	for _, data := range messageCases(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.Message
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		if _, ok := raftwire.Size(&m); !ok {
			return
		}
		checkEncodeDecode(t, &m, enumsDefined(&m))
	})
}

// enumsDefined says whether m's enum values are all ones raftpb defines
// (proto.Unmarshal sets others too; the fast decoder leaves them to it).
func enumsDefined(m *pb.Message) bool {
	if _, ok := pb.MessageType_name[int32(m.GetType())]; !ok {
		return false
	}
	for _, e := range m.Entries {
		if _, ok := pb.EntryType_name[int32(e.GetType())]; !ok {
			return false
		}
	}
	return true
}
