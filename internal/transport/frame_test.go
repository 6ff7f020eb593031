package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/frame"
)

func testBatch(t testing.TB, shards ...uint64) *concordpb.RaftBatch {
	t.Helper()
	b := &concordpb.RaftBatch{ClusterId: 7, FromNodeId: 1, ToNodeId: 2}
	for _, s := range shards {
		data, err := proto.Marshal(appendOf(int(s) * 100))
		if err != nil {
			t.Fatal(err)
		}
		b.Messages = append(b.Messages, &concordpb.RaftEnvelope{ShardId: s, Message: data})
	}
	return b
}

// frames returns the wire bytes of a hello with token and of batches.
func frames(t testing.TB, token string, batches ...*concordpb.RaftBatch) []byte {
	t.Helper()
	buf, err := appendHello(nil, token)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if buf, err = appendFrame(buf, b); err != nil {
			t.Fatal(err)
		}
	}
	return buf
}

// TestFrameRoundTrip: what appendFrame writes, frameReader reads back
// identical, frame after frame, and a batch read earlier is not changed by
// the frames read after it into the same buffer (deliveries may outlive
// the next read: a corrupted raft message must never be delivered).
func TestFrameRoundTrip(t *testing.T) {
	in := []*concordpb.RaftBatch{testBatch(t, 1, 2, 3), testBatch(t), testBatch(t, 9)}
	fr := newFrameReader(bytes.NewReader(frames(t, "secret", in...)), 1<<20)
	token, err := readHello(fr)
	if err != nil || token != "secret" {
		t.Fatalf("hello: token %q, %v; want \"secret\"", token, err)
	}
	var out []*concordpb.RaftBatch
	for {
		b := &concordpb.RaftBatch{}
		err := fr.Next(b)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d frames, wrote %d", len(out), len(in))
	}
	for i := range in {
		if !proto.Equal(in[i], out[i]) {
			t.Errorf("frame %d: read %v, wrote %v", i, out[i], in[i])
		}
	}
}

// TestFrameLargerThanKeptBuffer: a frame over keepFrameBuf (read in steps
// as its bytes arrive) comes back whole.
func TestFrameLargerThanKeptBuffer(t *testing.T) {
	data, err := proto.Marshal(appendOf(3 << 20))
	if err != nil {
		t.Fatal(err)
	}
	in := &concordpb.RaftBatch{ClusterId: 7, Messages: []*concordpb.RaftEnvelope{{ShardId: 4, Message: data}}}
	fr := newFrameReader(bytes.NewReader(frames(t, "", in)), 4<<20)
	if _, err := readHello(fr); err != nil {
		t.Fatal(err)
	}
	out := &concordpb.RaftBatch{}
	if err := fr.Next(out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Fatal("a 3 MiB frame came back different")
	}
}

// TestFrameTruncated: a connection that ends inside a frame (its length or
// its body) is an error, io.ErrUnexpectedEOF, not a shorter batch.
func TestFrameTruncated(t *testing.T) {
	whole := frames(t, "", testBatch(t, 1, 2))
	hello := len(Magic) + 2
	for _, cut := range []int{hello + 2, hello + frameHeader, hello + frameHeader + 10, len(whole) - 1} {
		fr := newFrameReader(bytes.NewReader(whole[:cut]), 1<<20)
		if _, err := readHello(fr); err != nil {
			t.Fatal(err)
		}
		if err := fr.Next(&concordpb.RaftBatch{}); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d of %d bytes: %v, want io.ErrUnexpectedEOF", cut, len(whole), err)
		}
	}
}

// TestFrameOversize: a frame announcing more than the limit is refused
// before anything is allocated for it.
func TestFrameOversize(t *testing.T) {
	buf := frames(t, "")
	buf = binary.BigEndian.AppendUint32(buf, 1<<30)
	fr := newFrameReader(bytes.NewReader(buf), 1<<20)
	if _, err := readHello(fr); err != nil {
		t.Fatal(err)
	}
	if err := fr.Next(&concordpb.RaftBatch{}); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("a 1 GiB frame with a 1 MiB limit: %v, want errFrameTooLarge", err)
	}
	if fr.Held() != 0 {
		t.Fatalf("the refused frame allocated %d bytes", fr.Held())
	}
}

// TestFrameGarbage: bytes that are not the wire are errors, never a batch
// or a panic: a wrong magic, an oversized token, a body that is not a
// RaftBatch.
func TestFrameGarbage(t *testing.T) {
	if _, err := readHello(bytes.NewReader([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))); err == nil {
		t.Error("an HTTP request passed as a hello")
	}
	long := append(append([]byte(nil), Magic...), 0xff, 0xff)
	if _, err := readHello(bytes.NewReader(long)); err == nil {
		t.Error("a hello announcing a 64 KiB token passed")
	}
	body := bytes.Repeat([]byte{0xff}, 64)
	buf := binary.BigEndian.AppendUint32(frames(t, ""), uint32(len(body)))
	fr := newFrameReader(bytes.NewReader(append(buf, body...)), 1<<20)
	if _, err := readHello(fr); err != nil {
		t.Fatal(err)
	}
	if err := fr.Next(&concordpb.RaftBatch{}); err == nil {
		t.Error("64 bytes of 0xff decoded as a batch")
	}
}

// FuzzFrameReader: no input makes the reader panic or return a batch
// from a frame longer than the limit.
func FuzzFrameReader(f *testing.F) {
	f.Add(frames(f, "t", testBatch(f, 1)))
	f.Add(frames(f, ""))
	f.Add([]byte("PRI * HTTP/2.0"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := newFrameReader(bytes.NewReader(in), 4<<10)
		if _, err := readHello(fr); err != nil {
			return
		}
		for range 100 {
			if err := fr.Next(&concordpb.RaftBatch{}); err != nil {
				return
			}
		}
	})
}

// BenchmarkFrameRoundTrip: one frame of 8 appends (256-byte entries, about
// what a loop turn sends a peer under put load) written and read back,
// with the buffers reused as a connection reuses them.
func BenchmarkFrameRoundTrip(b *testing.B) {
	batch := testBatch(b, 3, 3, 3, 3, 3, 3, 3, 3)
	var buf []byte
	r := &bytes.Reader{}
	fr := newFrameReader(r, 1<<20)
	out := &concordpb.RaftBatch{}
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = appendFrame(buf[:0], batch); err != nil {
			b.Fatal(err)
		}
		r.Reset(buf)
		fr.Reset(r)
		if err := fr.Next(out); err != nil {
			b.Fatal(err)
		}
	}
}

// appendFrame appends b as one frame, as proto marshals it: what the
// lanes' hand-built frames must read back like.
func appendFrame(buf []byte, b *concordpb.RaftBatch) ([]byte, error) { return frame.Append(buf, b) }
