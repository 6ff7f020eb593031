package resp

import (
	"bufio"
	"fmt"
	"strconv"
)

// Value is one parsed reply: Type is its RESP type byte ('+', '-', ':',
// '$', '*', '_', '%', '~', ',', '#', '='). Str holds simple strings,
// errors, bulk and verbatim strings and doubles' text; Int integers and
// booleans (1 or 0); Elems arrays, sets and maps (keys and values in
// turn). Null is set for '_' and RESP2's "$-1" and "*-1".
type Value struct {
	Type  byte
	Str   string
	Int   int64
	Elems []Value
	Null  bool
}

// String renders v compactly, for test messages.
func (v Value) String() string {
	switch {
	case v.Null:
		return "(nil)"
	case v.Type == '-':
		return "(error) " + v.Str
	case v.Type == ':' || v.Type == '#':
		return strconv.FormatInt(v.Int, 10)
	case v.Type == '*' || v.Type == '%' || v.Type == '~':
		return fmt.Sprint(v.Elems)
	}
	return strconv.Quote(v.Str)
}

// ParseReply reads one reply from r. It is meant for tests and tools: it
// trusts lengths up to 512 MiB and nests at most 32 deep.
func ParseReply(r *bufio.Reader) (Value, error) { return parseReply(r, 0) }

func parseReply(r *bufio.Reader, depth int) (Value, error) {
	if depth > 32 {
		return Value{}, fmt.Errorf("resp: reply nested too deep")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return Value{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return Value{}, fmt.Errorf("resp: malformed reply line %q", line)
	}
	t, body := line[0], line[1:len(line)-2]
	v := Value{Type: t}
	switch t {
	case '+', '-', ',':
		v.Str = body
	case ':':
		v.Int, err = strconv.ParseInt(body, 10, 64)
	case '#':
		v.Int = map[bool]int64{true: 1}[body == "t"]
	case '_':
		v.Null = true
	case '$', '=':
		return parseBulk(r, v, body)
	case '*', '~', '%':
		return parseAggregate(r, v, body, depth)
	default:
		return Value{}, fmt.Errorf("resp: unknown reply type %q", t)
	}
	return v, err
}

func parseBulk(r *bufio.Reader, v Value, body string) (Value, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n > 512<<20 {
		return Value{}, fmt.Errorf("resp: bad bulk length %q", body)
	}
	if n < 0 {
		v.Null = true
		return v, nil
	}
	b, err := readN(r, n+2)
	if err != nil {
		return Value{}, err
	}
	v.Str = string(b[:n])
	if v.Type == '=' && len(v.Str) >= 4 {
		v.Str = v.Str[4:] // drop the "txt:" format
	}
	return v, nil
}

func parseAggregate(r *bufio.Reader, v Value, body string, depth int) (Value, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n > 1<<24 {
		return Value{}, fmt.Errorf("resp: bad aggregate length %q", body)
	}
	if n < 0 {
		v.Null = true
		return v, nil
	}
	if v.Type == '%' {
		n *= 2
	}
	for range n {
		e, err := parseReply(r, depth+1)
		if err != nil {
			return Value{}, err
		}
		v.Elems = append(v.Elems, e)
	}
	return v, nil
}
