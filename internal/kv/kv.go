package kv

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/keys"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storage"
	"github.com/concord-kv/concord/internal/storepb"
)

// StateMachine applies KV commands for one shard.
type StateMachine struct {
	shard uint64
}

// New returns the state machine of shard.
func New(shard uint64) *StateMachine { return &StateMachine{shard: shard} }

// Apply applies cmd into b, an indexed batch (so reads see the writes of
// earlier commands in the same batch). desc is the shard's descriptor as of
// this entry; keys outside its hash range are refused.
func (sm *StateMachine) Apply(b *pebble.Batch, desc *concordpb.ShardDescriptor, cmd *storepb.Command) (*storepb.CommandResult, error) {
	switch k := cmd.GetKind().(type) {
	case *storepb.Command_Kv:
		return sm.applyKV(b, desc, cmd.GetUnixNanos(), k.Kv)
	case *storepb.Command_ExpireSessions:
		return &storepb.CommandResult{}, sm.expireSessions(b, k.ExpireSessions.GetIdleBeforeUnixNanos())
	default:
		return errResult(codes.InvalidArgument, "command %T is not a KV command", k), nil
	}
}

func (sm *StateMachine) applyKV(b *pebble.Batch, desc *concordpb.ShardDescriptor, now int64, c *storepb.KVCommand) (*storepb.CommandResult, error) {
	if c.GetSessionId() != 0 {
		var rec storepb.SessionRecord
		found, err := storage.GetProto(b, keys.Session(sm.shard, c.GetSessionId()), &rec)
		if err != nil {
			return nil, err
		}
		switch {
		case found && c.GetSeq() == rec.GetSeq():
			return rec.GetResult(), nil // a retry: answer as the first time
		case found && c.GetSeq() < rec.GetSeq():
			return errResult(codes.FailedPrecondition,
				"session %x: sequence %d is older than %d, already applied", c.GetSessionId(), c.GetSeq(), rec.GetSeq()), nil
		}
	}
	res, err := sm.applyOps(b, desc, c.GetOps())
	if err != nil {
		return nil, err
	}
	if c.GetSessionId() != 0 {
		rec := &storepb.SessionRecord{Seq: c.GetSeq(), Result: res, LastActiveUnixNanos: now}
		if err := storage.SetProto(b, keys.Session(sm.shard, c.GetSessionId()), rec); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// applyOps applies ops all or nothing: every op is checked before any is applied.
func (sm *StateMachine) applyOps(b *pebble.Batch, desc *concordpb.ShardDescriptor, ops []*concordpb.Op) (*storepb.CommandResult, error) {
	for _, op := range ops {
		if h := routing.Hash(op.GetKey()); h < desc.GetStartHash() || h > desc.GetEndHash() {
			return errResult(codes.InvalidArgument, "key %q does not belong to shard %d", op.GetKey(), sm.shard), nil
		}
	}
	res := &storepb.CommandResult{}
	for _, op := range ops {
		r, err := sm.applyOp(b, op)
		if err != nil {
			return nil, err
		}
		res.Results = append(res.Results, r)
	}
	return res, nil
}

func (sm *StateMachine) applyOp(b *pebble.Batch, op *concordpb.Op) (*concordpb.OpResult, error) {
	k := keys.User(sm.shard, op.GetKey())
	cur, exists, err := get(b, k)
	if err != nil {
		return nil, err
	}
	switch op.GetType() {
	case concordpb.OpType_OP_GET:
		return &concordpb.OpResult{Ok: exists, Value: cur}, nil
	case concordpb.OpType_OP_PUT:
		return &concordpb.OpResult{Ok: exists, Value: cur}, b.Set(k, op.GetValue(), nil)
	case concordpb.OpType_OP_DELETE:
		if exists {
			err = b.Delete(k, nil)
		}
		return &concordpb.OpResult{Ok: exists}, err
	case concordpb.OpType_OP_CAS:
		match := (op.GetExpectAbsent() && !exists) || (!op.GetExpectAbsent() && exists && bytes.Equal(cur, op.GetExpected()))
		res := &concordpb.OpResult{Ok: match, Exists: exists, Value: cur}
		switch {
		case !match:
		case op.GetDelete():
			if exists {
				err = b.Delete(k, nil)
			}
		default:
			err = b.Set(k, op.GetValue(), nil)
		}
		return res, err
	default:
		return nil, fmt.Errorf("kv: unknown op type %v", op.GetType())
	}
}

// expireSessions deletes the records of sessions idle since before t.
func (sm *StateMachine) expireSessions(b *pebble.Batch, t int64) error {
	lo, hi := keys.SessionSpan(sm.shard)
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var stale [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		var rec storepb.SessionRecord
		if _, err := storage.GetProto(b, it.Key(), &rec); err != nil {
			it.Close()
			return err
		}
		if rec.GetLastActiveUnixNanos() < t {
			stale = append(stale, append([]byte(nil), it.Key()...))
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// Get reads key of shard from r.
func Get(r pebble.Reader, shard uint64, key []byte) (value []byte, found bool, err error) {
	return get(r, keys.User(shard, key))
}

// Scan reads up to limit pairs of shard with keys in [start, end) in key
// order; an empty end means no bound.
func Scan(r pebble.Reader, shard uint64, start, end []byte, limit int) ([]*concordpb.KeyValue, error) {
	lo, hi := keys.UserSpan(shard, start, end)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var kvs []*concordpb.KeyValue
	for ok := it.First(); ok && len(kvs) < limit; ok = it.Next() {
		kvs = append(kvs, &concordpb.KeyValue{
			Key:   append([]byte(nil), keys.UserKey(shard, it.Key())...),
			Value: append([]byte(nil), it.Value()...),
		})
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return kvs, nil
}

func get(r pebble.Reader, k []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(k)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

func errResult(c codes.Code, format string, args ...any) *storepb.CommandResult {
	return &storepb.CommandResult{ErrorCode: uint32(c), ErrorMessage: fmt.Sprintf(format, args...)}
}
