package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func args(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestReadCommand(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     [][][]byte
	}{
		{"multibulk", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", [][][]byte{args("GET", "k")}},
		{"binary arg", "*2\r\n$4\r\nECHO\r\n$4\r\na\r\n\x00\r\n", [][][]byte{args("ECHO", "a\r\n\x00")}},
		{"empty arg", "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", [][][]byte{args("ECHO", "")}},
		{"pipeline", "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", [][][]byte{args("PING"), args("PING")}},
		{"inline", "SET k v\r\n", [][][]byte{args("SET", "k", "v")}},
		{"inline LF only", "PING\n", [][][]byte{args("PING")}},
		{"inline quotes", "SET \"a b\" 'c d' \"\\x41\\n\"\r\n", [][][]byte{args("SET", "a b", "c d", "A\n")}},
		{"empty inline lines skipped", "\r\n  \r\nPING\r\n", [][][]byte{args("PING")}},
		{"zero multibulk", "*0\r\n*1\r\n$4\r\nPING\r\n", [][][]byte{nil, args("PING")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.in), Limits{})
			var got [][][]byte
			for {
				a, _, err := r.ReadCommand()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("ReadCommand: %v", err)
				}
				got = append(got, a)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReadCommandErrors(t *testing.T) {
	small := Limits{MaxBulkBytes: 10, MaxArgs: 3, MaxInlineBytes: 16, MaxCommandBytes: 15}
	for _, tc := range []struct {
		name, in string
		proto    bool // a *ProtocolError; else io.ErrUnexpectedEOF
	}{
		{"truncated bulk", "*2\r\n$3\r\nGET\r\n$5\r\nab", false},
		{"truncated header", "*2\r\n$3\r\nGET\r\n", false},
		{"truncated count", "*2", false},
		{"bulk over limit", "*2\r\n$3\r\nGET\r\n$11\r\n", true},
		{"absurd bulk length", "*1\r\n$99999999999999999999\r\n", true},
		{"negative bulk", "*1\r\n$-5\r\n", true},
		{"too many args", "*4\r\n", true},
		{"absurd multibulk", "*9223372036854775807\r\n", true},
		{"non-numeric count", "*x\r\n", true},
		{"missing $", "*1\r\n+PING\r\n", true},
		{"no CRLF after bulk", "*1\r\n$4\r\nPINGxx", true},
		{"bare LF in header", "*1\n", true},
		{"inline too long", strings.Repeat("a", 40) + "\r\n", true},
		{"unbalanced quotes", "SET \"a b\r\n", true},
		{"command too big", "*2\r\n$8\r\naaaaaaaa\r\n$8\r\nbbbbbbbb\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.in), small)
			_, _, err := r.ReadCommand()
			var pe *ProtocolError
			if tc.proto && !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a protocol error", err)
			}
			if !tc.proto && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}

// TestDeclaredLengthDoesNotAllocate: a bulk length at the limit with few
// bytes behind it allocates about what arrived, not the declared length.
func TestDeclaredLengthDoesNotAllocate(t *testing.T) {
	in := "*1\r\n$16777216\r\nabc"
	var ms1, ms2 runtimeMem
	ms1.read()
	r := NewReader(strings.NewReader(in), Limits{})
	_, _, _ = r.ReadCommand()
	ms2.read()
	if grew := ms2.total - ms1.total; grew > 4<<20 {
		t.Fatalf("reading a 16 MiB declared bulk of 3 bytes allocated %d bytes", grew)
	}
}

func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  func(w *Writer)
		v2, v3 string
	}{
		{"simple", func(w *Writer) { w.SimpleString("OK") }, "+OK\r\n", "+OK\r\n"},
		{"error strips CRLF", func(w *Writer) { w.Error("ERR a\r\nb") }, "-ERR a  b\r\n", "-ERR a  b\r\n"},
		{"error strips a lone CR", func(w *Writer) { w.Error("ERR a\rb") }, "-ERR a b\r\n", "-ERR a b\r\n"},
		{"simple strips a lone LF", func(w *Writer) { w.SimpleString("a\nb") }, "+a b\r\n", "+a b\r\n"},
		{"a line with CR keeps its other bytes", func(w *Writer) { w.Error("ERR a\r\xffb") }, "-ERR a \xffb\r\n", "-ERR a \xffb\r\n"},
		{"int", func(w *Writer) { w.Int(-42) }, ":-42\r\n", ":-42\r\n"},
		{"bulk", func(w *Writer) { w.Bulk([]byte("a\r\nb")) }, "$4\r\na\r\nb\r\n", "$4\r\na\r\nb\r\n"},
		{"null", func(w *Writer) { w.Null() }, "$-1\r\n", "_\r\n"},
		{"null array", func(w *Writer) { w.NullArray() }, "*-1\r\n", "_\r\n"},
		{"map", func(w *Writer) { w.Map(1); w.BulkString("k"); w.Int(1) }, "*2\r\n$1\r\nk\r\n:1\r\n", "%1\r\n$1\r\nk\r\n:1\r\n"},
		{"set", func(w *Writer) { w.Set(1); w.BulkString("a") }, "*1\r\n$1\r\na\r\n", "~1\r\n$1\r\na\r\n"},
		{"double", func(w *Writer) { w.Double(1.5) }, "$3\r\n1.5\r\n", ",1.5\r\n"},
		{"double inf", func(w *Writer) { w.Double(math.Inf(1)) }, "$3\r\ninf\r\n", ",inf\r\n"},
		{"bool", func(w *Writer) { w.Bool(true) }, ":1\r\n", "#t\r\n"},
		{"verbatim", func(w *Writer) { w.Verbatim("txt", []byte("hi")) }, "$2\r\nhi\r\n", "=6\r\ntxt:hi\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				proto int
				want  string
			}{{2, tc.v2}, {3, tc.v3}} {
				w := NewWriter(c.proto)
				tc.write(w)
				if got := string(w.Bytes()); got != c.want {
					t.Errorf("RESP%d: got %q, want %q", c.proto, got, c.want)
				}
				// What the writer wrote parses back as one reply.
				br := bufio.NewReader(bytes.NewReader(w.Bytes()))
				if _, err := ParseReply(br); err != nil {
					t.Errorf("RESP%d: ParseReply(%q): %v", c.proto, w.Bytes(), err)
				}
				if br.Buffered() != 0 {
					t.Errorf("RESP%d: %d bytes left after one reply", c.proto, br.Buffered())
				}
			}
		})
	}
}

