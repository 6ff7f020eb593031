package kv

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/concord-kv/concord/api/concordpb"
)

func incrFloatTextOp(k, text string) *concordpb.Op {
	return &concordpb.Op{Type: concordpb.OpType_OP_INCR_FLOAT, Key: []byte(k), FloatDeltaText: []byte(text)}
}

// redisFloatWant is what Redis 7.0.15 (x86-64) answered: a value, or its
// hash and length when the value is thousands of digits, or an error.
type redisFloatWant struct {
	value   string
	n       int    // long: the value's length
	sha     string // long: the first 16 hex digits of its SHA-256
	errCode concordpb.OpError
}

func ok(v string) redisFloatWant { return redisFloatWant{value: v} }

func long(prefix string, n int, sha string) redisFloatWant {
	return redisFloatWant{value: prefix, n: n, sha: sha}
}

var (
	notFloat = redisFloatWant{errCode: concordpb.OpError_OP_ERROR_NOT_FLOAT}
	nanInf   = redisFloatWant{errCode: concordpb.OpError_OP_ERROR_NAN_OR_INFINITY}
)

// absent stands for a key that does not exist.
const absent = "\x00absent"

// redisIncrByFloat is SET key stored (unless absent), then INCRBYFLOAT
// key incr, and Redis's answer, as redis-server 7.0.15 on x86-64 gave
// them (a script sent each pair to a fresh key; "ERR value is not a valid
// float" is notFloat, "ERR increment would produce NaN or Infinity"
// nanInf).
var redisIncrByFloat = []struct {
	stored, incr string
	want         redisFloatWant
}{
	{absent, "0.1", ok("0.1")},
	{"0.1", "0.2", ok("0.3")},
	{"0.3", "0.1", ok("0.4")},
	{"1e17", "1.5", ok("100000000000000001.5")},
	{absent, "3.0e-5", ok("0.00003")},
	{"3.0e-5", "3.0e-5", ok("0.00006")},
	{absent, "1.2345678901234567890", ok("1.23456789012345679")},
	{"1.23456789012345679", "0.1234567890123456789", ok("1.35802467913580247")},
	{absent, "12345678901234567890.5", ok("12345678901234567890")},
	{absent, "3.0000000000000001", ok("3.0000000000000001")},
	{"3.0000000000000001", "0.00000000000000000001", ok("3.0000000000000001")},
	{absent, "18446744073709551617", ok("18446744073709551616")},
	{"5.0e3", "10.5", ok("5010.5")},
	{absent, "-0", ok("0")},
	{"-0", "-0", ok("0")},
	{"-0.0", "0", ok("0")},
	{"1", "-1", ok("0")},
	{"1.7976931348623157e308", "1.7976931348623157e308", long("359538626972463139991842", 309, "6b0acdfd2f855c75")},
	{"1", "1e4932", long("100000000000000000000601", 4933, "754d16acb807875e")},
	{"1.18e4932", "1e4931", nanInf},
	{"-1.18e4932", "-1e4931", nanInf},
	{"1.18e4932", "0", long("118000000000000000000065", 4933, "c9fb919511e23fee")},
	{"1.19e4932", "0", notFloat},
	{absent, "1e400", long("100000000000000000002818", 401, "61c953f7600a3bc6")},
	{"1e400", "-1e400", ok("0")},
	{absent, "inf", nanInf},
	{absent, "-inf", nanInf},
	{absent, "nan", notFloat},
	{absent, "-nan", notFloat},
	{absent, "nan(1)", notFloat},
	{absent, "Infinity", nanInf},
	{absent, "INF", nanInf},
	{absent, "infin", notFloat},
	{"inf", "1", nanInf},
	{"-inf", "1", nanInf},
	{"nan", "1", notFloat},
	{"Inf", "inf", nanInf},
	{"abc", "inf", notFloat},
	{"inf", "-inf", nanInf},
	{absent, " 1", notFloat},
	{absent, "1 ", notFloat},
	{absent, "\t1", notFloat},
	{absent, "1\n", notFloat},
	{absent, "1\x00", notFloat},
	{" 1", "1", notFloat},
	{"1 ", "1", notFloat},
	{"\v1", "1", notFloat},
	{absent, "0x10", ok("16")},
	{absent, "0X10", ok("16")},
	{absent, "-0x10", ok("-16")},
	{absent, "0x1p3", ok("8")},
	{absent, "0x1.8p1", ok("3")},
	{absent, "0x.8", ok("0.5")},
	{absent, "0x1p-3", ok("0.125")},
	{absent, "0x1p99999", notFloat},
	{absent, "0x", notFloat},
	{absent, "0x1g", notFloat},
	{absent, "0x1p", notFloat},
	{absent, "0x.", notFloat},
	{absent, "0xffffffffffffffffff", ok("4722366482869645213696")},
	{absent, "0x1P+3", ok("8")},
	{"0x10", "1", ok("17")},
	{"0x1.8p1", "0.5", ok("3.5")},
	{absent, "1p3", notFloat},
	{"1p3", "1", notFloat},
	{absent, "e5", notFloat},
	{absent, ".", notFloat},
	{absent, "+", notFloat},
	{absent, "-", notFloat},
	{absent, "+-1", notFloat},
	{absent, "0001.5", ok("1.5")},
	{absent, "1,5", notFloat},
	{absent, "1e+", notFloat},
	{absent, "1.5e-0", ok("1.5")},
	{absent, "1e", notFloat},
	{absent, "1e5e", notFloat},
	{absent, "00", ok("0")},
	{absent, "-.0e-99999", ok("0")},
	{absent, "1e99999999999999999999", notFloat},
	{absent, "1e-99999999999999999999", notFloat},
	{absent, "0e99999999999999999999", ok("0")},
	{absent, "1e000000000000000000003", ok("1000")},
	{"1e-4940", "0", ok("0")},
	{"1e-4950", "0", ok("0")},
	{"1e-4951", "0", notFloat},
	{"1e-4952", "0", notFloat},
	{"3.6451995318824746025e-4951", "0", ok("0")},
	{"1.8225997659412373012e-4951", "0", notFloat},
	{"1.9e-4951", "0", ok("0")},
	{absent, "1e-4940", ok("0")},
	{absent, "1e-320", ok("0")},
	{"1e-4940", "1e-4940", ok("0")},
	{"0.000003814697265625", "0", ok("0.00000381469726562")},
	{"0.000011444091796875", "0", ok("0.00001144409179688")},
	{"1.1", "2.2", ok("3.3")},
	{"0.33333333333333333333", "0.33333333333333333333", ok("0.66666666666666667")},
	{"2.5e-7", "0", ok("0.00000025")},
	{"1e300", "1", long("100000000000000000000899", 301, "a72a6efd76859f89")},
	{"9223372036854775808", "1", ok("9223372036854775809")},
	{"1e19", "1", ok("10000000000000000001")},
	{"1e19", "0.5", ok("10000000000000000000")},
	{"123.456", "-123.456", ok("0")},
	{"0", "1e-17", ok("0.00000000000000001")},
	{"0", "5e-18", ok("0")},
	{"0", "4e-18", ok("0")},
	{"0", "-4e-18", ok("0")},
	{"10.5", "0.1", ok("10.6")},
	{"0.1", "0.7", ok("0.8")},
	{".1", "1.", ok("1.1")},
	{"+.5", "-.5", ok("0")},
	{"1000000000000000000000000000000", "1", ok("1000000000000000000024696061952")},
	{"0." + strings.Repeat("0", 5100) + "1", "1", notFloat},
	{"1." + strings.Repeat("0", 5110), "1", ok("2")},
	{absent, "1." + strings.Repeat("0", 5110), ok("1")},
	{absent, "1." + strings.Repeat("0", 5120), notFloat},
	{"1." + strings.Repeat("0", 5120), "1", notFloat},
	{"1e4932", "1e4932", nanInf},
	{"1.1897314953572317650e4932", "0", long("118973149535723176502126", 4933, "39319dad6400899a")},
	{"1.18973149535723176505e4932", "0", long("118973149535723176502126", 4933, "39319dad6400899a")},
	{"1.18973149535723176508e4932", "0", notFloat},
	{"-1e4932", "-1e4932", nanInf},
	{"1e-5000", "1", notFloat},
	{"0x1p-16445", "0", ok("0")},
	{"0x1p-16446", "0", notFloat},
	{"0x1.0000001p-16446", "0", ok("0")},
	{"0x1p16383", "0x1p16383", nanInf},
	{"100", "1e-300", ok("100")},
	{"1", "0.9999999999999999999999", ok("2")},
	{"0.1", "0.1", ok("0.2")},
}

