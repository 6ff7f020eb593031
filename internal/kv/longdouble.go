package kv

import (
	"math/big"
	"strings"
)

// This file reads numbers as Redis's INCRBYFLOAT does (util.c string2ld:
// glibc's strtold into an x87 long double, the whole text, no leading
// space, no NaN, not out of range) for the text form of INCR_FLOAT
// (Op.float_delta_text). Everything is exact integer arithmetic and
// correctly rounded math/big operations, so every replica computes the
// same bits on any platform.

const (
	// ldPrec is the x87 long double's mantissa: 64 bits.
	ldPrec = 64
	// ldMaxExp is the big.Float exponent (MantExp: x = m·2^exp, ½ ≤ m < 1)
	// of the largest finite long doubles; a larger one is infinity.
	ldMaxExp = 16384
	// ldMinNormalExp is the exponent of the smallest normal long double,
	// 2^-16382; below it a long double has fewer mantissa bits.
	ldMinNormalExp = -16381
	// ldSubnormalBits is how many mantissa bits a subnormal of exponent e
	// keeps: e + ldSubnormalBits (the smallest, 2^-16445, keeps one).
	ldSubnormalBits = 16445
	// MaxLongDoubleText is Redis's MAX_LONG_DOUBLE_CHARS: string2ld reads
	// texts shorter than it only.
	MaxLongDoubleText = 5 * 1024
	// expClamp bounds a parsed exponent: past it any text of fewer than
	// MaxLongDoubleText digits is infinite or zero, as strtold finds.
	expClamp = 1 << 20
)

// ParseLongDouble reads s as Redis's string2ld does, at long double
// precision: decimal or hexadecimal ("0x1.8p3"), optionally signed, or
// an infinity ("inf", "infinity", any case: a big.Float infinity). False
// for what Redis refuses: empty, MaxLongDoubleText bytes or more, leading
// white space, any byte strtold does not consume (trailing space, NUL),
// NaN, and a number that overflows to infinity or underflows to zero.
func ParseLongDouble(s []byte) (*big.Float, bool) {
	if len(s) == 0 || len(s) >= MaxLongDoubleText || isCSpace(s[0]) {
		return nil, false
	}
	neg := s[0] == '-'
	body := string(s)
	if s[0] == '-' || s[0] == '+' {
		body = body[1:]
	}
	var x *big.Float
	var ok bool
	switch lower := strings.ToLower(body); {
	case lower == "inf" || lower == "infinity":
		x, ok = new(big.Float).SetInf(false), true
	case strings.HasPrefix(lower, "0x"):
		x, ok = parseHexLD(lower[2:])
	default:
		x, ok = parseDecimalLD(lower)
	}
	if !ok {
		return nil, false
	}
	if neg {
		x.Neg(x)
	}
	return x, true
}

// isCSpace is C's isspace in the C locale.
func isCSpace(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r')
}

// parseDecimalLD reads an unsigned decimal: digits with an optional
// point (at least one digit), then an optional exponent.
func parseDecimalLD(s string) (*big.Float, bool) {
	digits, frac, rest := scanMantissa(s, isDecDigit)
	if digits == "" {
		return nil, false
	}
	exp, ok := scanExponent(rest, 'e')
	if !ok {
		return nil, false
	}
	return exactToLD(digits, 10, exp-len(frac))
}

// parseHexLD reads what follows "0x": hex digits with an optional point
// (at least one digit), then an optional binary exponent "p".
func parseHexLD(s string) (*big.Float, bool) {
	digits, frac, rest := scanMantissa(s, isHexDigit)
	if digits == "" {
		return nil, false // strtold reads "0x" as 0 and stops at the x
	}
	exp, ok := scanExponent(rest, 'p')
	if !ok {
		return nil, false
	}
	return exactToLD(digits, 2, exp-4*len(frac))
}

// scanMantissa splits digits[.digits] off s: all its digits, those after
// the point, and the rest of s.
func scanMantissa(s string, isDigit func(byte) bool) (digits, frac, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	digits, rest = s[:i], s[i:]
	if rest == "" || rest[0] != '.' {
		return digits, "", rest
	}
	j := 1
	for j < len(rest) && isDigit(rest[j]) {
		j++
	}
	frac = rest[1:j]
	return digits + frac, frac, rest[j:]
}

