package kv

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// FuzzLongDouble reads arbitrary text as INCRBYFLOAT's increment or stored
// number (ParseLongDouble) and prints what it reads as the stored result
// (formatFloat). Properties that hold whatever the text:
//   - no panic, and the same answer twice (every replica must agree);
//   - a text strconv.ParseFloat reads as a finite double (the syntaxes
//     overlap there: no '_', no NaN) is read as its exact value rounded
//     once to 64 bits, to nearest even (big.Float.SetRat of the exact
//     big.Rat, computed apart from exactToLD), so a text whose value a
//     double holds exactly ("0.5", "1e15", "0x1.8p3") reads as that double;
//   - the printed form of any finite number read is itself read, and
//     printed again unchanged: a stored INCRBYFLOAT result is a number
//     the next INCRBYFLOAT takes, and INCRBYFLOAT by 0 leaves it as it is.
//     (Reading the printed form need not give the same long double back:
//     %.17Lf drops digits.)
func FuzzLongDouble(f *testing.F) {
	for _, tc := range redisIncrByFloat {
		if tc.stored != absent {
			f.Add([]byte(tc.stored))
		}
		f.Add([]byte(tc.incr))
	}
	for _, s := range []string{"0", "-0", "0.5", "1e15", "0x1.8p3", "0X.8P-1", "inf", "-Infinity", "1.", ".5e-3",
		"4.9e-324", "1.7976931348623157e308", "3.6e-4951", "0x1p-16445", "1.18973149535723176502e+4932"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		x, ok := ParseLongDouble(s)
		if y, ok2 := ParseLongDouble(s); ok != ok2 || (ok && !sameLD(x, y)) {
			t.Fatalf("%q read twice: %v %v, then %v %v", s, x, ok, y, ok2)
		}
		if !ok {
			return
		}
		checkAgainstParseFloat(t, s, x)
		if !x.IsInf() {
			checkPrintedReads(t, s, x)
		}
	})
}

// sameLD reports whether x and y are the same long double: value, sign
// (of zero too) and precision.
func sameLD(x, y *big.Float) bool {
	return x.Cmp(y) == 0 && x.Signbit() == y.Signbit() && x.Prec() == y.Prec() && x.IsInf() == y.IsInf()
}

// checkAgainstParseFloat: where strconv.ParseFloat reads s as a finite
// nonzero double (so its exponent is small and the exact value cheap),
// ParseLongDouble's value is that exact value rounded once to 64 bits.
func checkAgainstParseFloat(t *testing.T, s []byte, x *big.Float) {
	text := string(s)
	if len(text) > 200 || strings.ContainsAny(text, "_") {
		return // '_' is Go syntax only; long texts make big.Rat slow
	}
	d, err := strconv.ParseFloat(text, 64)
	if err != nil || d == 0 || math.IsInf(d, 0) || math.IsNaN(d) {
		return
	}
	r, okR := new(big.Rat).SetString(text)
	if !okR {
		t.Fatalf("%q: strconv reads %v, big.Rat refuses it", s, d)
	}
	want := new(big.Float).SetPrec(ldPrec).SetRat(r)
	if x.Cmp(want) != 0 {
		t.Fatalf("%q read as %s, its value rounded to 64 bits is %s", s, x.Text('p', 0), want.Text('p', 0))
	}
	if exact, _ := r.Float64(); new(big.Rat).SetFloat64(exact).Cmp(r) == 0 && x.Cmp(big.NewFloat(exact)) != 0 {
		t.Fatalf("%q is exactly the double %v, read as %s", s, exact, x.Text('g', 25))
	}
}

// checkPrintedReads: the printed form of x is read back, and prints the
// same.
func checkPrintedReads(t *testing.T, s []byte, x *big.Float) {
	printed := formatFloat(x)
	y, ok := ParseLongDouble([]byte(printed))
	if !ok {
		t.Fatalf("%q read as %s, printed as %q, which does not read back", s, x.Text('g', 25), clip(printed))
	}
	if again := formatFloat(y); again != printed {
		t.Fatalf("%q printed as %q, read back and printed again as %q", s, clip(printed), clip(again))
	}
}
