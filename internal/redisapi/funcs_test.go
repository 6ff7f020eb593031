package redisapi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
	"github.com/concord-kv/concord/internal/kv"
	"github.com/concord-kv/concord/internal/resp"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "bac", false},
		{"h?llo", "hello", true}, {"h?llo", "hllo", false}, {"h[ae]llo", "hallo", true},
		{"h[ae]llo", "hillo", false}, {"h[^e]llo", "hallo", true}, {"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true}, {"h[a-b]llo", "hcllo", false}, {`h\*llo`, "h*llo", true},
		{`h\*llo`, "hello", false}, {"*a*b", "xxaxxb", true}, {"*a*b", "xxaxxbx", false},
		{"ks:*", "ks:07", true}, {"ks:1?", "ks:12", true}, {"ks:1?", "ks:2", false},
		{"a**b", "ab", true},
		// As Redis's stringmatchlen: any byte after "x-" ends a range, ']'
		// too, so "[a-]" is the range ']'..'a' and the class is unclosed.
		{"[a-]1", "a1", false}, {"[a-]1", "]", true}, {"[a-]1", "^", true}, {"[a-]1", "-", false}, {"[a-]", "a", true},
		{"[]-a]1", "^1", false}, {`[\]-a]1`, "-1", true}, {"[z-a]", "m", true}, {"[a-c]", "-", false},
	} {
		if got := globMatch([]byte(tc.p), []byte(tc.s)); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
	// A pathological pattern takes time linear-ish, not exponential.
	p := []byte(strings.Repeat("*a", 30) + "b")
	s := []byte(strings.Repeat("a", 5000))
	if globMatch(p, s) {
		t.Fatal("matched")
	}
}

func TestSubstr(t *testing.T) {
	v := []byte("Hello World")
	for _, tc := range []struct {
		start, end int64
		want       string
	}{{0, 4, "Hello"}, {-5, -1, "World"}, {0, -1, "Hello World"}, {5, 3, ""}, {100, 200, ""}, {-100, 2, "Hel"}, {-1, -5, ""}} {
		if got := string(substr(v, tc.start, tc.end)); got != tc.want {
			t.Errorf("substr(%d, %d) = %q, want %q", tc.start, tc.end, got, tc.want)
		}
	}
}

// TestParseInt: arguments parse as Redis's string2ll parses them.
func TestParseInt(t *testing.T) {
	for in, ok := range map[string]bool{"0": true, "-1": true, "42": true, "9223372036854775807": true,
		"-9223372036854775808": true, "": false, "+1": false, "01": false, "-0": false, " 1": false, "1 ": false,
		"1.0": false, "9223372036854775808": false, "0x10": false, "-": false, "-01": false, "--1": false, "-+1": false, "00": false} {
		if _, err := parseInt([]byte(in)); (err == nil) != ok {
			t.Errorf("parseInt(%q): err = %v, want ok %v", in, err, ok)
		}
	}
}

