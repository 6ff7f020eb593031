package multiraft

import (
	"testing"
	"unsafe"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/concord-kv/concord/internal/raftwire"
)

// TestDecodedSizesCoverBlocks keeps raftwire's decoded sizes, which the
// transport's decode budget and the inbox bound count, true to what
// decodeMessage allocates: a message's block and its inbox slot, an
// entry's block and its pointer. If a block grows past them, the budget
// would let more through than it says.
func TestDecodedSizesCoverBlocks(t *testing.T) {
	msg := unsafe.Sizeof(messageBlock{}) + unsafe.Sizeof(inMsg{})
	ent := unsafe.Sizeof(entryBlock{}) + unsafe.Sizeof((*pb.Entry)(nil))
	if msg > raftwire.DecodedMessageBytes || ent > raftwire.DecodedEntryBytes {
		t.Fatalf("a decoded message takes %d bytes (counted %d), an entry %d (counted %d)",
			msg, raftwire.DecodedMessageBytes, ent, raftwire.DecodedEntryBytes)
	}
	t.Logf("message %d of %d bytes, entry %d of %d", msg, raftwire.DecodedMessageBytes, ent, raftwire.DecodedEntryBytes)
}
