// Package frame is the framing of Concord's TCP wires (the peers' raft
// lanes, internal/transport; the clients' KV stream, internal/grpcapi):
//
//	magic | token length (uint16, big-endian) | token
//	then frames: length (uint32, big-endian) | one protobuf message
//
// The magic names the wire, so that a node's port mux routes the
// connection; each wire's magic opens with NUL, which begins neither a RESP
// command nor an HTTP/2 preface. The token is the cluster's auth token (or
// empty). A reader refuses a frame longer than its limit before reading it,
// and grows the buffer of a large frame only as its bytes arrive.
package frame

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
)

// KVMagic opens a client's framed KV.Stream connection (internal/grpcapi
// serves it, the client package dials it); it lives here so that neither
// imports the other.
var KVMagic = []byte("\x00concord-kv/1\n")

// MaxStreamCalls bounds the calls, and the ops of their batches, in one
// StreamRequest of the client wire: a node closes a connection whose
// message carries more, before decoding it (a call or op decodes into a
// few hundred bytes however few it takes on the wire, so a frame under
// the size limit could otherwise ask for gigabytes), and the client
// never puts more in one message. It is far above what a node runs at
// once (4,096 calls per stream; 1,000 ops per batch).
const MaxStreamCalls = 1 << 17

// MaxTokenBytes bounds the token in a hello.
const MaxTokenBytes = 4096

// CheckToken says whether token can be a cluster's auth token. It travels
// in a hello (at most MaxTokenBytes), as an HTTP header and gRPC metadata
// value ("Bearer TOKEN") and as a RESP AUTH argument, so it must be visible
// ASCII: no spaces, control characters or other bytes those refuse or
// split on. A longer one would let a node start whose framed connections
// to its peers all fail at their hello. The error never quotes the token.
func CheckToken(token string) error {
	if len(token) > MaxTokenBytes {
		return fmt.Errorf("auth token of %d bytes: at most %d", len(token), MaxTokenBytes)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("auth token has a byte 0x%02x at offset %d: only visible ASCII (no spaces or control characters) may travel in its headers", c, i)
		}
	}
	return nil
}

// TokenEqual reports whether got is the token want, in a time that depends
// on neither's content nor length. subtle.ConstantTimeCompare alone returns
// at once when the lengths differ, which tells a prober the token's length;
// comparing the tokens' SHA-256 digests, always 32 bytes, does not.
func TokenEqual(got, want []byte) bool {
	g, w := sha256.Sum256(got), sha256.Sum256(want)
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// Header is the bytes before each frame's message: its length.
const Header = 4

// ErrTooLarge ends a connection whose next frame claims more bytes than
// the reader accepts.
var ErrTooLarge = errors.New("frame too large")

// AppendHello appends the opening of a connection of the wire magic names.
func AppendHello(buf, magic []byte, token string) ([]byte, error) {
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("auth token of %d bytes (at most %d)", len(token), MaxTokenBytes)
	}
	buf = append(buf, magic...)
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(token)))
	return append(buf, token...), nil
}

// ReadHello reads the opening of a connection that must open with magic,
// and returns its token.
func ReadHello(r io.Reader, magic []byte) (string, error) {
	head := make([]byte, len(magic)+2)
	if _, err := io.ReadFull(r, head); err != nil {
		return "", fmt.Errorf("hello: %w", err)
	}
	if !bytes.Equal(head[:len(magic)], magic) {
		return "", fmt.Errorf("hello: not a %q connection (bad magic)", bytes.TrimSpace(bytes.TrimLeft(magic, "\x00")))
	}
	n := int(binary.BigEndian.Uint16(head[len(magic):]))
	if n > MaxTokenBytes {
		return "", fmt.Errorf("hello: token of %d bytes (at most %d)", n, MaxTokenBytes)
	}
	token := make([]byte, n)
	if _, err := io.ReadFull(r, token); err != nil {
		return "", fmt.Errorf("hello: %w", err)
	}
	return string(token), nil
}

// Append appends m as one frame: its length, then its bytes, marshalled in
// place so that a reused buf costs no allocation.
func Append(buf []byte, m proto.Message) ([]byte, error) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return buf[:start], err
	}
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-Header))
	return buf, nil
}

// Reader reads a hello and frames from one connection. It is an
// io.Reader of the connection's bytes, buffered, for ReadHello.
type Reader struct {
	r   *bufio.Reader
	max int // the largest frame accepted, in bytes
	buf []byte
}

// keepBuf is the largest buffer a Reader keeps between frames; a larger
// frame gets a buffer of its own, dropped after it.
const keepBuf = 1 << 20

// growStep is how far a large frame's buffer grows ahead of the bytes that
// arrived: a peer that announces a huge frame and sends little makes the
// receiver hold little.
const growStep = 1 << 20

// NewReader reads frames of at most max bytes from r.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

func (f *Reader) Read(b []byte) (int, error) { return f.r.Read(b) }

// Reset makes f read from r, keeping its buffers.
func (f *Reader) Reset(r io.Reader) { f.r.Reset(r) }

// Held is the capacity of the buffer kept between frames.
func (f *Reader) Held() int { return cap(f.buf) }

// Next reads one frame into m (reset first). A frame cut short is
// io.ErrUnexpectedEOF; a clean end between frames is io.EOF.
func (f *Reader) Next(m proto.Message) error {
	data, err := f.NextBytes()
	if err != nil {
		return err
	}
	proto.Reset(m)
	// proto.Unmarshal copies bytes fields: nothing in m aliases f.buf,
	// which the next frame overwrites.
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("bad frame: %w", err)
	}
	return nil
}

// NextBytes reads one frame and returns its payload, undecoded, for a
// caller that decodes it by hand (the raft receive path). The bytes are
// the reader's buffer: valid only until the next call. Errors as Next's.
func (f *Reader) NextBytes() ([]byte, error) {
	var head [Header]byte
	if _, err := io.ReadFull(f.r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n > f.max {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrTooLarge, n, f.max)
	}
	return f.read(n)
}

// read returns the next n bytes, in f.buf when they fit.
func (f *Reader) read(n int) ([]byte, error) {
	if n <= keepBuf {
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

// BearerToken returns the token of an Authorization value (an HTTP header
// or gRPC metadata) in the Bearer scheme. The scheme matches in any case:
// RFC 7235 section 2.1 (and RFC 6750 section 2.1 for Bearer) make schemes
// case-insensitive, and some clients send "bearer". One or more spaces
// part it from the token (RFC 7235's 1*SP); the token itself is compared
// exactly by the caller.
func BearerToken(value string) (string, bool) {
	const scheme = "Bearer"
	if len(value) <= len(scheme) || !strings.EqualFold(value[:len(scheme)], scheme) || value[len(scheme)] != ' ' {
		return "", false
	}
	token := strings.TrimLeft(value[len(scheme):], " ")
	return token, token != ""
}