func TestParseReply(t *testing.T) {
	in := "*3\r\n$-1\r\n%1\r\n+a\r\n:2\r\n=6\r\ntxt:hi\r\n"
	v, err := ParseReply(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Elems) != 3 || !v.Elems[0].Null || len(v.Elems[1].Elems) != 2 || v.Elems[1].Elems[1].Int != 2 || v.Elems[2].Str != "hi" {
		t.Fatalf("parsed %v", v)
	}
}

// TestJunkFailsWithoutWaiting: a header that runs on without a line end
// fails as soon as it passes its limit, while the client keeps the
// connection open (it does not wait for more bytes that may never come).
func TestJunkFailsWithoutWaiting(t *testing.T) {
	for _, in := range []string{"*2\r\n" + strings.Repeat("x", 100), "*" + strings.Repeat("9", 100)} {
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write([]byte(in)) }() // and never closes
		_, _, err := NewReader(pr, Limits{}).ReadCommand()
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Errorf("%.10q...: err = %v, want a protocol error", in, err)
		}
		pw.Close()
	}
}

// TestErrorCode protects the RESP metrics' code label: the first word of
// an error reply, nothing for any other reply.
func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		write func(w *Writer)
		want  string
	}{
		{func(w *Writer) { w.Error("WRONGTYPE Operation against a key holding the wrong kind of value") }, "WRONGTYPE"},
		{func(w *Writer) { w.Error("ERR") }, "ERR"},
		{func(w *Writer) { w.SimpleString("OK") }, ""},
		{func(w *Writer) {}, ""},
	} {
		w := NewWriter(2)
		c.write(w)
		if got := w.ErrorCode(); got != c.want {
			t.Errorf("ErrorCode of %q = %q, want %q", w.buf, got, c.want)
		}
	}
}

