package grpcapi

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
	"github.com/concord-kv/concord/internal/mutant"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
)

// KV implements the KV gRPC service. Mutations go through raft on the shard
// leader (forwarded there as a Batch if this node does not lead the shard);
// linearizable reads confirm leadership with ReadIndex; stale reads read the
// local replica.
type KV struct {
	concordpb.UnimplementedKVServer
	b      KVBackend
	limits Limits
}

// NewKV returns the KV service of b, refusing keys and values over limits.
func NewKV(b KVBackend, limits Limits) *KV { return &KV{b: b, limits: limits} }

// Get reads one key, at the leader unless the read may be stale.
func (s *KV) Get(ctx context.Context, req *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if err := s.limits.checkKey(req.GetKey()); err != nil {
		return nil, err
	}
	shard, err := shardOf(s.b, req.GetKey())
	if err != nil {
		return nil, err
	}
	if mutant.Enabled && mutant.On(mutant.FollowerRead) && s.b.HasReplica(shard) {
		req.Header = &concordpb.RequestHeader{Consistency: concordpb.Consistency_STALE} // serve here, no barrier
	}
	if s.canReadLocally(req.GetHeader(), shard) {
		v, at, found, err := s.localGet(ctx, req.GetHeader(), shard, req.GetKey())
		if err != nil {
			return nil, err
		}
		return &concordpb.GetResponse{Header: header(s.b, shard), Found: found, Value: v, ExpireAtUnixMs: at}, nil
	}
	target := s.readTarget(req.GetHeader(), shard)
	c, err := kvClientFor(s.b, target, req.GetHeader().GetHops(), shard)
	if err != nil {
		return nil, err
	}
	return forward(ctx, target, func(ctx context.Context) (*concordpb.GetResponse, error) {
		return c.Get(ctx, &concordpb.GetRequest{Header: forwardedHeader(req.GetHeader()), Key: req.GetKey()})
	})
}

// Put is a one-op Batch.
func (s *KV) Put(ctx context.Context, req *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: req.GetKey(), Value: req.GetValue(), TtlMs: req.GetTtlMs()}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.PutResponse{Header: hdr, PrevExists: res.GetOk(), PrevValue: res.GetValue()}, nil
}

// Delete is a one-op Batch.
func (s *KV) Delete(ctx context.Context, req *concordpb.DeleteRequest) (*concordpb.DeleteResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: req.GetKey()}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.DeleteResponse{Header: hdr, Existed: res.GetOk()}, nil
}

// CompareAndSwap is a one-op Batch.
func (s *KV) CompareAndSwap(ctx context.Context, req *concordpb.CompareAndSwapRequest) (*concordpb.CompareAndSwapResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_CAS, Key: req.GetKey(), Value: req.GetValue(),
		Expected: req.GetExpected(), ExpectAbsent: req.GetExpectAbsent(), Delete: req.GetDelete()}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.CompareAndSwapResponse{Header: hdr, Succeeded: res.GetOk(),
		CurrentExists: res.GetExists(), CurrentValue: res.GetValue()}, nil
}

func (s *KV) apply(ctx context.Context, h *concordpb.RequestHeader, op *concordpb.Op) (*concordpb.OpResult, *concordpb.ResponseHeader, error) {
	resp, err := s.Batch(ctx, &concordpb.BatchRequest{Header: h, Ops: []*concordpb.Op{op}})
	if err != nil {
		return nil, nil, err
	}
	if len(resp.GetResults()) != 1 {
		return nil, nil, status.Errorf(codes.Internal, "expected one result, got %d", len(resp.GetResults()))
	}
	return resp.GetResults()[0], resp.GetHeader(), nil
}

// Batch applies ops on keys of one shard atomically through raft.
func (s *KV) Batch(ctx context.Context, req *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	shard, err := s.limits.checkBatch(req, func(k []byte) (ids.ShardID, error) { return shardOf(s.b, k) })
	if err != nil {
		return nil, err
	}
	if leader, local := s.b.Leader(shard); !local {
		c, err := kvClientFor(s.b, leader, req.GetHeader().GetHops(), shard)
		if err != nil {
			return nil, err
		}
		return forward(ctx, leader, func(ctx context.Context) (*concordpb.BatchResponse, error) {
			return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(req.GetHeader()), Ops: req.GetOps()})
		})
	}
	// The stamp is this leader's clock: the state machine turns TTLs into
	// absolute times from it (on the shard's clock), once, for every replica.
	cmd := &storepb.Command{UnixNanos: time.Now().UnixNano(), Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: req.GetHeader().GetSessionId(), Seq: req.GetHeader().GetSeq(), Ops: req.GetOps(),
		MaxValueBytes: int64(s.limits.MaxValueBytes),
	}}}
	res, err := s.b.Propose(ctx, shard, cmd)
	if err != nil {
		return nil, toStatus(err)
	}
	if c := codes.Code(res.GetErrorCode()); c != codes.OK {
		return nil, status.Error(c, res.GetErrorMessage())
	}
	return &concordpb.BatchResponse{Header: header(s.b, shard), Results: res.GetResults()}, nil
}

