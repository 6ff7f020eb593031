package multiraft

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/storepb"
)

// A proposal's bytes must decode to the caller's command with the host's
// id, whatever Id the caller's command carried, and leave that command as
// it was: Propose no longer clones it.
func TestMarshalWithID(t *testing.T) {
	if n := (&storepb.Command{}).ProtoReflect().Descriptor().Fields().ByName("id").Number(); n != commandIDField {
		t.Fatalf("storepb.Command.id is field %d, marshalWithID writes field %d", n, commandIDField)
	}
	for _, callerID := range []uint64{0, 7, 1 << 62} {
		cmd := &storepb.Command{Id: callerID, UnixNanos: 1234, Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
			Ops: []*concordpb.Op{{Type: concordpb.OpType_OP_PUT, Key: []byte("k"), Value: []byte("v")}}}}}
		before := proto.Clone(cmd)
		data, err := marshalWithID(cmd, 1<<40+3)
		if err != nil {
			t.Fatal(err)
		}
		var got storepb.Command
		if err := proto.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if got.GetId() != 1<<40+3 {
			t.Fatalf("caller id %d: decoded id %d, want %d", callerID, got.GetId(), uint64(1<<40+3))
		}
		got.Id = callerID
		if !proto.Equal(&got, cmd) {
			t.Fatalf("caller id %d: decoded %v, want %v with the new id", callerID, &got, cmd)
		}
		if !proto.Equal(cmd, before) {
			t.Fatalf("marshalWithID changed the caller's command: %v, was %v", cmd, before)
		}
	}
}
