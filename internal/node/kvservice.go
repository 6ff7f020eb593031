package node

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/routing"
	"github.com/concord-kv/concord/internal/storepb"
)

// Limits on a single request, beyond the key and value limits of Config.
const (
	maxBatchOps      = 1000
	defaultScanLimit = 1000
	maxScanLimit     = 10000
)

// kvService implements the KV gRPC service. Mutations go through raft on the
// shard leader (forwarded there as a Batch if this node does not lead the
// shard); linearizable reads confirm leadership with ReadIndex; stale reads
// read the local replica.
type kvService struct {
	concordpb.UnimplementedKVServer
	n *Node
}

func (s *kvService) Get(ctx context.Context, req *concordpb.GetRequest) (*concordpb.GetResponse, error) {
	n, err := s.node()
	if err != nil {
		return nil, err
	}
	if err := n.checkKey(req.GetKey()); err != nil {
		return nil, err
	}
	shard, err := n.shardOf(req.GetKey())
	if err != nil {
		return nil, err
	}
	if n.canReadLocally(ctx, req.GetHeader(), shard) {
		if err := n.readBarrier(ctx, req.GetHeader(), shard); err != nil {
			return nil, err
		}
		v, found, err := kv.Get(n.eng.DB, shard, req.GetKey())
		if err != nil {
			return nil, toStatus(err)
		}
		return &concordpb.GetResponse{Header: n.header(shard), Found: found, Value: v}, nil
	}
	c, err := n.kvClientFor(n.readTarget(req.GetHeader(), shard), req.GetHeader().GetHops(), shard)
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, &concordpb.GetRequest{Header: forwardedHeader(req.GetHeader()), Key: req.GetKey()})
}

func (s *kvService) Put(ctx context.Context, req *concordpb.PutRequest) (*concordpb.PutResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_PUT, Key: req.GetKey(), Value: req.GetValue()}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.PutResponse{Header: hdr, PrevExists: res.GetOk(), PrevValue: res.GetValue()}, nil
}

func (s *kvService) Delete(ctx context.Context, req *concordpb.DeleteRequest) (*concordpb.DeleteResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_DELETE, Key: req.GetKey()}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.DeleteResponse{Header: hdr, Existed: res.GetOk()}, nil
}

func (s *kvService) CompareAndSwap(ctx context.Context, req *concordpb.CompareAndSwapRequest) (*concordpb.CompareAndSwapResponse, error) {
	op := &concordpb.Op{Type: concordpb.OpType_OP_CAS, Key: req.GetKey(), Value: req.GetValue(),
		Expected: req.GetExpected(), ExpectAbsent: req.GetExpectAbsent(), Delete: req.GetDelete()}
	res, hdr, err := s.apply(ctx, req.GetHeader(), op)
	if err != nil {
		return nil, err
	}
	return &concordpb.CompareAndSwapResponse{Header: hdr, Succeeded: res.GetOk(),
		CurrentExists: res.GetExists(), CurrentValue: res.GetValue()}, nil
}

func (s *kvService) apply(ctx context.Context, h *concordpb.RequestHeader, op *concordpb.Op) (*concordpb.OpResult, *concordpb.ResponseHeader, error) {
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
func (s *kvService) Batch(ctx context.Context, req *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	n, err := s.node()
	if err != nil {
		return nil, err
	}
	shard, err := n.checkBatch(req)
	if err != nil {
		return nil, err
	}
	if leader, local := n.leaderOf(shard); !local {
		c, err := n.kvClientFor(leader, req.GetHeader().GetHops(), shard)
		if err != nil {
			return nil, err
		}
		return c.Batch(ctx, &concordpb.BatchRequest{Header: forwardedHeader(req.GetHeader()), Ops: req.GetOps()})
	}
	cmd := &storepb.Command{UnixNanos: time.Now().UnixNano(), Kind: &storepb.Command_Kv{Kv: &storepb.KVCommand{
		SessionId: req.GetHeader().GetSessionId(), Seq: req.GetHeader().GetSeq(), Ops: req.GetOps(),
	}}}
	res, err := n.host.Propose(ctx, shard, cmd)
	if err != nil {
		return nil, toStatus(err)
	}
	if c := codes.Code(res.GetErrorCode()); c != codes.OK {
		return nil, status.Error(c, res.GetErrorMessage())
	}
	return &concordpb.BatchResponse{Header: n.header(shard), Results: res.GetResults()}, nil
}

// Scan merges the per-shard scans of every user shard, or scans one shard
// when a forwarding node asks for it.
func (s *kvService) Scan(ctx context.Context, req *concordpb.ScanRequest) (*concordpb.ScanResponse, error) {
	n, err := s.node()
	if err != nil {
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
	if shard := req.GetOnlyShard(); shard != 0 {
		if _, ok := n.shardDescriptors()[shard]; !ok || shard == routing.MetaShard {
			return nil, status.Errorf(codes.NotFound, "shard %d does not exist", shard)
		}
		kvs, err := n.scanShard(ctx, req, shard, limit)
		if err != nil {
			return nil, err
		}
		return &concordpb.ScanResponse{Header: n.header(shard), Kvs: kvs, More: len(kvs) == limit}, nil
	}
	return n.scanAll(ctx, req, limit)
}

// scanAll scans every shard in parallel and merges. Each shard returns at
// most limit keys; the first limit keys of the merge are then exactly the
// first limit keys of the whole range.
func (n *Node) scanAll(ctx context.Context, req *concordpb.ScanRequest, limit int) (*concordpb.ScanResponse, error) {
	shards := n.table().Shards()
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
			results[i], errs[i] = n.scanShard(ctx, req, d.GetShardId(), limit)
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
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].GetKey(), all[j].GetKey()) < 0 })
	if len(all) > limit {
		all, more = all[:limit], true
	}
	resp := &concordpb.ScanResponse{Header: &concordpb.ResponseHeader{ServedByNodeId: n.ID()}, Kvs: all, More: more}
	if more && len(all) > 0 {
		resp.NextStart = append(append([]byte(nil), all[len(all)-1].GetKey()...), 0)
	}
	return resp, nil
}

