package resp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzReadCommand feeds arbitrary bytes to the command reader: it must
// never panic, never return arguments beyond its limits, and what it reads
// from a well-formed re-encoding of the commands it returned must be the
// same commands (the parser and a RESP encoder agree).
func FuzzReadCommand(f *testing.F) {
	for _, s := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n",
		"SET \"a b\" 'c' \"\\x41\"\r\n",
		"*1\r\n$99999999999\r\n",
		"*-1\r\n*0\r\n",
		"$3\r\nabc\r\n",
		"\r\n\n",
		"*2\r\n$3\r\nGET\r\n$5\r\nab",
	} {
		f.Add([]byte(s))
	}
	for _, s := range blankLineCases {
		f.Add([]byte(s))
	}
	limits := Limits{MaxBulkBytes: 1 << 10, MaxArgs: 64, MaxInlineBytes: 256, MaxCommandBytes: 4 << 10}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in), limits)
		var cmds [][][]byte
		for range 1000 {
			a, _, err := r.ReadCommand()
			if err != nil {
				var pe *ProtocolError
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &pe) {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				break
			}
			if len(a) > limits.MaxArgs {
				t.Fatalf("%d args, limit %d", len(a), limits.MaxArgs)
			}
			total := 0
			for _, x := range a {
				total += len(x)
			}
			if total > limits.MaxCommandBytes {
				t.Fatalf("%d bytes, limit %d", total, limits.MaxCommandBytes)
			}
			if len(a) > 0 {
				cmds = append(cmds, a)
			}
		}
		var enc bytes.Buffer
		for _, c := range cmds {
			enc.Write(Command(c...))
		}
		r2 := NewReader(&enc, limits)
		for i, want := range cmds {
			got, _, err := r2.ReadCommand()
			if err != nil {
				t.Fatalf("re-reading command %d: %v", i, err)
			}
			if len(got) != len(want) {
				t.Fatalf("command %d: %q re-read as %q", i, want, got)
			}
			for j := range got {
				if !bytes.Equal(got[j], want[j]) {
					t.Fatalf("command %d: %q re-read as %q", i, want, got)
				}
			}
		}
	})
}

// TestArgumentsStayValid protects the argument arena: arguments of many
// commands (past one arena's size) keep their bytes after later reads, and
// appending to one argument does not write over the one read after it.
func TestArgumentsStayValid(t *testing.T) {
	var in bytes.Buffer
	const n = 300 // 300 x (3 + 100 + 100) bytes: several arenas
	for i := range n {
		in.Write(Command([]byte("SET"), bytes.Repeat([]byte{byte('a' + i%26)}, 100), bytes.Repeat([]byte{byte('A' + i%26)}, 100)))
	}
	r := NewReader(&in, Limits{})
	var cmds [][][]byte
	for range n {
		a, _, err := r.ReadCommand()
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, a)
	}
	_ = append(cmds[0][1], "overflow"...)
	for i, a := range cmds {
		key, value := bytes.Repeat([]byte{byte('a' + i%26)}, 100), bytes.Repeat([]byte{byte('A' + i%26)}, 100)
		if string(a[0]) != "SET" || !bytes.Equal(a[1], key) || !bytes.Equal(a[2], value) {
			t.Fatalf("command %d reads %q after later reads", i, a)
		}
	}
}

// FuzzReadPathsAgree: a stream read from a buffer that holds it whole
// (bufferedMultibulk's fast path, wherever a command fits the buffer) and
// read byte by byte (iotest.OneByteReader: the general path only) gives
// the same commands, byte counts and errors, under tight limits.
func FuzzReadPathsAgree(f *testing.F) {
	for _, s := range readPathCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		limits := Limits{MaxBulkBytes: 600, MaxArgs: 6, MaxInlineBytes: 256, MaxCommandBytes: 1000}
		whole := readAll(NewReader(bytes.NewReader(in), limits))
		bytewise := readAll(NewReader(iotest.OneByteReader(bytes.NewReader(in)), limits))
		if whole != bytewise {
			t.Fatalf("%q: read whole %s, byte by byte %s", in, whole, bytewise)
		}
	})
}