// scanExponent reads an optional exponent introduced by mark (lower
// case: the caller lowered s) that must end s: mark, a sign, digits. A
// mark without digits is not consumed by strtold, so it is refused here
// (the text would not be whole). The value is clamped to ±expClamp.
func scanExponent(s string, mark byte) (int, bool) {
	if s == "" {
		return 0, true
	}
	if s[0] != mark {
		return 0, false
	}
	s = s[1:]
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "" {
		return 0, false
	}
	e := 0
	for i := 0; i < len(s); i++ {
		if !isDecDigit(s[i]) {
			return 0, false
		}
		e = min(e*10+int(s[i]-'0'), expClamp)
	}
	if neg {
		e = -e
	}
	return e, true
}

func isDecDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHexDigit(c byte) bool { return isDecDigit(c) || (c >= 'a' && c <= 'f') }

// exactToLD rounds digits (base 10 or 16 digits of an integer m) times
// radix^exp (radix 10, or 2 for hex digits, whose exp counts bits) to a
// long double as strtold does: to nearest, ties to even, subnormals kept
// with the bits they have; false on overflow to infinity or underflow of
// a nonzero number to zero (strtold's ERANGE, which Redis refuses).
func exactToLD(digits string, radix, exp int) (*big.Float, bool) {
	base := 10
	if radix == 2 {
		base = 16
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return new(big.Float).SetPrec(ldPrec), true // zero: no range error
	}
	m, _ := new(big.Int).SetString(digits, base)
	if tooFar(m, len(digits), radix, exp) {
		return nil, false
	}
	num, den := m, big.NewInt(1)
	p := new(big.Int).Exp(big.NewInt(int64(radix)), big.NewInt(int64(abs(exp))), nil)
	if exp >= 0 {
		num.Mul(num, p)
	} else {
		den = p
	}
	return roundLD(num, den)
}

// tooFar reports whether m·radix^exp (m of n digits) is certainly beyond a
// long double's range, infinite or zero, so that it is not built
// (10^1000000 would be big): a decimal from 10^4933 up overflows and one
// below 10^-4951 (under half the smallest subnormal, 3.6e-4951) is zero;
// likewise in powers of two. Nearer the edges roundLD decides.
func tooFar(m *big.Int, n, radix, exp int) bool {
	if radix == 10 {
		lead := exp + n - 1 // m·10^exp is in [10^lead, 10^(lead+1))
		return lead > 4932 || lead < -4952
	}
	lead := exp + m.BitLen() - 1 // in [2^lead, 2^(lead+1))
	return lead >= ldMaxExp || lead < -ldSubnormalBits-1
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// roundLD rounds num/den (both positive) to a long double, once: at 64
// bits, or at the bits a subnormal of its exponent keeps.
func roundLD(num, den *big.Int) (*big.Float, bool) {
	a, b := new(big.Float).SetInt(num), new(big.Float).SetInt(den) // exact
	x := new(big.Float).SetPrec(ldPrec).Quo(a, b)
	e := x.MantExp(nil)
	switch {
	case e > ldMaxExp:
		return nil, false // overflow
	case e >= ldMinNormalExp:
		return x, true
	case e+ldSubnormalBits >= 1:
		return new(big.Float).SetPrec(uint(e+ldSubnormalBits)).Quo(a, b).SetPrec(ldPrec), true
	case e+ldSubnormalBits == 0 && new(big.Int).Lsh(num, ldSubnormalBits+1).Cmp(den) > 0:
		// in [2^-16446, 2^-16445): above the half of the smallest
		// subnormal rounds up to it; the half itself rounds to even, 0
		return new(big.Float).SetPrec(ldPrec).SetMantExp(big.NewFloat(0.5), 1-ldSubnormalBits), true
	}
	return nil, false // underflow to zero
}

// AddLongDouble adds two long doubles as the x87 does, rounding to 64
// bits; false when the sum is infinite or NaN (an infinity in either, or
// an overflow). A sum in the subnormal range is exact (both are multiples
// of the smallest subnormal), so no second rounding is needed.
func AddLongDouble(x, y *big.Float) (*big.Float, bool) {
	if x.IsInf() || y.IsInf() {
		return nil, false
	}
	sum := new(big.Float).SetPrec(ldPrec).Add(x, y)
	if sum.MantExp(nil) > ldMaxExp {
		return nil, false
	}
	return sum, true
}
