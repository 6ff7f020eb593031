package transport

import (
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/concord-kv/concord/api/concordpb"
)

// emptyEnvelopes is a RaftBatch of n empty envelopes: two bytes each on
// the wire, each of which decodes into a 72-byte envelope and a pointer.
func emptyEnvelopes(n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, batchMessagesField<<3|byte(protowire.BytesType), 0)
	}
	return b
}

// TestDecodeBatchBoundsMessages: a frame of more messages than any sender
// puts in one (maxBatch) by far is refused before anything is allocated
// for them; before, 1 MiB of empty envelopes made the decoder keep ~40 MiB
// for the connection's life, so one 64 MiB frame, under the frame limit,
// ~2.5 GiB.
func TestDecodeBatchBoundsMessages(t *testing.T) {
	for name, data := range map[string][]byte{
		"messages":              emptyEnvelopes(512 << 10),
		"messages then garbage": append(emptyEnvelopes(maxRecvBatch), 0xff),
	} {
		var d batchDecoder
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		_, err := d.decode(data)
		runtime.ReadMemStats(&b)
		if err == nil {
			t.Fatalf("%s: decoded", name)
		}
		if n := b.TotalAlloc - a.TotalAlloc; n > uint64(len(data)) {
			t.Fatalf("%s: refusing a %d-byte frame allocated %d bytes", name, len(data), n)
		}
	}
	var d batchDecoder
	if b, err := d.decode(emptyEnvelopes(maxRecvBatch)); err != nil || len(b.GetMessages()) != maxRecvBatch {
		t.Fatalf("%d messages: %d decoded, %v", maxRecvBatch, len(b.GetMessages()), err)
	}
}

// TestRaftConnTooManyMessages: over a real connection, a frame of more
// messages than a batch may carry closes the connection and delivers
// none of them; a good frame is delivered after it.
func TestRaftConnTooManyMessages(t *testing.T) {
	addr, rec := receiver(t, Config{})
	hb := mustMarshalMsg(t, heartbeat(2))
	flood := testBatch(t)
	for range maxRecvBatch + 1 {
		flood.Messages = append(flood.Messages, &concordpb.RaftEnvelope{ShardId: 1, Message: hb})
	}
	closedByPeer(t, rawConn(t, addr, frames(t, "", flood)), "too many messages")
	if n := rec.messages(); n != 0 {
		t.Fatalf("%d messages delivered from a frame of too many", n)
	}
	good := testBatch(t)
	good.Messages = []*concordpb.RaftEnvelope{{ShardId: 1, Message: hb}}
	rawConn(t, addr, frames(t, "", good))
	waitFor(t, "a good frame after the flood", func() bool { return rec.messages() == 1 })
}
