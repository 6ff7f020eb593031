package transport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/concord-kv/concord/api/concordpb"
)

// The framed TCP wire (Config.Wire = WireTCP) of one lane of raft traffic:
//
//	magic (16 bytes) | token length (uint16, big-endian) | token
//	then frames:     length (uint32, big-endian) | RaftBatch (protobuf)
//
// The sender speaks first and only; the receiver never writes (it closes the
// connection on any error, and the sender reconnects). The magic lets the
// node's port mux tell this wire from gRPC and RESP; its first byte, NUL,
// opens neither a RESP command nor an HTTP/2 preface. The token is the
// cluster's auth token when the port has no TLS (with TLS a peer proves
// itself by its certificate, and the token is empty).

// Magic opens every framed raft connection (portmux routes on it).
var Magic = []byte("\x00concord-raft/1\n")

// maxTokenBytes bounds the token in the hello.
const maxTokenBytes = 4096

// frameHeader is the bytes before each frame's RaftBatch: its length.
const frameHeader = 4

// errFrameTooLarge ends a connection whose next frame claims more bytes
// than the receiver accepts.
var errFrameTooLarge = errors.New("transport: raft frame too large")

// appendHello appends the opening of a connection.
func appendHello(buf []byte, token string) ([]byte, error) {
	if len(token) > maxTokenBytes {
		return nil, fmt.Errorf("transport: auth token of %d bytes (at most %d)", len(token), maxTokenBytes)
	}
	buf = append(buf, Magic...)
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(token)))
	return append(buf, token...), nil
}

// readHello reads the opening of a connection and returns its token.
func readHello(r io.Reader) (string, error) {
	head := make([]byte, len(Magic)+2)
	if _, err := io.ReadFull(r, head); err != nil {
		return "", fmt.Errorf("transport: hello: %w", err)
	}
	if !bytes.Equal(head[:len(Magic)], Magic) {
		return "", errors.New("transport: not a raft connection (bad magic)")
	}
	n := int(binary.BigEndian.Uint16(head[len(Magic):]))
	if n > maxTokenBytes {
		return "", fmt.Errorf("transport: hello token of %d bytes (at most %d)", n, maxTokenBytes)
	}
	token := make([]byte, n)
	if _, err := io.ReadFull(r, token); err != nil {
		return "", fmt.Errorf("transport: hello: %w", err)
	}
	return string(token), nil
}

// appendFrame appends b as one frame: its length, then its bytes, marshalled
// in place so that a reused buf costs no allocation.
func appendFrame(buf []byte, b *concordpb.RaftBatch) ([]byte, error) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, b)
	if err != nil {
		return buf[:start], err
	}
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-frameHeader))
	return buf, nil
}

// frameReader reads frames from one connection.
type frameReader struct {
	r   *bufio.Reader
	max int // the largest frame accepted, in bytes
	buf []byte
}

// keepFrameBuf is the largest buffer a frameReader keeps between frames;
// a larger frame gets a buffer of its own, dropped after it.
const keepFrameBuf = 1 << 20

// growStep is how far a large frame's buffer grows ahead of the bytes that
// arrived: a peer that announces a huge frame and sends little makes the
// receiver hold little.
const growStep = 1 << 20

func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next reads one frame into b (reset first). A frame cut short is
// io.ErrUnexpectedEOF; a clean end between frames is io.EOF.
func (f *frameReader) next(b *concordpb.RaftBatch) error {
	var head [frameHeader]byte
	if _, err := io.ReadFull(f.r, head[:]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n > f.max {
		return fmt.Errorf("%w: %d bytes (at most %d)", errFrameTooLarge, n, f.max)
	}
	data, err := f.read(n)
	if err != nil {
		return err
	}
	proto.Reset(b)
	// proto.Unmarshal copies bytes fields: nothing in b aliases f.buf,
	// which the next frame overwrites.
	if err := proto.Unmarshal(data, b); err != nil {
		return fmt.Errorf("transport: bad raft frame: %w", err)
	}
	return nil
}

// read returns the next n bytes, in f.buf when they fit.
func (f *frameReader) read(n int) ([]byte, error) {
	if n <= keepFrameBuf {
		if cap(f.buf) < n {
			f.buf = make([]byte, n, max(n, 4<<10))
		}
		data := f.buf[:n]
		if _, err := io.ReadFull(f.r, data); err != nil {
			return nil, unexpected(err)
		}
		return data, nil
	}
	data := make([]byte, 0, growStep)
	for len(data) < n {
		k := min(n-len(data), growStep)
		data = slices.Grow(data, k)[:len(data)+k]
		if _, err := io.ReadFull(f.r, data[len(data)-k:]); err != nil {
			return nil, unexpected(err)
		}
	}
	return data, nil
}

// unexpected turns an end inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
