package redisapi

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/concord-kv/concord/api/concordpb"
)

// BenchmarkServeSetPipeline is a Redis node's own work for one pipeline of
// redis-benchmark's SET (-d 256 -P 16, one key): reading and parsing it,
// planning and chaining the SETs, one Batch to a backend that answers at
// once, and writing the 16 replies. One op is one pipeline; allocs/op are
// the node's allocations per pipeline, outside the KV service.
func BenchmarkServeSetPipeline(b *testing.B) {
	cmd := "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$256\r\n" + strings.Repeat("x", 256) + "\r\n"
	benchServe(b, strings.Repeat(cmd, 16), strings.Repeat("+OK\r\n", 16))
}

// BenchmarkServeGetPipeline: the same for redis-benchmark's GET.
func BenchmarkServeGetPipeline(b *testing.B) {
	cmd := "*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n"
	benchServe(b, strings.Repeat(cmd, 16), strings.Repeat("$1\r\nv\r\n", 16))
}

func benchServe(b *testing.B, pipeline, replies string) {
	s := New(&answerKV{}, Config{})
	defer s.Close(time.Second)
	nc := &pipeConn{in: []byte(pipeline), n: b.N}
	c := newConn(s, nc, 1)
	b.ReportAllocs()
	b.ResetTimer()
	c.serve()
	b.StopTimer()
	if want := len(replies) * b.N; nc.written != want || !strings.HasPrefix(string(nc.last), replies[:len(replies)/16]) {
		b.Fatalf("wrote %d bytes ending %q, want %d of %q", nc.written, nc.last, want, replies)
	}
}

// answerKV answers every batch at once: OK for writes, "v" for reads.
type answerKV struct{ fakeKV }

func (*answerKV) Batch(_ context.Context, r *concordpb.BatchRequest) (*concordpb.BatchResponse, error) {
	res := make([]concordpb.OpResult, len(r.GetOps()))
	out := &concordpb.BatchResponse{Results: make([]*concordpb.OpResult, len(res))}
	for i, op := range r.GetOps() {
		res[i].Ok = true
		if op.GetType() == concordpb.OpType_OP_GET {
			res[i].Value = []byte("v")
		}
		out.Results[i] = &res[i]
	}
	return out, nil
}

// pipeConn is a client that sends in, n times, each as soon as the
// replies to the last arrived, then hangs up.
type pipeConn struct {
	net.Conn
	in      []byte
	n, sent int
	written int
	last    []byte
}

func (p *pipeConn) Read(b []byte) (int, error) {
	if p.sent == p.n {
		return 0, io.EOF
	}
	p.sent++
	return copy(b, p.in), nil
}

func (p *pipeConn) Write(b []byte) (int, error) {
	p.written += len(b)
	p.last = b
	return len(b), nil
}

func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }
func (p *pipeConn) Close() error                     { return nil }