// TestIncrFloatTextMatchesRedis applies each INCR_FLOAT with its
// increment as text to a key set to the stored text and compares the
// result, and the key's value after it, with Redis's answers: long double
// arithmetic, strtold's reading (hexadecimal, infinities, subnormals, the
// range edges, the 5 KiB limit) and %.17Lf printing.
func TestIncrFloatTextMatchesRedis(t *testing.T) {
	f := newFixture(t)
	for i, tc := range redisIncrByFloat {
		k := "k" + strings.Repeat("x", i)
		if tc.stored != absent {
			f.op(0, 0, put(k, tc.stored))
		}
		r := f.op(0, 0, incrFloatTextOp(k, tc.incr))
		what := "INCRBYFLOAT " + clip(tc.incr) + " on " + clip(tc.stored)
		if r.GetError() != tc.want.errCode {
			t.Errorf("%s: error %v (value %s), want %v", what, r.GetError(), clip(string(r.GetValue())), tc.want.errCode)
			continue
		}
		if tc.want.errCode != concordpb.OpError_OP_ERROR_NONE {
			f.state(0, k, storedOrNil(tc.stored), 0) // unchanged
			continue
		}
		got := string(r.GetValue())
		if !tc.want.matches(got) {
			t.Errorf("%s = %s (%d bytes), want %s", what, clip(got), len(got), clip(tc.want.value))
		}
		f.state(0, k, []byte(got), 0)
	}
}

func (w redisFloatWant) matches(got string) bool {
	if w.sha == "" {
		return got == w.value
	}
	sum := sha256.Sum256([]byte(got))
	return len(got) == w.n && strings.HasPrefix(got, w.value) && hex.EncodeToString(sum[:8]) == w.sha
}

func storedOrNil(s string) []byte {
	if s == absent {
		return nil
	}
	return []byte(s)
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