// readPathCases are streams at the edges of bufferedMultibulk's rules.
var readPathCases = []string{
	"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nabc\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
	"*1\r\n$0\r\n\r\n",        // an empty argument
	"*1\r\n$+4\r\nPING\r\n",   // a sign, as strconv accepts
	"*+1\r\n$4\r\nPING\r\n",   // a signed count
	"*1\r\n$0004\r\nPING\r\n", // leading zeros
	"*1\r\n$4\r\nPINGxx",      // data not followed by CRLF
	"*1\r\n$4\r\nPING\rx",     // CR without LF after the data
	"*2\r\n$1\r\na\r\n:1\r\n", // not a bulk
	"*2\r\n$1\r\na\r\n",       // an argument missing
	"*6\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n", // MaxArgs
	"*7\r\n$1\r\na\r\n", // over MaxArgs
	"*1\r\n$601\r\n" + strings.Repeat("x", 601) + "\r\n",                                                              // over MaxBulkBytes
	"*1\r\n$600\r\n" + strings.Repeat("x", 600) + "\r\n",                                                              // MaxBulkBytes, past the arena's rule
	"*2\r\n$510\r\n" + strings.Repeat("x", 510) + "\r\n$511\r\n" + strings.Repeat("y", 511) + "\r\n",                  // the arena's edge; over MaxCommandBytes
	"*2\r\n$500\r\n" + strings.Repeat("x", 500) + "\r\n$501\r\n" + strings.Repeat("y", 501) + "\r\n",                  // one byte over MaxCommandBytes
	"*2\r\n$500\r\n" + strings.Repeat("x", 500) + "\r\n$500\r\n" + strings.Repeat("y", 500) + "\r\n*1\r\n$1\r\nz\r\n", // MaxCommandBytes exactly
	"*1\r\n$" + strings.Repeat("0", 70) + "4\r\nPING\r\n",                                                             // a header over its limit
	"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n",
	"*1\r\n$-1\r\n",
	"*1\r\n$4\nPING\r\n",                              // LF without CR
	"*1\r\n$4\r\nPING\r\nSET a b\r\n*1\r\n$4\r\nPING", // inline between, a truncated last
}

// blankLineCases are commands followed by blank lines or whitespace, which
// the server once left unanswered until the next command came.
var blankLineCases = []string{
	"SET blank1 x\r\n\r\n",
	"PING\r\n\r\n",
	"PING\r\n\n",
	"PING\n\n",
	"PING\r\n   \r\n",
	"*1\r\n$4\r\nPING\r\n\r\n",
	"PING\r\n\r",
	"PING\r\n   ",
	"\r\nPING\r\n",
	"PING\r\n\r\nPING\r\n",
	"PING\r\n*0\r\n",
	"PING\r\nP",
	"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
}

// FuzzCommandBuffered: once the stream is buffered whole, CommandBuffered
// says whether ReadCommand would find another command: when it says no,
// ReadCommand finds none (it skips what is left and meets the end, or
// fails); when it says yes, ReadCommand does not meet a clean end. A
// server answers its pipeline before reading on when it says no, so a
// wrong no would cut a pipeline and a wrong yes would hold its replies.
func FuzzCommandBuffered(f *testing.F) {
	for _, s := range blankLineCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		limits := Limits{MaxBulkBytes: 600, MaxArgs: 6, MaxInlineBytes: 256, MaxCommandBytes: 1000}
		if len(in) >= 64<<10 {
			return // the reader's buffer holds it whole
		}
		r := NewReader(bytes.NewReader(in), limits)
		if _, _, err := r.ReadCommand(); err != nil { // its first read buffers the whole stream
			return
		}
		for range 1000 {
			more := r.CommandBuffered()
			a, _, err := r.ReadCommand()
			switch {
			case !more && (len(a) > 0 || err == nil):
				t.Fatalf("%q: no command buffered, then read %q, %v", in, a, err)
			case more && errors.Is(err, io.EOF):
				t.Fatalf("%q: a command buffered, then a clean end", in)
			}
			if err != nil {
				return
			}
		}
	})
}