// TestArgListsAreTheirOwn protects the argument list arena: the lists of
// many commands read in a row (more than one arena's worth) are carved
// from shared arrays, so each must keep its own arguments, and appending to
// one (as a caller may) must not overwrite the next command's.
func TestArgListsAreTheirOwn(t *testing.T) {
	var in strings.Builder
	const n = listArenaSize // commands of 3 arguments: several arenas
	for i := range n {
		k := strings.Repeat("k", i%7+1)
		in.WriteString("*3\r\n$3\r\nSET\r\n$" + string(rune('0'+len(k))) + "\r\n" + k + "\r\n$1\r\n" + string(rune('a'+i%26)) + "\r\n")
	}
	r := NewReader(strings.NewReader(in.String()), Limits{})
	var all [][][]byte
	for {
		a, _, err := r.ReadCommand()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, a)
	}
	if len(all) != n {
		t.Fatalf("read %d commands, want %d", len(all), n)
	}
	for i := range all {
		all[i] = append(all[i], []byte("extra")) // must not reach all[i+1]
	}
	for i, a := range all {
		want := args("SET", strings.Repeat("k", i%7+1), string(rune('a'+i%26)), "extra")
		if !reflect.DeepEqual(a, want) {
			t.Fatalf("command %d: %q, want %q", i, a, want)
		}
	}
}

// TestWriterInit protects a writer started on a caller's small buffer: the
// replies land there while they fit, and one that does not fit moves to
// memory of its own with nothing lost; Reset starts it again.
func TestWriterInit(t *testing.T) {
	var small [8]byte
	var w Writer
	w.Init(2, small[:])
	w.SimpleString("OK")
	if got := string(w.Bytes()); got != "+OK\r\n" || &w.Bytes()[0] != &small[0] {
		t.Fatalf("got %q (in the buffer given: %v), want +OK in it", got, &w.Bytes()[0] == &small[0])
	}
	w.Bulk([]byte("a longer value"))
	if got, want := string(w.Bytes()), "+OK\r\n$14\r\na longer value\r\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if string(small[:5]) != "+OK\r\n" {
		t.Fatalf("the buffer given was changed past the first reply: %q", small[:])
	}
	w.Init(3, small[:])
	w.Null()
	if got := string(w.Bytes()); got != "_\r\n" || w.Proto() != 3 {
		t.Fatalf("after Init: %q, proto %d", got, w.Proto())
	}
}

// TestHeaderPathsAgree: a header line found whole in the buffer (the fast
// path) and one read byte by byte (iotest.OneByteReader: the slow path)
// parse to the same commands and the same errors, lengths included.
func TestHeaderPathsAgree(t *testing.T) {
	for _, in := range []string{
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nabc\r\n",
		"*1\r\n$+4\r\nPING\r\n",                // a sign, as strconv accepts
		"*1\r\n$-4\r\nPING\r\n",                // negative: refused
		"*1\r\n$0004\r\nPING\r\n",              // leading zeros
		"*1\r\n$4x\r\nPING\r\n",                // junk after the digits
		"*1\r\n$999999999999999999\r\n",        // 18 digits: over the limit
		"*1\r\n$9223372036854775808\r\n",       // 19 digits, past int64
		"*1\r\n$\r\n",                          // no digits
		"*1\r\n$4\n",                           // LF without CR
		"*1\r\n$4\rx\r\nPING\r\n",              // a CR inside the line
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n", // a truncated second command
		"*" + strings.Repeat("9", 70) + "\r\n", // a header over its limit
	} {
		whole := readAll(NewReader(strings.NewReader(in), Limits{}))
		bytewise := readAll(NewReader(iotest.OneByteReader(strings.NewReader(in)), Limits{}))
		if whole != bytewise {
			t.Errorf("%q: read whole %s, byte by byte %s", in, whole, bytewise)
		}
	}
}

// readAll reads commands until an error and describes what it read.
func readAll(r *Reader) string {
	var b strings.Builder
	for {
		a, n, err := r.ReadCommand()
		fmt.Fprintf(&b, "%q/%d ", a, n)
		if err != nil {
			fmt.Fprintf(&b, "err=%v", err)
			return b.String()
		}
	}
}

