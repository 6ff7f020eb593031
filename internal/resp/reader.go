package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Limits bound what one command may carry, so a client cannot make the
// server allocate without bound before a command is even complete.
type Limits struct {
	// MaxBulkBytes bounds one argument (a bulk string). Redis's default is
	// 512 MiB (proto-max-bulk-len); a Concord node sets it from its value limit.
	MaxBulkBytes int
	// MaxArgs bounds the arguments of one command (the multibulk count).
	MaxArgs int
	// MaxInlineBytes bounds an inline command's line (Redis: 64 KiB).
	MaxInlineBytes int
	// MaxCommandBytes bounds the sum of one command's argument lengths.
	MaxCommandBytes int
	// Unauthenticated marks the (smaller) limits of a client that has not
	// given the server's password: a count or length over them is then
	// "unauthenticated multibulk/bulk length", in Redis's words, so the
	// client learns why.
	Unauthenticated bool
}

// DefaultLimits are the limits of a Reader given a zero Limits field.
var DefaultLimits = Limits{MaxBulkBytes: 16 << 20, MaxArgs: 1 << 20, MaxInlineBytes: 64 << 10, MaxCommandBytes: 64 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxBulkBytes <= 0 {
		l.MaxBulkBytes = DefaultLimits.MaxBulkBytes
	}
	if l.MaxArgs <= 0 {
		l.MaxArgs = DefaultLimits.MaxArgs
	}
	if l.MaxInlineBytes <= 0 {
		l.MaxInlineBytes = DefaultLimits.MaxInlineBytes
	}
	if l.MaxCommandBytes <= 0 {
		l.MaxCommandBytes = DefaultLimits.MaxCommandBytes
	}
	return l
}

// ProtocolError is a stream that cannot be parsed further: the server
// answers "ERR Protocol error: <Msg>" and closes the connection.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// Reader reads commands from a client's stream.
type Reader struct {
	br     *bufio.Reader
	limits Limits
	hdr    [headerLineMax + 2]byte // the header line being parsed
	arena  []byte                  // small arguments are carved from it
	lists  [][]byte                // short argument lists are carved from it
}

// NewReader reads commands from r within limits (zero fields: DefaultLimits).
func NewReader(r io.Reader, limits Limits) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), limits: limits.withDefaults()}
}

// CommandBuffered reports whether a byte of another command has already
// arrived: a byte other than whitespace is buffered, read from the stream
// but not yet parsed. Then the caller can go on gathering a pipeline, and
// ReadCommand waits, if at all, only for the rest of a command the client
// has begun to send. False when the buffer holds nothing but blank lines
// (or whitespace of a line not yet ended), which ReadCommand skips: it
// would then wait for a command the client may never send, so the caller
// must answer what it has read first. It consumes nothing.
func (r *Reader) CommandBuffered() bool {
	buf, _ := r.br.Peek(r.br.Buffered()) // never waits: no more than is buffered
	for _, c := range buf {
		if !isSpace(c) {
			return true
		}
	}
	return false
}

// SetLimits replaces the limits of the commands read from now on (zero
// fields: DefaultLimits): a server lifts an unauthenticated client's small
// ones once it has authenticated.
func (r *Reader) SetLimits(l Limits) { r.limits = l.withDefaults() }

// overLimit is the error of a count or length ("multibulk", "bulk") over
// the limits.
func (r *Reader) overLimit(what string) error {
	if r.limits.Unauthenticated {
		return protoErr("unauthenticated %s length", what)
	}
	return protoErr("invalid %s length", what)
}

// ReadCommand reads one command and returns its arguments (the first is the
// command's name), the bytes it took on the wire, and an error: io.EOF at a
// clean end of stream between commands, io.ErrUnexpectedEOF inside one, a
// *ProtocolError for malformed input. An empty inline line is skipped, as
// Redis does. The arguments are fresh slices the caller may keep, until it
// calls ReuseArgs.
func (r *Reader) ReadCommand() (args [][]byte, n int, err error) {
	for {
		b, err := r.br.Peek(1)
		if err != nil {
			return nil, 0, err // io.EOF between commands
		}
		if b[0] == '*' {
			return r.readMultibulk()
		}
		args, n, err := r.readInline()
		if err != nil || len(args) > 0 {
			return args, n, err
		}
	}
}