// Scan merges the per-shard scans of every user shard, or scans one shard
// when a forwarding node asks for it.
func (s *KV) Scan(ctx context.Context, req *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	if err := ready(s.b, notReady); err != nil {
		return nil, err
	}
	if len(req.GetEnd()) > 0 && bytes.Compare(req.GetStart(), req.GetEnd()) >= 0 {
		return nil, invalid("scan start %q is not before end %q", req.GetStart(), req.GetEnd())
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultScanLimit
	}
	limit = min(limit, maxScanLimit)
	if shard := ids.ShardID(req.GetOnlyShard()); shard != 0 {
		if _, ok := s.b.Descriptors()[shard]; !ok || shard == routing.MetaShard {
			return nil, status.Errorf(codes.NotFound, "shard %d does not exist", shard)
		}
		kvs, err := s.scanShard(ctx, req, shard, limit)
		if err != nil {
			return nil, err
		}
		return &concordpb.ScanResponse{Header: header(s.b, shard), Kvs: kvs, More: len(kvs) == limit}, nil
	}
	return s.scanAll(ctx, req, limit)
}

// scanAll scans every shard in parallel and merges. Each shard returns at
// most limit keys; the first limit keys of the merge are then exactly the
// first limit keys of the whole range.
func (s *KV) scanAll(ctx context.Context, req *concordpb.ScanRequest, limit int) (*concordpb.ScanResponse, error) {
	shards := table(s.b).Shards()
	if len(shards) == 0 {
		return nil, status.Error(codes.Unavailable, "this node does not know the shards yet")
	}
	results := make([][]*concordpb.KeyValue, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, d := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.scanShard(ctx, req, ids.ShardID(d.GetShardId()), limit)
		}()
	}
	wg.Wait()
	var all []*concordpb.KeyValue
	more := false
	for i := range shards {
		if errs[i] != nil {
			return nil, errs[i]
		}
		all = append(all, results[i]...)
		more = more || len(results[i]) == limit
	}
	return mergedScan(s.b.ID(), all, more, limit), nil
}

// mergedScan sorts the keys of every shard's scan, keeps the first limit and
// says where the next page starts: just after the last key returned.
func mergedScan(servedBy ids.NodeID, all []*concordpb.KeyValue, more bool, limit int) *concordpb.ScanResponse {
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].GetKey(), all[j].GetKey()) < 0 })
	if len(all) > limit {
		all, more = all[:limit], true
	}
	resp := &concordpb.ScanResponse{Header: &concordpb.ResponseHeader{ServedByNodeId: uint64(servedBy)}, Kvs: all, More: more}
	if more && len(all) > 0 {
		resp.NextStart = append(append([]byte(nil), all[len(all)-1].GetKey()...), 0)
	}
	return resp
}

func (s *KV) scanShard(ctx context.Context, req *concordpb.ScanRequest, shard ids.ShardID, limit int) ([]*concordpb.KeyValue, error) {
	if s.canReadLocally(req.GetHeader(), shard) {
		if req.GetHeader().GetConsistency() == concordpb.Consistency_STALE {
			kvs, err := s.b.LocalScan(shard, req.GetStart(), req.GetEnd(), limit)
			return kvs, toStatus(err)
		}
		view, err := s.readBarrier(ctx, shard)
		if err != nil {
			return nil, err
		}
		defer view.Close()
		kvs, err := view.Scan(req.GetStart(), req.GetEnd(), limit)
		return kvs, toStatus(err)
	}
	target := s.readTarget(req.GetHeader(), shard)
	c, err := kvClientFor(s.b, target, req.GetHeader().GetHops(), shard)
	if err != nil {
		return nil, err
	}
	resp, err := forward(ctx, target, func(ctx context.Context) (*concordpb.ScanResponse, error) {
		return c.Scan(ctx, &concordpb.ScanRequest{Header: forwardedHeader(req.GetHeader()),
			Start: req.GetStart(), End: req.GetEnd(), Limit: uint32(limit), OnlyShard: uint64(shard)})
	})
	return resp.GetKvs(), err
}

// canReadLocally: a stale read needs any local replica; a linearizable one
// needs the local replica to lead.
func (s *KV) canReadLocally(h *concordpb.RequestHeader, shard ids.ShardID) bool {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return s.b.HasReplica(shard)
	}
	_, local := s.b.Leader(shard)
	return local
}

// readTarget is the node to forward a read to.
func (s *KV) readTarget(h *concordpb.RequestHeader, shard ids.ShardID) ids.NodeID {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return anyReplicaNode(s.b, shard)
	}
	leader, _ := s.b.Leader(shard)
	return leader
}

// localGet reads key from the local replica of shard: a stale read reads its
// current state, a linearizable one the view its barrier returns.
func (s *KV) localGet(ctx context.Context, h *concordpb.RequestHeader, shard ids.ShardID, key []byte) ([]byte, int64, bool, error) {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		v, at, found, err := s.b.LocalGet(shard, key)
		return v, at, found, toStatus(err)
	}
	view, err := s.readBarrier(ctx, shard)
	if err != nil {
		return nil, 0, false, err
	}
	defer view.Close()
	v, at, found, err := view.Get(key)
	return v, at, found, toStatus(err)
}

// readBarrier makes a linearizable read wait until the local replica has
// applied everything committed before the read arrived, and returns the
// view of the shard the read must read (never the live engine: the replica
// may be removed, its data destroyed, before the read runs).
func (s *KV) readBarrier(ctx context.Context, shard ids.ShardID) (ShardView, error) {
	view, err := s.b.ReadIndex(ctx, shard)
	if err != nil {
		return nil, readStatus(err)
	}
	return view, nil
}
