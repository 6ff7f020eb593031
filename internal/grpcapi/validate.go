package grpcapi

import (
	"cmp"
	"context"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/version"
)

// Limits on a single request, beyond the key and value limits of Limits.
const (
	maxBatchOps      = 1000
	defaultScanLimit = 1000
	maxScanLimit     = 10000
)

// DefaultMaxBatchBytes is the default Limits.MaxBatchBytes: the most bytes
// of keys, values and expected values one Batch may carry. The batch becomes
// one raft entry (the ops plus a few bytes of framing each, at most 1,000 ops:
// under 8 MiB + 64 KiB), which must fit in one RaftBatch on the wire
// (transport.DefaultMaxBatchBytes, 16 MiB, itself a quarter of the gRPC
// message limit) and in raft's flow control (a single entry over
// MaxSizePerMsgBytes or MaxInflightBytes still goes, alone). A test in this
// package checks the relation.
const DefaultMaxBatchBytes = 8 << 20

// Limits bounds the sizes of keys and values a request may carry; the node
// sets them from its flags, whose names the error texts cite.
type Limits struct {
	MaxKeyBytes   int // --max-key-bytes
	MaxValueBytes int // --max-value-bytes
	// MaxBatchBytes bounds the sum of a batch's keys, values and expected
	// values; 0 means DefaultMaxBatchBytes.
	MaxBatchBytes int
}

func (l Limits) checkKey(k []byte) error {
	switch {
	case len(k) == 0:
		return invalid("key is empty")
	case len(k) > l.MaxKeyBytes:
		return invalid("key is %d bytes; the limit is %d (--max-key-bytes)", len(k), l.MaxKeyBytes)
	}
	return nil
}

func (l Limits) checkValue(v []byte) error {
	if len(v) > l.MaxValueBytes {
		return invalid("value is %d bytes; the limit is %d (--max-value-bytes)", len(v), l.MaxValueBytes)
	}
	return nil
}

// checkBatch validates a batch and returns its shard; shardOf finds a key's
// shard.
// opGates are the op fields a batch may carry under the cluster's
// version: each reaches the log as it is, and a replica of a binary below
// the field's level would stop on it.
type opGates struct {
	// repeat: an INCR's repeat, set by a Concord node only (a leader, or a
	// node forwarding to one), once version.IncrRepeat allows it.
	repeat bool
	// floatText: an INCR_FLOAT's float_delta_text, once
	// version.IncrFloatText allows it.
	floatText bool
	// tentative: a PUT's or DELETE's tentative_version, set by a Concord
	// node only (its reconciler of available mode, or a node forwarding
	// to the leader), once version.Versions allows it. A forged one (hops
	// is the client's to set) is capped at the shard's highest stamp at
	// apply: no more than an ordinary write of the key now.
	tentative bool
}

func (l Limits) checkBatch(req *concordpb.BatchRequest, shardOf func([]byte) (ids.ShardID, error), gates opGates) (ids.ShardID, error) {
	ops, h := req.GetOps(), req.GetHeader()
	switch {
	case len(ops) == 0:
		return 0, invalid("batch has no operations")
	case len(ops) > maxBatchOps:
		return 0, invalid("batch has %d operations; the limit is %d", len(ops), maxBatchOps)
	case h.GetSessionId() != 0 && h.GetSeq() == 0:
		return 0, invalid("a request with a session must carry a positive sequence number")
	case h.GetSessionFloor() != 0 && h.GetSessionId() == 0:
		return 0, invalid("a session floor needs a session")
	case h.GetSessionFloor() > h.GetSeq():
		return 0, invalid("session floor %d is above the request's sequence number %d", h.GetSessionFloor(), h.GetSeq())
	}
	var shard ids.ShardID
	size := 0
	for i, op := range ops {
		if err := l.checkOp(i, op, gates); err != nil {
			return 0, err
		}
		s, err := shardOf(op.GetKey())
		if err != nil {
			return 0, err
		}
		if i > 0 && s != shard {
			return 0, invalid("batch keys span shards %d and %d; a batch must stay within one shard", shard, s)
		}
		shard = s
		size += len(op.GetKey()) + len(op.GetValue()) + len(op.GetExpected())
	}
	if err := kv.CheckSkips(ops); err != nil {
		return 0, invalid("%v", err)
	}
	if limit := cmp.Or(l.MaxBatchBytes, DefaultMaxBatchBytes); size > limit {
		return 0, invalid("batch is %d bytes of keys and values; the limit is %d", size, limit)
	}
	return shard, nil
}

// checkOp validates operation i of a batch on its own: no field this
// binary does not know, the state machine's own rules (kv.CheckOp: known
// type and condition, times and offsets not negative, options that fit the
// op), then what only a node may send, and only once the cluster's version
// allows it (gates: repeat, which a leader, or a node forwarding to one,
// sets when it joins a run of INCRs into one op, a client's would skip the
// version gate that keeps it from older replicas; float_delta_text), then
// the sizes. A SET_RANGE whose end
// lies beyond the value size limit could only fail: it is refused here. An
// APPEND's result is checked at apply (OP_ERROR_TOO_LARGE), where the
// current value is known.
func (l Limits) checkOp(i int, op *concordpb.Op, gates opGates) error {
	if len(op.ProtoReflect().GetUnknown()) > 0 {
		// The op becomes the raft command as it is, and every replica
		// refuses to apply a command with a field it does not know
		// (storepb.ErrUnknownFields), which stops its node.
		return invalid("operation %d has a field this server does not know (a newer client's or node's): run a newer concord binary on the cluster to use it", i)
	}
	if err := kv.CheckOp(op); err != nil {
		return invalid("operation %d: %v", i, err)
	}
	if len(op.GetFloatDeltaText()) > 0 && !gates.floatText {
		return invalid("operation %d: float_delta_text needs cluster version %d (version.IncrFloatText): every node must run a binary that applies it; send float_delta", i, version.IncrFloatText)
	}
	if op.GetTentativeVersion() != 0 && !gates.tentative {
		return invalid("operation %d: tentative_version is set only by Concord nodes (available mode's reconciler), once the cluster version allows it (%d, version.Versions)", i, version.Versions)
	}
	if op.GetRepeat() != 0 && !gates.repeat {
		// Even 1 ("once"): the op would reach the log with field 17, on
		// which a replica of a binary below version.IncrRepeat stops.
		return invalid("operation %d: repeat %d: repeat is set only by Concord nodes, once the cluster version allows it; send each INCR (or one by the sum)", i, op.GetRepeat())
	}
	if err := l.checkKey(op.GetKey()); err != nil {
		return err
	}
	if err := l.checkValue(op.GetValue()); err != nil {
		return err
	}
	if err := l.checkValue(op.GetFloatDeltaText()); err != nil {
		return err
	}
	if op.GetType() == concordpb.OpType_OP_SET_RANGE && op.GetOffset() > int64(l.MaxValueBytes)-int64(len(op.GetValue())) {
		return invalid("operation %d: offset %d plus %d bytes is beyond the value size limit %d (--max-value-bytes)",
			i, op.GetOffset(), len(op.GetValue()), l.MaxValueBytes)
	}
	return l.checkValue(op.GetExpected())
}

// readBudget returns the budget of one read under ctx: the caller's
// (kv.WithBudget), or kv.MaxReadBytes of its own.
func readBudget(ctx context.Context) *kv.Budget {
	if b := kv.BudgetFrom(ctx); b != nil {
		return b
	}
	return kv.NewBudget(kv.MaxReadBytes, nil)
}
