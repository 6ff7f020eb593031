package grpcapi

import (
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

// emptyCalls is a StreamRequest of n empty calls: two bytes each on the
// wire, each of which the decoder would turn into a block of hundreds.
func emptyCalls(n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, 1<<3|byte(protowire.BytesType), 0)
	}
	return b
}

// batchOfEmptyOps is a StreamRequest of one batch call of n empty ops.
func batchOfEmptyOps(n int) []byte {
	var batch []byte
	for range n {
		batch = append(batch, 2<<3|byte(protowire.BytesType), 0)
	}
	call := protowire.AppendTag(nil, 8, protowire.BytesType)
	call = protowire.AppendBytes(call, batch)
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(req, call)
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestDecodeRequestBoundsCalls: a frame of more calls (or batch ops)
// than a message may carry is refused before anything is allocated for
// them; before, 1 MiB of empty calls made the decoder allocate ~280 MiB
// (one block of every call kind per call), so a 64 MiB frame, under the
// frame limit, asked for ~18 GiB.
func TestDecodeRequestBoundsCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"calls", emptyCalls(frame.MaxStreamCalls + 1)},
		{"batch ops", batchOfEmptyOps(frame.MaxStreamCalls + 1)},
		// the calls parse, the last bytes do not: nothing is decoded
		{"calls then garbage", append(emptyCalls(frame.MaxStreamCalls/2), 0xff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = decodeRequest(tc.data) })
			if err == nil {
				t.Fatal("decoded")
			}
			if n > uint64(len(tc.data)) {
				t.Fatalf("refusing a %d-byte frame allocated %d bytes", len(tc.data), n)
			}
		})
	}
	// At the bound, a message decodes.
	req, err := decodeRequest(emptyCalls(frame.MaxStreamCalls))
	if err != nil || len(req.GetCalls()) != frame.MaxStreamCalls {
		t.Fatalf("%d calls: %d decoded, %v", frame.MaxStreamCalls, len(req.GetCalls()), err)
	}
}

// TestConnRefusesTooManyCalls: over a real connection, a frame of more
// calls than a message may carry closes the connection without a reply,
// and the node goes on serving others.
func TestConnRefusesTooManyCalls(t *testing.T) {
	f := newFakeNode(t, 1, 1, 1)
	cs, addr := serveConns(t, NewKV(f, testLimits), nil, 64<<20)
	c := dialConn(t, addr, "")
	data := emptyCalls(frame.MaxStreamCalls + 1)
	var buf []byte
	buf = append(buf, byte(len(data)>>24), byte(len(data)>>16), byte(len(data)>>8), byte(len(data)))
	if _, err := c.Write(append(buf, data...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := frame.NewReader(c, 64<<20)
	resp := &concordpb.StreamResponse{}
	if err := fr.Next(resp); err == nil {
		t.Fatalf("the node answered %d replies to a frame of too many calls", len(resp.GetReplies()))
	}
	awaitOpen(t, cs, 0)
}