// BenchmarkReadSetPipeline parses redis-benchmark's pipelined SET (-d 256
// -P 16), one pipeline per op: what a Redis node parses per read. Each
// pipeline's arguments are reused by the next (ReuseArgs), as the server
// does once a pipeline is answered.
func BenchmarkReadSetPipeline(b *testing.B) {
	cmd := "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$256\r\n" + strings.Repeat("x", 256) + "\r\n"
	pipe := []byte(strings.Repeat(cmd, 16))
	src := &repeatReader{data: pipe}
	r := NewReader(src, Limits{})
	b.SetBytes(int64(len(pipe)))
	b.ReportAllocs()
	for b.Loop() {
		for range 16 {
			if _, _, err := r.ReadCommand(); err != nil {
				b.Fatal(err)
			}
		}
		r.ReuseArgs()
	}
}

// repeatReader returns data again and again, one copy per Read.
type repeatReader struct{ data []byte }

func (r *repeatReader) Read(p []byte) (int, error) { return copy(p, r.data), nil }

// TestReuseArgs: after ReuseArgs the next commands' arguments and lists
// are read into the memory of those before (a pipeline of SETs then
// allocates nothing); after DropArgs into fresh memory, leaving the
// earlier ones intact.
func TestReuseArgs(t *testing.T) {
	cmd := func(v string) string { return fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n", len(v), v) }
	src := &repeatReader{data: []byte(cmd("aaaa"))}
	r := NewReader(src, Limits{})
	first, _, err := r.ReadCommand()
	if err != nil {
		t.Fatal(err)
	}
	r.ReuseArgs()
	src.data = []byte(cmd("bbbb"))
	again, _, _ := r.ReadCommand()
	if &again[2][0] != &first[2][0] || &again[0] != &first[0] || string(first[2]) != "bbbb" {
		t.Errorf("after ReuseArgs: a value at %p (first at %p), list at %p (%p), first value now %q; want the same memory",
			&again[2][0], &first[2][0], &again[0], &first[0], first[2])
	}
	r.DropArgs()
	src.data = []byte(cmd("cccc"))
	fresh, _, _ := r.ReadCommand()
	if &fresh[2][0] == &again[2][0] || &fresh[0] == &again[0] || string(again[2]) != "bbbb" || string(fresh[2]) != "cccc" {
		t.Errorf("after DropArgs: the earlier value %q at %p, the new %q at %p; want the earlier intact, the new elsewhere",
			again[2], &again[2][0], fresh[2], &fresh[2][0])
	}
	pipe := strings.Repeat("*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$256\r\n"+strings.Repeat("x", 256)+"\r\n", 16)
	src.data = []byte(pipe)
	if n := testing.AllocsPerRun(100, func() {
		for range 16 {
			if _, _, err := r.ReadCommand(); err != nil {
				t.Fatal(err)
			}
		}
		r.ReuseArgs()
	}); n != 0 {
		t.Errorf("%.1f allocations per pipeline of 16 SETs with ReuseArgs, want 0", n)
	}
}

// TestCommandBuffered: after a command, only a byte of another one counts
// as a command buffered, not blank lines or whitespace (which the server
// once read on, waiting for the next command with the replies unwritten);
// asking consumes nothing.
func TestCommandBuffered(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"PING\r\n", false},
		{"PING\r\n\r\n", false},
		{"PING\r\n\n", false},
		{"PING\n\n", false},
		{"PING\r\n   \r\n", false},
		{"PING\r\n\r", false},
		{"PING\r\n \t", false},
		{"*1\r\n$4\r\nPING\r\n\r\n", false},
		{"PING\r\n\r\nPING\r\n", true},
		{"PING\r\nP", true},
		{"PING\r\n*0\r\n", true},
		{"PING\r\n  *", true},
	} {
		r := NewReader(strings.NewReader(tc.in), Limits{})
		if a, _, err := r.ReadCommand(); err != nil || string(a[0]) != "PING" {
			t.Fatalf("%q: read %q, %v", tc.in, a, err)
		}
		if got := r.CommandBuffered(); got != tc.want {
			t.Errorf("%q: CommandBuffered %v, want %v", tc.in, got, tc.want)
		}
		if tc.in == "PING\r\n\r\nPING\r\n" {
			if a, _, err := r.ReadCommand(); err != nil || len(a) != 1 || string(a[0]) != "PING" {
				t.Errorf("%q: the second command read %q, %v after CommandBuffered", tc.in, a, err)
			}
		}
	}
}
