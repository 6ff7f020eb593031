package client

import (
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

// TestTakeBatchBoundsCalls: one message never carries more calls and
// batch ops than a node decodes (frame.MaxStreamCalls; past it the node
// closes the connection), however small the calls are.
func TestTakeBatchBoundsCalls(t *testing.T) {
	get := func(id uint64) *pendingCall {
		return &pendingCall{msg: &concordpb.StreamCall{Id: id, Request: &concordpb.StreamCall_Get{Get: &concordpb.GetRequest{Key: []byte("k")}}}}
	}
	batch := func(id uint64, ops int) *pendingCall {
		b := &concordpb.BatchRequest{}
		for range ops {
			b.Ops = append(b.Ops, &concordpb.Op{Key: []byte("k")})
		}
		return &pendingCall{msg: &concordpb.StreamCall{Id: id, Request: &concordpb.StreamCall_Batch{Batch: b}}}
	}
	m := &streamMux{}
	for i := range frame.MaxStreamCalls + 10 {
		m.queue = append(m.queue, get(uint64(i+1)))
	}
	total := len(m.queue)
	for taken := 0; taken < total; {
		b := m.takeBatch()
		if len(b) == 0 || len(b) > frame.MaxStreamCalls {
			t.Fatalf("a message of %d calls (at most %d)", len(b), frame.MaxStreamCalls)
		}
		taken += len(b)
	}
	// Batches count with their ops.
	m = &streamMux{}
	for i := range 200 {
		m.queue = append(m.queue, batch(uint64(i+1), 1000))
	}
	b := m.takeBatch()
	elems := 0
	for _, p := range b {
		elems += 1 + len(p.msg.GetBatch().GetOps())
	}
	if elems > frame.MaxStreamCalls || len(b) == 0 {
		t.Fatalf("a message of %d calls and ops (at most %d)", elems, frame.MaxStreamCalls)
	}
}