// readLine reads a line ending in CRLF (LF alone is accepted for inline
// commands, as Redis does) of at most max bytes, without the line ending.
// It fails as soon as max bytes pass without a line end, without waiting
// for more input.
func (r *Reader) readLine(max int, inline bool) ([]byte, error) {
	if !inline {
		return r.readHeaderLine(max)
	}
	var line []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max+2 || (err != nil && len(line) > max+1) {
			return nil, protoErr("too big inline request")
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readHeaderLine reads a "*<count>" or "$<len>" line byte by byte, so that
// a header that runs on past max bytes fails at once.
// The line is valid until the next read: callers parse it at once.
func (r *Reader) readHeaderLine(max int) ([]byte, error) {
	if line, ok := r.bufferedHeaderLine(max); ok {
		return line, nil
	}
	line := r.hdr[:0]
	for {
		c, err := r.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if c == '\n' {
			break
		}
		if line = append(line, c); len(line) > max+1 {
			return nil, protoErr("too big header line")
		}
	}
	n := len(line)
	if n == 0 || line[n-1] != '\r' {
		return nil, protoErr("expected CRLF")
	}
	return line[:n-1], nil
}

// bufferedHeaderLine is readHeaderLine's fast path: when the whole line,
// CRLF included, is already in the buffer (nearly always: a pipeline
// arrives in one read), it is taken from there in one search instead of a
// ReadByte call per byte, the line's share of a pipelined SET's parsing
// (four header lines per SET). false: the slow path reads it, and answers
// a line that is too long or not ended by CRLF, as before.
func (r *Reader) bufferedHeaderLine(max int) ([]byte, bool) {
	buf, _ := r.br.Peek(min(r.br.Buffered(), max+2)) // never waits: no more than is buffered
	i := bytes.IndexByte(buf, '\n')
	if i < 1 || buf[i-1] != '\r' {
		return nil, false
	}
	line := buf[: i-1 : i-1]
	_, _ = r.br.Discard(i + 1) // buffered: cannot fail
	return line, true
}

// headerLineMax bounds a "*<count>" or "$<len>" line.
const headerLineMax = 64

func (r *Reader) readMultibulk() ([][]byte, int, error) {
	if args, n, ok := r.bufferedMultibulk(); ok {
		return args, n, nil
	}
	line, err := r.readLine(headerLineMax, false)
	if err != nil {
		return nil, 0, err
	}
	n := len(line) + 2
	count, ok := parseLen(line[1:])
	if !ok {
		return nil, n, protoErr("invalid multibulk length")
	}
	if count > int64(r.limits.MaxArgs) {
		return nil, n, r.overLimit("multibulk")
	}
	if count <= 0 {
		return nil, n, nil // "*0" and "*-1": nothing to run, as in Redis
	}
	// Grow the slice as arguments arrive, not from the declared count: a
	// client may declare a million arguments and send two.
	args := r.argList(int(min(count, 64)))
	total := 0
	for range count {
		arg, m, err := r.readBulk()
		n += m
		if err != nil {
			return nil, n, err
		}
		if total += len(arg); total > r.limits.MaxCommandBytes {
			return nil, n, protoErr("command of more than %d bytes", r.limits.MaxCommandBytes)
		}
		args = append(args, arg)
	}
	return args, n, nil
}

// maxBufferedArgs bounds the arguments of a command bufferedMultibulk
// parses (the spans it notes live on the stack).
const maxBufferedArgs = maxListArgs

// bufferedMultibulk is readMultibulk's fast path: when a whole command of
// at most maxBufferedArgs arguments, well formed and within the limits, is
// already in the buffer (nearly always: a pipeline arrives in one read), it
// is parsed from there with one look at the buffer and one Discard, instead
// of two Peeks, a line read and a ReadFull per argument through the
// bufio.Reader (parsing was ~10 % of a Redis node under pipelined SET). It
// consumes nothing unless it returns true; otherwise the general path reads
// the command from the same bytes, and gives any error, as before.
func (r *Reader) bufferedMultibulk() ([][]byte, int, bool) {
	buf, _ := r.br.Peek(r.br.Buffered()) // never waits: no more than is buffered
	line, pos, ok := bufferedLine(buf, 0)
	if !ok || len(line) == 0 || line[0] != '*' {
		return nil, 0, false
	}
	count, ok := parseLen(line[1:])
	if !ok || count <= 0 || count > maxBufferedArgs || count > int64(r.limits.MaxArgs) {
		return nil, 0, false
	}
	var spans [maxBufferedArgs][2]int
	total := 0
	for k := range count {
		line, next, ok := bufferedLine(buf, pos)
		if !ok || len(line) == 0 || line[0] != '$' {
			return nil, 0, false
		}
		size, ok := parseLen(line[1:])
		if !ok || size < 0 || size > int64(r.limits.MaxBulkBytes) {
			return nil, 0, false
		}
		end := next + int(size)
		if end+2 > len(buf) || buf[end] != '\r' || buf[end+1] != '\n' {
			return nil, 0, false
		}
		if total += int(size); total > r.limits.MaxCommandBytes {
			return nil, 0, false
		}
		spans[k] = [2]int{next, end}
		pos = end + 2
	}
	args := r.argList(int(count))
	for _, sp := range spans[:count] {
		args = append(args, r.copyArg(buf[sp[0]:sp[1]]))
	}
	_, _ = r.br.Discard(pos) // buffered: cannot fail
	return args, pos, true
}

// bufferedLine returns the header line starting at buf[pos] without its
// CRLF, and the index after it, when the whole line, of at most
// headerLineMax bytes, is in buf (as bufferedHeaderLine finds it).
func bufferedLine(buf []byte, pos int) ([]byte, int, bool) {
	window := buf[pos:min(len(buf), pos+headerLineMax+2)]
	i := bytes.IndexByte(window, '\n')
	if i < 1 || window[i-1] != '\r' {
		return nil, 0, false
	}
	return window[: i-1 : i-1], pos + i + 1, true
}

// copyArg returns a copy of b the caller may keep (until ReuseArgs): from
// the arena if it is small, as readArg does, else of its own.
func (r *Reader) copyArg(b []byte) []byte {
	n := len(b)
	if n+2 > maxArenaArg { // readArg's rule: the argument with its CRLF
		return append(make([]byte, 0, n), b...)
	}
	if cap(r.arena)-len(r.arena) < n {
		r.arena = make([]byte, 0, arenaSize)
	}
	start := len(r.arena)
	r.arena = append(r.arena, b...)
	return r.arena[start : start+n : start+n]
}

func (r *Reader) readBulk() ([]byte, int, error) {
	if b, err := r.br.Peek(1); err == nil && b[0] != '$' {
		return nil, 0, protoErr("expected '$', got '%c'", printableByte(b[0]))
	}
	line, err := r.readLine(headerLineMax, false)
	if err != nil {
		return nil, 0, err
	}
	n := len(line) + 2
	if len(line) == 0 || line[0] != '$' {
		c := byte(' ')
		if len(line) > 0 {
			c = line[0]
		}
		return nil, n, protoErr("expected '$', got '%c'", c)
	}
	size, ok := parseLen(line[1:])
	if !ok || size < 0 {
		return nil, n, protoErr("invalid bulk length")
	}
	if size > int64(r.limits.MaxBulkBytes) {
		return nil, n, r.overLimit("bulk")
	}
	buf, err := r.readArg(int(size) + 2)
	if err != nil {
		return nil, n, err
	}
	n += len(buf)
	if buf[size] != '\r' || buf[size+1] != '\n' {
		return nil, n, protoErr("bulk string not followed by CRLF")
	}
	return buf[:size:size], n, nil
}

// Arguments of at most maxArenaArg bytes (keys, small values: nearly all
// of them) are carved from a shared arena of arenaSize bytes instead of an
// allocation each; each is capped, so appending to one cannot overwrite the
// next, and the arena lives as long as any argument carved from it.
const (
	maxArenaArg = 512
	arenaSize   = 16 << 10
)

// Argument lists of at most maxListArgs (SET k v, GET k: nearly all
// commands) are carved from a shared array of listArenaSize slots, as
// small arguments are from the byte arena: capped, so that appending to
// one cannot overwrite the next.
const (
	maxListArgs   = 8
	listArenaSize = 512
)

// ReuseArgs lets the next commands' arguments and argument lists be
// carved again from the start of the current arena and list arena,
// overwriting those of the commands read since the last ReuseArgs or
// DropArgs. Call it only when nothing refers to any of those any more: the
// Redis server calls it after a pipeline whose every command ran to its
// answer (redisapi conn.endPipeline). A connection under pipelined SET
// allocated ~16 KiB of arena every 3.5 pipelines, the largest share of its
// allocated bytes (and so of its GC cycles).
func (r *Reader) ReuseArgs() {
	r.arena = r.arena[:0]
	r.lists = r.lists[:0]
}

// DropArgs makes the next commands' arguments come from fresh memory,
// leaving those read so far to whoever still holds them: a command cut
// short by its timeout may still hold its arguments (a forwarded or
// proposed write sends them later).
func (r *Reader) DropArgs() {
	r.arena = nil
	r.lists = nil
}

// argList returns an empty list with room for n arguments, which the
// caller may keep (until ReuseArgs).
func (r *Reader) argList(n int) [][]byte {
	if n > maxListArgs {
		return make([][]byte, 0, n)
	}
	if cap(r.lists)-len(r.lists) < n {
		r.lists = make([][]byte, 0, listArenaSize)
	}
	start := len(r.lists)
	r.lists = r.lists[:start+n]
	return r.lists[start : start : start+n]
}

// readArg reads exactly n bytes into a fresh slice the caller may keep
// (until ReuseArgs, when it comes from the arena).
func (r *Reader) readArg(n int) ([]byte, error) {
	if n > maxArenaArg {
		return readN(r.br, n)
	}
	if cap(r.arena)-len(r.arena) < n {
		r.arena = make([]byte, 0, arenaSize)
	}
	start := len(r.arena)
	buf := r.arena[start : start+n : start+n]
	if _, err := io.ReadFull(r.br, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	r.arena = r.arena[:start+n]
	return buf, nil
}

// readN reads exactly n bytes. It allocates as the bytes arrive, in steps
// of at most 1 MiB, so that a declared length alone does not allocate.
func readN(r io.Reader, n int) ([]byte, error) {
	const step = 1 << 20
	buf := make([]byte, 0, min(n, step))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf[:cap(buf)], make([]byte, min(n-len(buf), cap(buf)))...)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

func printableByte(c byte) byte {
	if c < 0x20 || c > 0x7e {
		return '?'
	}
	return c
}

// parseLen parses a decimal length of at most 18 digits, possibly -1.
func parseLen(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	if len(b) <= 18 && b[0] >= '0' && b[0] <= '9' {
		// The common case ("3", "256"), by hand: strconv.ParseInt was 3 %
		// of a Redis node's CPU under pipelined SET. 18 digits cannot
		// overflow an int64.
		var v int64
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int64(c-'0')
		}
		return v, true
	}
	v, err := strconv.ParseInt(string(b), 10, 64) // signs, 19 digits
	return v, err == nil
}

// readInline reads a line of space-separated arguments, with Redis's
// quoting: "double quotes" with backslash escapes and 'single quotes'.
func (r *Reader) readInline() ([][]byte, int, error) {
	line, err := r.readLine(r.limits.MaxInlineBytes, true)
	if err != nil {
		return nil, 0, err
	}
	n := len(line) + 1
	args, err := SplitArgs(line)
	if err != nil {
		return nil, n, protoErr("unbalanced quotes in request")
	}
	if len(args) > r.limits.MaxArgs {
		return nil, n, r.overLimit("multibulk")
	}
	return args, n, nil
}

// SplitArgs splits an inline command line as Redis's sdssplitargs does.
func SplitArgs(line []byte) ([][]byte, error) {
	var args [][]byte
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return args, nil
		}
		arg, next, err := splitOne(line, i)
		if err != nil {
			return nil, err
		}
		args = append(args, arg)
		i = next
	}
}

