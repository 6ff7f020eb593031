package redisapi

import (
	"math"
	"regexp"
	"strconv"
	"testing"

	"github.com/concord-kv/concord/internal/kv"
)

// strtoldDecimal is the text C's strtold reads whole as a decimal number
// or an infinity (NaN aside): what Redis's string2ld takes, apart from its
// range and length checks. Hexadecimal floats are left out: Concord
// below cluster version 7 reads none.
var strtoldDecimal = regexp.MustCompile(`^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|(?i:inf|infinity))$`)

// FuzzNumberArgs reads arbitrary text as the Redis front end's integer
// and float arguments and stored numbers. Properties, each against a
// reference apart from the code under test:
//   - parseInt takes exactly the canonical base-10 form of an int64, as
//     Redis's string2ll does (strconv.FormatInt gives it back);
//   - parseFloat (an increment, below version 7) and storedFloatOK (whether
//     Redis reads a stored number, for INCRBYFLOAT by an infinity) take only
//     decimal text strtold reads whole, under 5 KiB;
//   - storedFloatOK agrees on decimal text with kv.ParseLongDouble, the
//     shard's reading from version 7 (held to strtold in internal/kv);
//   - a decimal whose double is finite and normal is a number to both.
func FuzzNumberArgs(f *testing.F) {
	for _, s := range []string{"0", "-0", "+1", "01", "-9223372036854775808", "9223372036854775808", "12", " 1",
		"1.5", "-.5e1", "5.", "inf", "-Infinity", "1e400", "1e-5000", "0x10", "1_0", "nan", "1e"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		v, err := parseInt(b)
		if canonical := err == nil && strconv.FormatInt(v, 10) == s; canonical != (err == nil) {
			t.Fatalf("parseInt(%q) = %d, %v", s, v, err)
		}
		if err != nil {
			if n, perr := strconv.ParseInt(s, 10, 64); perr == nil && strconv.FormatInt(n, 10) == s {
				t.Fatalf("parseInt(%q) refuses the canonical form of %d: %v", s, n, err)
			}
		}
		decimal := strtoldDecimal.MatchString(s) && len(s) < kv.MaxLongDoubleText
		if _, err := parseFloat(b); err == nil && !strtoldDecimal.MatchString(s) {
			t.Fatalf("parseFloat takes %q, which strtold does not read whole", s)
		}
		if storedFloatOK(b) && !decimal {
			t.Fatalf("storedFloatOK takes %q, which strtold does not read whole (or is 5 KiB or more)", s)
		}
		if _, ld := kv.ParseLongDouble(b); decimal && ld != storedFloatOK(b) {
			t.Fatalf("storedFloatOK(%q) = %v, the long double reading says %v", s, !ld, ld)
		}
		if d, err := strconv.ParseFloat(s, 64); decimal && err == nil && !math.IsInf(d, 0) && math.Abs(d) >= 0x1p-1022 {
			if _, err := parseFloat(b); err != nil || !storedFloatOK(b) {
				t.Fatalf("%q, the double %v, is refused: parseFloat %v, storedFloatOK %v", s, d, err, storedFloatOK(b))
			}
		}
	})
}