func (n *Node) scanShard(ctx context.Context, req *concordpb.ScanRequest, shard uint64, limit int) ([]*concordpb.KeyValue, error) {
	if n.canReadLocally(ctx, req.GetHeader(), shard) {
		if err := n.readBarrier(ctx, req.GetHeader(), shard); err != nil {
			return nil, err
		}
		kvs, err := kv.Scan(n.eng.DB, shard, req.GetStart(), req.GetEnd(), limit)
		return kvs, toStatus(err)
	}
	c, err := n.kvClientFor(n.readTarget(req.GetHeader(), shard), req.GetHeader().GetHops(), shard)
	if err != nil {
		return nil, err
	}
	resp, err := c.Scan(ctx, &concordpb.ScanRequest{Header: forwardedHeader(req.GetHeader()),
		Start: req.GetStart(), End: req.GetEnd(), Limit: uint32(limit), OnlyShard: shard})
	return resp.GetKvs(), err
}

// canReadLocally: a stale read needs any local replica; a linearizable one
// needs the local replica to lead.
func (n *Node) canReadLocally(_ context.Context, h *concordpb.RequestHeader, shard uint64) bool {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		info, ok := n.host.Info(shard)
		return ok && info.Desc != nil
	}
	_, local := n.leaderOf(shard)
	return local
}

// readTarget is the node to forward a read to.
func (n *Node) readTarget(h *concordpb.RequestHeader, shard uint64) uint64 {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return n.anyReplicaNode(shard)
	}
	leader, _ := n.leaderOf(shard)
	return leader
}

// readBarrier makes a linearizable read wait until the local replica has
// applied everything committed before the read arrived.
func (n *Node) readBarrier(ctx context.Context, h *concordpb.RequestHeader, shard uint64) error {
	if h.GetConsistency() == concordpb.Consistency_STALE {
		return nil
	}
	if err := n.host.ReadIndex(ctx, shard); err != nil {
		return readStatus(err)
	}
	return nil
}

func (s *kvService) node() (*Node, error) {
	select {
	case <-s.n.ready:
		return s.n, nil
	default:
		return nil, status.Error(codes.Unavailable, "node not initialized yet (waiting for its peers)")
	}
}

func (n *Node) checkKey(k []byte) error {
	switch {
	case len(k) == 0:
		return invalid("key is empty")
	case len(k) > n.cfg.MaxKeyBytes:
		return invalid("key is %d bytes; the limit is %d (--max-key-bytes)", len(k), n.cfg.MaxKeyBytes)
	}
	return nil
}

func (n *Node) checkValue(v []byte) error {
	if len(v) > n.cfg.MaxValueBytes {
		return invalid("value is %d bytes; the limit is %d (--max-value-bytes)", len(v), n.cfg.MaxValueBytes)
	}
	return nil
}

// checkBatch validates a batch and returns its shard.
func (n *Node) checkBatch(req *concordpb.BatchRequest) (uint64, error) {
	ops, h := req.GetOps(), req.GetHeader()
	switch {
	case len(ops) == 0:
		return 0, invalid("batch has no operations")
	case len(ops) > maxBatchOps:
		return 0, invalid("batch has %d operations; the limit is %d", len(ops), maxBatchOps)
	case h.GetSessionId() != 0 && h.GetSeq() == 0:
		return 0, invalid("a request with a session must carry a positive sequence number")
	}
	var shard uint64
	for i, op := range ops {
		if _, ok := concordpb.OpType_name[int32(op.GetType())]; !ok {
			return 0, invalid("operation %d has unknown type %d", i, op.GetType())
		}
		if err := n.checkKey(op.GetKey()); err != nil {
			return 0, err
		}
		if err := n.checkValue(op.GetValue()); err != nil {
			return 0, err
		}
		if err := n.checkValue(op.GetExpected()); err != nil {
			return 0, err
		}
		s, err := n.shardOf(op.GetKey())
		if err != nil {
			return 0, err
		}
		if i > 0 && s != shard {
			return 0, invalid("batch keys span shards %d and %d; a batch must stay within one shard", shard, s)
		}
		shard = s
	}
	return shard, nil
}