var errQuotes = errors.New("unbalanced quotes")

// splitOne reads the argument starting at line[i] and returns it and the
// index after it.
func splitOne(line []byte, i int) ([]byte, int, error) {
	arg := []byte{}
	inDouble, inSingle := false, false
	for ; i < len(line); i++ {
		c := line[i]
		switch {
		case inDouble:
			switch {
			case c == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
				arg = append(arg, hexVal(line[i+2])<<4|hexVal(line[i+3]))
				i += 3
			case c == '\\' && i+1 < len(line):
				i++
				arg = append(arg, unescape(line[i]))
			case c == '"':
				if i+1 < len(line) && !isSpace(line[i+1]) {
					return nil, 0, errQuotes // closing quote must be followed by a space
				}
				return arg, i + 1, nil
			default:
				arg = append(arg, c)
			}
		case inSingle:
			switch {
			case c == '\\' && i+1 < len(line) && line[i+1] == '\'':
				i++
				arg = append(arg, '\'')
			case c == '\'':
				if i+1 < len(line) && !isSpace(line[i+1]) {
					return nil, 0, errQuotes
				}
				return arg, i + 1, nil
			default:
				arg = append(arg, c)
			}
		case isSpace(c):
			return arg, i, nil
		case c == '"' && len(arg) == 0:
			inDouble = true
		case c == '\'' && len(arg) == 0:
			inSingle = true
		default:
			arg = append(arg, c)
		}
	}
	if inDouble || inSingle {
		return nil, 0, errQuotes
	}
	return arg, i, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	}
	return c
}

// hasCRLF reports whether b holds a CR or LF, which a simple string or an
// error line cannot carry. A loop: these lines are short ("OK", an error
// text), and bytes.ContainsAny's general search was 1 % of a Redis node
// answering pipelined SETs (one "+OK" each).
func hasCRLF(b []byte) bool {
	for _, c := range b {
		if c == '\r' || c == '\n' {
			return true
		}
	}
	return false
}
