package resp

import (
	"bytes"
	"math"
	"strconv"
)

// Writer encodes replies into a buffer for one protocol version. RESP3
// types fall back to RESP2 forms at version 2: null to a null bulk string
// ("$-1"), a map to a flat array of keys and values, a set to an array, a
// double to a bulk string, a verbatim string to a bulk string, a boolean to
// an integer.
type Writer struct {
	buf   []byte
	proto int
}

// NewWriter returns a writer for protocol version proto (2 or 3).
func NewWriter(proto int) *Writer { return &Writer{proto: proto} }

// Init makes w an empty writer for protocol version proto that writes into
// buf's spare capacity first: a caller that keeps a small array beside
// each reply ("+OK", ":1") allocates none for it.
func (w *Writer) Init(proto int, buf []byte) { *w = Writer{buf: buf[:0], proto: proto} }

// Proto is the writer's protocol version.
func (w *Writer) Proto() int { return w.proto }

// Bytes is what has been written so far.
func (w *Writer) Bytes() []byte { return w.buf }

// Len is the number of bytes written so far.
func (w *Writer) Len() int { return len(w.buf) }

// Reset empties the buffer, keeping its memory.
func (w *Writer) Reset() { w.buf = w.buf[:0] }

// SimpleString writes "+s". s must not hold CR or LF; those become spaces.
func (w *Writer) SimpleString(s string) {
	w.buf = append(w.buf, '+')
	w.buf = appendLine(w.buf, s)
}

// Error writes "-msg"; msg starts with the error's code ("ERR", "WRONGTYPE").
// CR and LF in msg become spaces.
// ErrorCode is the first word of the reply if it is an error reply
// ("ERR", "WRONGTYPE", ...), or "" if it is not.
func (w *Writer) ErrorCode() string {
	if len(w.buf) == 0 || w.buf[0] != '-' {
		return ""
	}
	end := bytes.IndexAny(w.buf, " \r")
	if end < 0 {
		end = len(w.buf)
	}
	return string(w.buf[1:end])
}

func (w *Writer) Error(msg string) {
	w.buf = append(w.buf, '-')
	w.buf = appendLine(w.buf, msg)
}

func appendLine(b []byte, s string) []byte {
	start := len(b)
	b = append(b, s...)
	if hasCRLF(b[start:]) {
		// Byte by byte, as Redis maps them: other bytes, UTF-8 or not,
		// stay as they are.
		for i := start; i < len(b); i++ {
			if b[i] == '\r' || b[i] == '\n' {
				b[i] = ' '
			}
		}
	}
	return append(b, '\r', '\n')
}

// Int writes ":n".
func (w *Writer) Int(n int64) {
	w.buf = append(w.buf, ':')
	w.buf = strconv.AppendInt(w.buf, n, 10)
	w.buf = append(w.buf, '\r', '\n')
}

// Bulk writes a bulk string.
func (w *Writer) Bulk(b []byte) {
	w.buf = append(w.buf, '$')
	w.buf = strconv.AppendInt(w.buf, int64(len(b)), 10)
	w.buf = append(w.buf, '\r', '\n')
	w.buf = append(w.buf, b...)
	w.buf = append(w.buf, '\r', '\n')
}

// BulkString writes s as a bulk string.
func (w *Writer) BulkString(s string) { w.Bulk([]byte(s)) }

// Null writes RESP3's null ("_"), or RESP2's null bulk string ("$-1").
func (w *Writer) Null() {
	if w.proto >= 3 {
		w.buf = append(w.buf, '_', '\r', '\n')
		return
	}
	w.buf = append(w.buf, "$-1\r\n"...)
}

// NullArray writes RESP3's null, or RESP2's null array ("*-1"), the reply
// of an EXEC that did not run.
func (w *Writer) NullArray() {
	if w.proto >= 3 {
		w.buf = append(w.buf, '_', '\r', '\n')
		return
	}
	w.buf = append(w.buf, "*-1\r\n"...)
}

// Array writes the header of an array of n elements, which the caller
// writes next.
func (w *Writer) Array(n int) { w.header('*', n) }

// Map writes the header of a map of n key-value pairs (2n elements follow),
// or at version 2 of an array of 2n elements.
func (w *Writer) Map(n int) {
	if w.proto >= 3 {
		w.header('%', n)
		return
	}
	w.header('*', 2*n)
}

// Set writes the header of a set of n elements, or of an array at version 2.
func (w *Writer) Set(n int) {
	if w.proto >= 3 {
		w.header('~', n)
		return
	}
	w.header('*', n)
}

func (w *Writer) header(c byte, n int) {
	w.buf = append(w.buf, c)
	w.buf = strconv.AppendInt(w.buf, int64(n), 10)
	w.buf = append(w.buf, '\r', '\n')
}

// Double writes a RESP3 double, or at version 2 a bulk string of its text.
func (w *Writer) Double(f float64) {
	s := FormatFloat(f)
	if w.proto >= 3 {
		w.buf = append(w.buf, ',')
		w.buf = append(w.buf, s...)
		w.buf = append(w.buf, '\r', '\n')
		return
	}
	w.BulkString(s)
}

// FormatFloat formats f as Redis does for replies: shortest exact decimal,
// "inf", "-inf" or "nan".
func FormatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// Bool writes a RESP3 boolean, or at version 2 the integer 1 or 0.
func (w *Writer) Bool(b bool) {
	if w.proto >= 3 {
		if b {
			w.buf = append(w.buf, "#t\r\n"...)
		} else {
			w.buf = append(w.buf, "#f\r\n"...)
		}
		return
	}
	if b {
		w.Int(1)
	} else {
		w.Int(0)
	}
}

// Verbatim writes a RESP3 verbatim string of format ("txt"), or at version
// 2 a bulk string.
func (w *Writer) Verbatim(format string, s []byte) {
	if w.proto < 3 || len(format) != 3 {
		w.Bulk(s)
		return
	}
	w.buf = append(w.buf, '=')
	w.buf = strconv.AppendInt(w.buf, int64(len(s)+4), 10)
	w.buf = append(w.buf, '\r', '\n')
	w.buf = append(w.buf, format...)
	w.buf = append(w.buf, ':')
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '\r', '\n')
}

// Raw appends bytes already encoded (another Writer's output).
func (w *Writer) Raw(b []byte) { w.buf = append(w.buf, b...) }

// Command encodes a command as a client sends it: an array of bulk strings.
func Command(args ...[]byte) []byte {
	w := NewWriter(2)
	w.Array(len(args))
	for _, a := range args {
		w.Bulk(a)
	}
	return w.Bytes()
}
