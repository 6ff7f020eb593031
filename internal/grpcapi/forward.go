package grpcapi

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/ids"
)

// maxHops bounds node-to-node forwarding of one request, so that nodes with
// stale leader hints cannot bounce a request between them forever. KV
// requests count hops in their RequestHeader; Cluster requests, which have
// no header, in gRPC metadata (hopsKey).
const maxHops = 2

// hopsKey is the metadata key carrying a forwarded Cluster request's hops.
const hopsKey = "concord-hops"

// maxForwardTimeout bounds how long a node waits for the node it forwarded a
// request to, whatever the caller's deadline.
const maxForwardTimeout = 5 * time.Second

// forward calls the node a request is forwarded to with a deadline of its
// own, shorter than the caller's: three quarters of the time the caller has
// left, at most maxForwardTimeout. When that node stalls (paused, black-holed)
// this node still answers in time, with Unavailable, and the caller can try
// another node. The node forwarded to may have received the request, so that
// answer does not read as a refusal: a client retrying a write counts it as
// possibly applied (and retries with the same session and sequence number),
// and the Redis port answers such a write AMBIGUOUS. A unary call whose
// connection broke says so too (answeredConn, below).
func forward[T any](ctx context.Context, node ids.NodeID, call func(context.Context) (T, error)) (T, error) {
	d := maxForwardTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)*3/4)
	}
	fctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := call(fctx)
	if code := status.Code(err); ctx.Err() == nil && (code == codes.DeadlineExceeded || code == codes.Canceled) {
		err = status.Errorf(codes.Unavailable, "forwarded to node %d, which did not answer within %v (it may have received the request)", node, d.Round(time.Millisecond))
	}
	return resp, err
}

// kvClientFor returns a KV client for node: its request stream with
// WithPeerWire (peerwire.go), else unary gRPC calls; or Unavailable if this
// request may not be forwarded further. Its unary calls tell a broken
// connection from the node's answer (answeredConn).
func (s *KV) kvClientFor(node ids.NodeID, hops uint32, shard ids.ShardID) (concordpb.KVClient, error) {
	addr, conn, err := peerConnFor(s.b, node, hops, shard)
	if err != nil {
		return nil, err
	}
	if s.peers != nil {
		return s.peers.get(addr, conn), nil
	}
	return concordpb.NewKVClient(answeredConn{conn}), nil
}

// Unary forwards and the outcome of a write. A unary call that fails
// returns a status either way: the node's answer (a refusal such as "not
// the leader" or "partitioned from node N", certain), or gRPC's own for a
// connection that broke, often after the request was sent ("error reading
// from server: EOF"), when the node may have applied the write. Both are
// Unavailable, and nothing in a status says which, so a node marks every
// error it answers with the trailer answeredKey (MarkAnswered, ahead of
// every interceptor that answers an error) and a forwarding node reads the trailer
// (answeredConn): an Unavailable without it that does not say the
// connection was never made (notSentMark) becomes the error of a request
// sent and not answered ("after the request was sent"), the words the
// request stream uses for its broken connections (client.streamMux) and
// the front ends read as "may have applied" (redisapi.sentMarks; the Go
// client counts any Unavailable it cannot tell as refused or unsent as
// possibly applied, and retries with the same session). A node of a
// binary before the mark answers unmarked: its refusals then read as
// sent, which costs an AMBIGUOUS reply that could have been UNAVAILABLE,
// never the other way round.

// answeredKey is the trailer a node sets on every error it answers.
const answeredKey = "concord-answered"

// sentMark is in the message of an Unavailable for a request that was sent
// and got no answer, as in client.streamMux.broken's.
const sentMark = "after the request was sent"

// notSentMark is in gRPC's message for a call that found no connection
// (the dial failed): nothing was sent. So is notSentPreface, for a
// connection closed before the server's HTTP/2 preface (a node past its
// --grpc-max-conns closes it at accept): gRPC sends no call on a
// connection before the preface arrived.
const (
	notSentMark    = "Error while dialing"
	notSentPreface = "error reading server preface"
)

// MarkAnswered returns the server interceptor that marks the errors this
// node answers (answeredKey), so that a node forwarding to it with a
// unary call tells them from a connection that broke. It must come before
// any interceptor that answers with an error of its own (DropPartitioned).
func MarkAnswered() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			_ = grpc.SetTrailer(ctx, answeredTrailer)
		}
		return resp, err
	}
}

var answeredTrailer = metadata.Pairs(answeredKey, "1")

// answeredConn is a peer connection whose unary calls that fail without the
// node's answer, after the request may have been sent, say so (sentMark).
// Streams pass through: the request stream words its own failures.
type answeredConn struct{ grpc.ClientConnInterface }