// TestUnknownCommand: Redis's text, byte for byte.
func TestUnknownCommand(t *testing.T) {
	long := strings.Repeat("x", 50)
	for in, want := range map[string]string{
		"foo":                      "ERR unknown command 'foo', with args beginning with: ",
		"foo a b":                  "ERR unknown command 'foo', with args beginning with: 'a' 'b' ",
		"foo 1 2 3 4 5 6 7 8 9 10": "ERR unknown command 'foo', with args beginning with: '1' '2' '3' '4' '5' '6' '7' '8' '9' '10' ",
		"foo " + long + " " + long + " " + long + " tail": "ERR unknown command 'foo', with args beginning with: '" + long + "' '" + long + "' '" + long[:128-2*(50+3)] + "' ",
		"foo a\x00b \xff": "ERR unknown command 'foo', with args beginning with: 'a' '\xff' ",
	} {
		var args [][]byte
		for _, f := range strings.Fields(in) {
			f = strings.ReplaceAll(strings.ReplaceAll(f, `\x00`, "\x00"), `\xff`, "\xff")
			args = append(args, []byte(f))
		}
		if got := unknownCommand(args); got != want {
			t.Errorf("unknownCommand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSubcommandErrors: Redis's texts for a subcommand that CLIENT,
// CONFIG or COMMAND does not have, or given the wrong arguments.
func TestSubcommandErrors(t *testing.T) {
	for in, want := range map[string]string{
		"client foo":           "-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n",
		"CLIENT SETNAME":       "-ERR wrong number of arguments for 'client|setname' command\r\n",
		"CLIENT ID x":          "-ERR wrong number of arguments for 'client|id' command\r\n",
		"CONFIG GET":           "-ERR wrong number of arguments for 'config|get' command\r\n",
		"CONFIG FOO":           "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n",
		"COMMAND COUNT x":      "-ERR wrong number of arguments for 'command|count' command\r\n",
		"COMMAND HELP x":       "-ERR wrong number of arguments for 'command|help' command\r\n",
		"CLIENT GETNAME":       "",
		"config get maxmemory": "",
	} {
		a := bytes.Fields([]byte(in))
		arities := map[string]map[string]int{"client": clientArities, "config": configArities, "command": commandArities}[strings.ToLower(string(a[0]))]
		w := resp.NewWriter(2)
		if ok := subcommandOK(strings.ToLower(string(a[0])), arities, a, w); ok != (want == "") || string(w.Bytes()) != want {
			t.Errorf("%s: ok %v, wrote %q; want %q", in, ok, w.Bytes(), want)
		}
	}
}

// TestExpirePlans: EXPIRE checks its options, then its number, as Redis
// does, with Redis's texts; XX with GT is GT.
func TestExpirePlans(t *testing.T) {
	for cmd, want := range map[string]string{
		"EXPIRE k x FOO":                "ERR Unsupported option FOO",
		"EXPIRE k 1 NX XX FOO":          "ERR Unsupported option FOO",
		"EXPIRE k 1 GT LT":              "ERR GT and LT options at the same time are not compatible",
		"EXPIRE k 1 LT GT NX":           "ERR NX and XX, GT or LT options at the same time are not compatible",
		"EXPIRE k 1 XX LT":              string(errXXLT),
		"EXPIRE k 9223372036854775":     "ERR invalid expire time in 'expire' command",
		"PEXPIRE k 9223372036854775807": "ERR invalid expire time in 'pexpire' command",
		"EXPIRE k x":                    string(errNotInt),
	} {
		a := bytes.Fields([]byte(cmd))
		unit := map[string]int64{"EXPIRE": 1000, "PEXPIRE": 1}[string(a[0])]
		if _, err := planExpire(unit, false)(nil, a); err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", cmd, err, want)
		}
	}
	for cmd, want := range map[string]concordpb.Condition{"EXPIRE k 1 XX GT": concordpb.Condition_CONDITION_GT,
		"EXPIRE k 1 GT XX XX": concordpb.Condition_CONDITION_GT, "EXPIRE k 1 NX NX": concordpb.Condition_CONDITION_NX,
		"EXPIRE k 1 lt": concordpb.Condition_CONDITION_LT, "EXPIRE k 1": concordpb.Condition_CONDITION_NONE} {
		p, err := planExpire(1000, false)(nil, bytes.Fields([]byte(cmd)))
		if err != nil || p.ops[0].GetCondition() != want {
			t.Errorf("%s: planned %v, %v; want condition %v", cmd, p, err, want)
		}
	}
}

// TestSetRangePlans: an offset near MaxInt64 is over the limit (it
// overflowed past the check), and an empty value at any offset reads the
// length, as Redis answers it.
func TestSetRangePlans(t *testing.T) {
	c := &conn{s: &Server{cfg: Config{MaxValueBytes: 100}}}
	for cmd, want := range map[string]string{"SETRANGE k 9223372036854775807 x": "ERR string exceeds maximum allowed size (--max-value-bytes)",
		"SETRANGE k 100 x": "ERR string exceeds maximum allowed size (--max-value-bytes)", "SETRANGE k -1 x": string(errOffsetRange)} {
		if _, err := planSetRange(c, bytes.Fields([]byte(cmd))); err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", cmd, err, want)
		}
	}
	p, err := planSetRange(c, [][]byte{[]byte("SETRANGE"), []byte("k"), []byte("1000"), nil})
	if err != nil || !p.read || p.ops[0].GetType() != concordpb.OpType_OP_GET {
		t.Errorf("SETRANGE k 1000 \"\": planned %v, %v; want a read", p, err)
	}
}

func TestTTLReply(t *testing.T) {
	now := int64(1_000_000)
	for _, tc := range []struct {
		kind int
		r    *concordpb.OpResult
		want int64
	}{
		{ttlSeconds, &concordpb.OpResult{}, -2},
		{ttlSeconds, &concordpb.OpResult{Ok: true}, -1},
		{ttlSeconds, &concordpb.OpResult{Ok: true, ExpireAtUnixMs: now + 1499}, 1},
		{ttlSeconds, &concordpb.OpResult{Ok: true, ExpireAtUnixMs: now + 1500}, 2},
		{ttlMillis, &concordpb.OpResult{Ok: true, ExpireAtUnixMs: now + 1500}, 1500},
		{ttlMillis, &concordpb.OpResult{Ok: true, ExpireAtUnixMs: now - 5}, 0},
		{expireSeconds, &concordpb.OpResult{Ok: true, ExpireAtUnixMs: 7_500}, 7},
		{expireMillis, &concordpb.OpResult{Ok: true, ExpireAtUnixMs: 7_500}, 7_500},
	} {
		if got := ttlReply(tc.kind, tc.r, now); got != tc.want {
			t.Errorf("ttlReply(%d, %v) = %d, want %d", tc.kind, tc.r, got, tc.want)
		}
	}
}

// TestSetPlans: SET's options become one PUT with the contract's fields,
// and bad combinations are refused before any op is built.
func TestSetPlans(t *testing.T) {
	args := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	p, err := planSet(nil, args("SET k v NX GET PX 1500"))
	if err != nil {
		t.Fatal(err)
	}
	op := p.ops[0]
	if op.GetType() != concordpb.OpType_OP_PUT || op.GetCondition() != concordpb.Condition_CONDITION_NX || op.GetTtlMs() != 1500 {
		t.Errorf("SET NX GET PX 1500 planned %v", op)
	}
	w := resp.NewWriter(2)
	p.answer(w, []*concordpb.OpResult{{Ok: false, Exists: true, Value: []byte("old")}})
	if got := string(w.Bytes()); got != "$3\r\nold\r\n" {
		t.Errorf("SET NX GET on a present key rendered %q", got)
	}
	// The previous value is asked for exactly where the reply carries it;
	// a plain SET is a blind write (the shard reads nothing).
	for cmd, want := range map[string]bool{"SET k v": false, "SET k v GET": true, "SET k v XX GET": true, "SET k v EX 5": false,
		"GETSET k v": true, "SETNX k v": false, "SETEX k 5 v": false, "MSET k v j w": false} {
		a := args(cmd)
		plan := map[string]func(*conn, [][]byte) (*plan, error){"SET": planSet, "GETSET": planGetSet, "SETNX": planSetNX,
			"SETEX": planSetEX("EX", "setex"), "MSET": planMSet}[string(a[0])]
		p, err := plan(nil, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range p.ops {
			if op.GetReturnPrev() != want {
				t.Errorf("%s planned %v, want return_prev %v", cmd, op, want)
			}
		}
	}
	for _, bad := range []string{"SET k v NX XX", "SET k v EX 1 PX 1", "SET k v EX 0", "SET k v KEEPTTL EX 5", "SET k v EX", "SET k v FOO",
		"SET k v PX 9223372036854775807", "SET k v EX 9223372036854775", "SET k v EX x FOO", "SET k v GET NX XX"} {
		if _, err := planSet(nil, args(bad)); err == nil {
			t.Errorf("%s: planned, want an error", bad)
		}
	}
	// As in Redis, an option may repeat, and the last amount of an expiry
	// counts (only that one is parsed).
	for cmd, ttl := range map[string]int64{"SET k v NX NX": 0, "SET k v GET GET": 0, "SET k v EX 1 EX 2": 2000,
		"SET k v EX x EX 3": 3000, "SET k v PXAT 5 PXAT 6": 0} {
		p, err := planSet(nil, args(cmd))
		if err != nil || p.ops[0].GetTtlMs() != ttl {
			t.Errorf("%s: planned %v, %v; want a TTL of %d ms", cmd, p, err, ttl)
		}
	}
	for cmd, want := range map[string]string{"SETEX k 9223372036854775 v": "ERR invalid expire time in 'setex' command",
		"GETEX k PX 9223372036854775807": "", "GETEX k EX 1 PERSIST": "ERR syntax error", "GETEX k NX": "ERR syntax error"} {
		plan := map[string]func(*conn, [][]byte) (*plan, error){"SETEX": planSetEX("EX", "setex"), "GETEX": planGetEx}[cmd[:5]]
		if _, err := plan(nil, args(cmd)); (err == nil && want != "") || (err != nil && err.Error() != want) {
			t.Errorf("%s: err = %v, want %q", cmd, err, want)
		}
	}
}

// TestParseFloat: increments parse as Redis's string2ld parses them, within
// a double: no '_' (strconv takes "1_0"), no number a long double rounds
// to zero; a double's underflow that a long double holds reads as zero,
// down to the smallest subnormal long double (2e-4951 rounds up to it; the
// 64-bit check refused it, FuzzNumberArgs). Decimal only, under 5 KiB:
// strconv took "0x1p3" and texts of any length.
func TestParseFloat(t *testing.T) {
	for in, ok := range map[string]bool{"1.5": true, "-.5e1": true, "5.": true, "+1": true, "1e-400": true, "0e-5000": true,
		"inf": true, "1_0": false, "_1": false, "1e-5000": false, "-1e-5000": false, "nan": false, "": false, " 1": false,
		"1 ": false, "1e": false, "1e400": false, "2e-4951": true, "1.8e-4951": false, "0x1p3": false, "0X1P3": false,
		"1." + strings.Repeat("0", kv.MaxLongDoubleText): false, "1." + strings.Repeat("0", 300): true} {
		if _, err := parseFloat([]byte(in)); (err == nil) != ok {
			t.Errorf("parseFloat(%q): err = %v, want ok %v", in, err, ok)
		}
	}
}

// TestStoredFloatOK: what Redis's string2ld takes as a stored number, which
// decides INCRBYFLOAT's error for an infinite increment. A binary
// exponent after decimal digits ("0p0", found by FuzzNumberArgs) is not
// read whole by strtold (big.ParseFloat took it), and 2e-4951 rounds up
// to the smallest subnormal long double (the 64-bit check refused it).
func TestStoredFloatOK(t *testing.T) {
	for in, ok := range map[string]bool{"1": true, "-1.5": true, "1e4000": true, "inf": true, "-Infinity": true, "+INF": true,
		"0p0": false, "1p3": false, "1P-2": false, "2e-4951": true, "1.8e-4951": false, "0x10": false,
		"0e-9999": true, "1e5000": false, "1e-5000": false, "": false, " 1": false, "1 ": false, "--inf": false, "1_0": false,
		"nan": false, "1e": false, "abc": false, "1" + strings.Repeat("0", kv.MaxLongDoubleText): false} {
		if got := storedFloatOK([]byte(in)); got != ok {
			t.Errorf("storedFloatOK(%.20q) = %v, want %v", in, got, ok)
		}
	}
}

// TestCommandInfoTypes: in RESP3 a command's flags, ACL categories, tips,
// key specifications and subcommands are sets, as Redis 7.0 answers them.
func TestCommandInfoTypes(t *testing.T) {
	w := resp.NewWriter(3)
	writeCommandInfo(w, lookup([]byte("get")))
	want := "*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n~0\r\n~0\r\n~0\r\n~0\r\n"
	if got := string(w.Bytes()); got != want {
		t.Errorf("COMMAND INFO get in RESP3 = %q, want %q", got, want)
	}
}

// TestParseCursor: SCAN cursors parse as Redis's strtoul reads them: empty
// is 0, a '+' may lead; no spaces, signs past one '+', or overflow.
func TestParseCursor(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, "+0": 0, "+12": 12, "007": 7, "18446744073709551615": -1,
		"+": -2, " 0": -2, "0 ": -2, "++1": -2, "1.5": -2, "18446744073709551616": -2, "x": -2} {
		got, err := parseCursor([]byte(in))
		switch {
		case want == -2 && err == nil:
			t.Errorf("parseCursor(%q) = %d, want an error", in, got)
		case want != -2 && (err != nil || got != uint64(want)):
			t.Errorf("parseCursor(%q) = %d, %v; want %d", in, got, err, uint64(want))
		}
	}
}
