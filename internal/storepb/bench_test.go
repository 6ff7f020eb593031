package storepb

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// putCommand is one client Put as the leader proposes it: 16-byte key,
// 256-byte value, with a session.
func putCommand() *Command {
	return &Command{Id: 1 << 40, UnixNanos: 1_700_000_000_000_000_000, Kind: &Command_Kv{Kv: &KVCommand{
		SessionId: 42, Seq: 7,
		Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: make([]byte, 16), Value: make([]byte, 256)}},
	}}}
}

// BenchmarkCommandMarshal is the encode of every proposal (one per write).
func BenchmarkCommandMarshal(b *testing.B) {
	c := putCommand()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := proto.Marshal(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommandUnmarshal is the decode at apply, on every replica, as it
// was before CommandDecoder.
func BenchmarkCommandUnmarshal(b *testing.B) {
	data, err := proto.Marshal(putCommand())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var c Command
		if err := proto.Unmarshal(data, &c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommandDecode is the decode at apply as the replica does it
// now: CommandDecoder, structs reused, bytes aliasing the entry.
func BenchmarkCommandDecode(b *testing.B) {
	data, err := proto.Marshal(putCommand())
	if err != nil {
		b.Fatal(err)
	}
	var d CommandDecoder
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := d.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