func (c answeredConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	var tr metadata.MD
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, append(opts, grpc.Trailer(&tr))...)
	if err == nil || len(tr.Get(answeredKey)) > 0 {
		return err
	}
	return unanswered(err)
}

// unanswered is the error of a unary call that failed without the node's
// answer: an Unavailable, unless gRPC says no connection was made, is a
// request sent and not answered. Other codes keep their meaning (a
// deadline: forward words it; Internal already reads as "may have
// applied").
func unanswered(err error) error {
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || strings.Contains(st.Message(), notSentMark) || strings.Contains(st.Message(), notSentPreface) ||
		strings.Contains(st.Message(), sentMark) {
		return err
	}
	return status.Errorf(codes.Unavailable, "the connection to the node broke %s, before its answer (it may have received the request): %s", sentMark, st.Message())
}

// peerConnFor returns node's address and gRPC connection, or Unavailable
// if this request may not be forwarded further.
func peerConnFor(r Router, node ids.NodeID, hops uint32, shard ids.ShardID) (string, grpc.ClientConnInterface, error) {
	if node == 0 {
		return "", nil, status.Errorf(codes.Unavailable, "shard %d: no leader known yet (election in progress?)", shard)
	}
	if hops >= maxHops {
		return "", nil, status.Errorf(codes.Unavailable, "shard %d: not the leader here, and the request was already forwarded %d times", shard, hops)
	}
	if r.Blocked(node) {
		return "", nil, status.Errorf(codes.Unavailable, "shard %d: leader node %d is cut off by a partition (fault injection)", shard, node)
	}
	addr, ok := r.Resolve(node)
	if !ok {
		return "", nil, status.Errorf(codes.Unavailable, "shard %d: leader node %d has no known address", shard, node)
	}
	conn, err := r.Conn(addr)
	if err != nil {
		return "", nil, status.Errorf(codes.Unavailable, "connect to node %d at %s: %v", node, addr, err)
	}
	return addr, conn, nil
}

// ClusterClientFor returns a Cluster client for node and the context to call
// it with, which carries the forwarding hop count (one more than ctx's
// incoming count). It fails with Unavailable when node is unknown or this
// node itself, the hop limit is reached, or a partition cuts node off. The
// node's own loops use it too, so that they obey the same rules. Its calls
// tell a broken connection from the node's answer (answeredConn), as a KV
// forward's do: a change or a removal whose connection broke after it was
// sent may have been made, and a client must not read that as a refusal
// and make it again on another node.
func ClusterClientFor(ctx context.Context, r Router, node ids.NodeID) (concordpb.ClusterClient, context.Context, error) {
	hops := incomingHops(ctx)
	if node == 0 || node == r.ID() {
		return nil, ctx, status.Error(codes.Unavailable, "placement leader unknown")
	}
	if hops >= maxHops {
		return nil, ctx, status.Errorf(codes.Unavailable, "request already forwarded %d times", hops)
	}
	if r.Blocked(node) {
		return nil, ctx, status.Errorf(codes.Unavailable, "node %d is cut off by a partition (fault injection)", node)
	}
	addr, ok := r.Resolve(node)
	if !ok {
		return nil, ctx, status.Errorf(codes.Unavailable, "node %d has no known address", node)
	}
	conn, err := r.Conn(addr)
	if err != nil {
		return nil, ctx, status.Errorf(codes.Unavailable, "connect to node %d at %s: %v", node, addr, err)
	}
	out := metadata.AppendToOutgoingContext(ctx, hopsKey, strconv.Itoa(int(hops+1)))
	return concordpb.NewClusterClient(answeredConn{conn}), out, nil
}

func incomingHops(ctx context.Context) uint32 {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(hopsKey); len(v) > 0 {
		h, _ := strconv.Atoi(v[0])
		return uint32(h)
	}
	return 0
}

// forwardedHeader is the header of a KV request forwarded one hop further.
// AVAILABLE is never forwarded: the node that took the request holds what
// it holds; the next one serves it as LINEARIZABLE (a write's ordinary
// attempt; an AVAILABLE read is forwarded as STALE before it gets here).
func forwardedHeader(h *concordpb.RequestHeader) *concordpb.RequestHeader {
	c := h.GetConsistency()
	if c == concordpb.Consistency_AVAILABLE {
		c = concordpb.Consistency_LINEARIZABLE
	}
	return &concordpb.RequestHeader{SessionId: h.GetSessionId(), Seq: h.GetSeq(), SessionFloor: h.GetSessionFloor(), Consistency: c, Hops: h.GetHops() + 1}
}
