package transport

import (
	"fmt"
	"io"

	"github.com/concord-kv/concord/internal/frame"
)

// The framed TCP wire (Config.Wire = WireTCP) of one lane of raft traffic:
//
//	magic (16 bytes) | token length (uint16, big-endian) | token
//	then frames:     length (uint32, big-endian) | RaftBatch (protobuf)
//
// A sender's lane builds its frames as it queues messages (lane.go).
//
// The sender speaks first and only; the receiver never writes (it closes the
// connection on any error, and the sender reconnects). The magic lets the
// node's port mux tell this wire from gRPC and RESP; its first byte, NUL,
// opens neither a RESP command nor an HTTP/2 preface. The token is the
// cluster's auth token when the port has no TLS (with TLS a peer proves
// itself by its certificate, and the token is empty).

// Magic opens every framed raft connection (portmux routes on it).
var Magic = []byte("\x00concord-raft/1\n")

// The framing is internal/frame's, shared with the client wire.
const (
	frameHeader  = frame.Header
	keepFrameBuf = 1 << 20
)

// errFrameTooLarge ends a connection whose next frame claims more bytes
// than the receiver accepts.
var errFrameTooLarge = frame.ErrTooLarge

type frameReader = frame.Reader

func newFrameReader(r io.Reader, max int) *frameReader { return frame.NewReader(r, max) }

// appendHello appends the opening of a connection.
func appendHello(buf []byte, token string) ([]byte, error) {
	buf, err := frame.AppendHello(buf, Magic, token)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return buf, nil
}

// readHello reads the opening of a connection and returns its token.
func readHello(r io.Reader) (string, error) {
	token, err := frame.ReadHello(r, Magic)
	if err != nil {
		return "", fmt.Errorf("transport: %w", err)
	}
	return token, nil
}
