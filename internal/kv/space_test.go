package kv

import (
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

// TestAddsData: the space alarm lets through only batches whose every op
// can only read or remove; one op that can store bytes refuses the batch.
func TestAddsData(t *testing.T) {
	op := func(typ concordpb.OpType) *concordpb.Op { return &concordpb.Op{Type: typ, Key: []byte("k")} }
	removing := []*concordpb.Op{op(concordpb.OpType_OP_GET), op(concordpb.OpType_OP_DELETE), op(concordpb.OpType_OP_GET_DELETE),
		op(concordpb.OpType_OP_DELETE_EXPIRED), op(concordpb.OpType_OP_CHECK),
		{Type: concordpb.OpType_OP_CAS, Key: []byte("k"), Expected: []byte("v"), Delete: true}}
	if AddsData(removing) {
		t.Fatal("a batch of reads, deletes, checks and a deleting CAS counts as adding data")
	}
	if AddsData(nil) {
		t.Fatal("an empty batch counts as adding data")
	}
	adding := []*concordpb.Op{op(concordpb.OpType_OP_PUT), {Type: concordpb.OpType_OP_CAS, Key: []byte("k"), Value: []byte("v")},
		op(concordpb.OpType_OP_INCR), op(concordpb.OpType_OP_INCR_FLOAT), op(concordpb.OpType_OP_APPEND),
		op(concordpb.OpType_OP_SET_RANGE), op(concordpb.OpType_OP_EXPIRE), op(concordpb.OpType(99))}
	for _, a := range adding {
		if !AddsData([]*concordpb.Op{a}) {
			t.Errorf("%v (delete %v) does not count as adding data", a.GetType(), a.GetDelete())
		}
		// One such op among removing ones refuses the whole batch.
		if !AddsData(append(append([]*concordpb.Op{}, removing...), a)) {
			t.Errorf("a batch of deletes with a %v does not count as adding data", a.GetType())
		}
	}
}
